"""The notes a `GpuStatus` snapshot carries: what is missing or unusual, and why, in the
user's words (no GPU on Colab, a busy or broken context, a CPU-only torch, a kernel NVML
could not identify inside a container)."""

from __future__ import annotations

from ..nvml import NvmlSnapshot
from ..units import format_bytes
from .matching import CONTEXT_MARGIN
from .snapshot import DeviceMemory, HostInfo, TorchInfo

COLAB_NO_GPU = (
    "this Colab runtime has no GPU: Runtime > Change runtime type > a GPU accelerator "
    "(then rerun your cells)"
)

NO_GPU_LISTED = "NVML works but lists no GPU"


def cpu_only_note(torch_info: TorchInfo) -> str:
    """The note for a CPU-only torch on a machine with a GPU."""
    return f"torch {torch_info.version} is a CPU-only build: it cannot use a GPU"


def status_notes(
    host: HostInfo, torch_info: TorchInfo, view: NvmlSnapshot, memory: tuple[DeviceMemory, ...]
) -> list[str]:
    from .. import cuda_health

    notes = []
    if not view.available or not view.devices:
        if host.runtime == "Colab":
            notes.append(COLAB_NO_GPU)
        elif view.available and view.reason("devices") is None:
            notes.append(NO_GPU_LISTED)
    if torch_info.health == cuda_health.BROKEN:
        notes.append(cuda_health.RESTART_ADVICE)
    elif torch_info.health == cuda_health.BUSY:
        notes.append(
            "the GPU is still running queued CUDA work: busy, not broken (%gpu_reset waits "
            "for it before emptying the cache)"
        )
    elif torch_info.health == cuda_health.FORKED:
        notes.append(cuda_health.FORKED_DETAIL)
    if torch_info.cpu_only:
        if view.devices:  # without a GPU, the torch line says "CPU-only build" already
            notes.append(cpu_only_note(torch_info))
    elif torch_info.health == cuda_health.FORKED:
        pass  # said above: CUDA cannot start in this process at all
    elif torch_info.cuda_runtime is not None and not torch_info.cuda_initialized:
        notes.append("CUDA is not initialised in this kernel yet: no allocator figures")
    for item in memory:
        if item.matched_by == "none" and view.available and view.devices:
            notes.append(f"cuda:{item.device} could not be matched to an NVML GPU")
    pid_note = (
        f"NVML lists no process with this kernel's PID {host.pid}: inside a container "
        "NVML reports host PIDs"
    )
    names_note = False
    for item in memory:
        fit = (
            f"between torch's {format_bytes(item.reserved)} reserved and that + "
            f"{format_bytes(CONTEXT_MARGIN)} for the CUDA context"
        )
        if item.nvml_identified_by in ("memory", "not identified") and not names_note:
            names_note = True
            notes.append(
                "process names are not shown: NVML's PIDs are the host's, and in this "
                "container they name other processes or none"
            )
        if item.nvml_identified_by == "memory" and item.nvml_index is not None:
            pids = {p.pid for p in view.devices[item.nvml_index].processes or () if p.this_process}
            notes.append(
                f"{pid_note}; on GPU {item.nvml_index} this kernel was matched by memory: "
                f"PID {', '.join(map(str, sorted(pids)))}, the one process using "
                f"{format_bytes(item.nvml_used_by_this_process)}, {fit}"
            )
        elif item.nvml_identified_by == "not identified":
            notes.append(
                f"{pid_note}; on GPU {item.nvml_index} this kernel could not be identified "
                f"by memory either (exactly one process must use {fit}; here none or several "
                "do): its memory is among the processes listed"
            )
        elif item.nvml_identified_by == "not listed":
            notes.append(
                f"NVML lists no process on GPU {item.nvml_index}, not even this kernel, which "
                "has a CUDA context there: per-process figures are not available"
            )
    return notes
