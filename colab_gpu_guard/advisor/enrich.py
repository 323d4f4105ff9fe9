"""`advise`: a diagnosis plus what can be learned safely from this process.

Leftover tensors by name, NVML's list of GPU processes; driver and build versions and each
GPU's capability (setup_facts.py), the cuBLAS or cuDNN loaded (cuda_libraries.py); a sticky
error marks the CUDA context broken, and the failed call's traceback frames can be released
after an out-of-memory error. `_ENRICHERS` says which facts each kind gets.

Rules kept here:
- nothing here raises into the caller: an advisor failure must never hide the user's
  traceback;
- no CUDA call is made after a sticky error (the context is gone and calls may hang); NVML is
  used instead where a device fact is needed;
- torch and numpy are never imported at module level.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from typing import Any, Callable, Optional

from ..frameworks import torch as torch_support
from ..seeding import determinism
from ..units import format_bytes
from . import (
    cuda_libraries,
    machine,
    memory_fixes,
    origin,
    released_frames,
    setup_facts,
)
from .advice import DEL_LEFTOVERS
from .diagnosis import Diagnosis, Section, classify, rebuild
from .kinds import (
    ATTENTION_KERNELS,
    CUBLAS_DETERMINISM,
    CUDA_DRIVER_OOM,
    DEVICE_BUSY,
    DRIVER_MISMATCH,
    DRIVER_VERSIONS,
    FORKED_CUDA,
    GPU_TOO_OLD,
    INVALID_DEVICE,
    LATE_KERNEL_ERROR,
    LAUNCH_RESOURCES,
    LIBRARY_SETUP,
    MEMORY_IN_DISGUISE,
    MEMORY_KINDS,
    NO_GPU,
    NONDETERMINISTIC_OP,
    OUT_OF_MEMORY,
    STICKY_ERROR,
    STICKY_ERROR_ELSEWHERE,
)
from .machine import gpu_processes

# ---------------------------------------------------------------- facts from this process


def _leftover_holders(namespace: Optional[dict], device: Optional[str], limit: int = 5) -> Any:
    """The biggest holders of leftover arrays, by the variable (or hidden holder: output
    history, a traceback) that holds them, from colab_gpu_guard.leftovers when present."""
    from ..cells.notebook_leftovers import find_leftovers

    try:
        found = find_leftovers(device=device, namespace=namespace, budget_s=2.0)
        groups = found.groups() if found else []
    except Exception:  # the scan meets every user object: advice without holders
        return None
    return list(groups[:limit])  # hidden holders first, then the biggest


def _describe_holder(group: Any) -> str:
    """'Out[3] 4 MiB (output history: 1 array on cuda:0; %gpu_reset releases it)'."""
    text = f"{group.name} {format_bytes(group.nbytes)} ({group.describe()}"
    if group.released_by_reset:
        text += "; %gpu_reset releases it"
    return text + ")"


def _enrich(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Add facts learned from this process. Each part is guarded on its own."""
    for enrich in _ENRICHERS.get(diagnosis.kind, ()):
        try:
            enrich(diagnosis, namespace)
        except Exception:  # torch, NVML or user objects: one failing leaves the rest
            continue


def _enrich_oom(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    is_torch_cuda = diagnosis.details.get("framework") in (None, "torch")
    holders = _leftover_holders(namespace, "cuda" if is_torch_cuda else None)
    if holders:
        diagnosis.facts["biggest leftovers"] = "; ".join(_describe_holder(h) for h in holders)
        resets = memory_fixes.RESET_FIXES.values()
        if diagnosis.fixes and diagnosis.fixes[0] in resets:
            diagnosis.fixes[0] += DEL_LEFTOVERS
    if is_torch_cuda:
        _rerun_leaks_on_cuda(diagnosis, namespace)
    if is_torch_cuda and setup_facts.context_usable():
        torch = torch_support.loaded()
        device = diagnosis.details.get("device", 0)
        for stats in torch_support.allocator_stats(torch):
            if stats.device == device:
                diagnosis.facts["allocated now"] = (
                    f"{format_bytes(stats.allocated)} by tensors, "
                    f"{format_bytes(stats.reserved)} reserved by PyTorch on cuda:{device}"
                )


def _rerun_leaks_on_cuda(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """The cells of this notebook that kept CUDA memory again each time they were rerun,
    and what holds it (the tracker's judgement): the commonest cause of an out-of-memory
    error on a cell's second run."""
    from .. import notebook_refs
    from ..cells import past_leaks, tracker

    shell, user_ns = notebook_refs.resolve_namespace(None, namespace)
    if shell is None:
        return
    leaks = [r for r in tracker.rerun_leaks(tracker.memory_history(shell)) if "cuda" in r.leak_kind]
    if not leaks:
        return
    diagnosis.facts["kept again on rerun"] = "; ".join(
        f"{cells} held by {holder}" if holder else cells
        for cells, holder in past_leaks.holders_now(leaks, shell, user_ns)
    )
    diagnosis.fixes.insert(
        0,
        "A cell you rerun keeps GPU memory again each time (`kept again on rerun` above): "
        "what holds its earlier results is named there. Output history and tracebacks: "
        "`%gpu_reset` releases them. A list it fills: keep numbers (`loss.item()`) or "
        "`.detach()`ed tensors in it, and `del` or clear it before running the cell again.",
    )


def _enrich_forked(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    import multiprocessing

    method = multiprocessing.get_start_method(allow_none=True)
    diagnosis.facts["start method"] = (
        method or f"not chosen yet (the default here is {origin.default_start_method()})"
    )
    torch = torch_support.loaded()
    if torch is not None:
        initialised = torch_support.cuda_initialized(torch)
        diagnosis.facts["CUDA initialised here"] = "yes" if initialised else "no"


def _enrich_cublas(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    value = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    diagnosis.facts["CUBLAS_WORKSPACE_CONFIG"] = repr(value) if value is not None else "unset"
    accepted = determinism.CUBLAS_DETERMINISTIC_CONFIGS
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        requirement = determinism.cublas_requirement(torch)
        needed = {True: "needs it", False: "does not need it", None: "unknown"}[requirement.needed]
        diagnosis.facts["this torch"] = f"{needed} ({requirement.evidence})"
        if requirement.needed is False:
            diagnosis.summary += (
                " The torch in this kernel has no such check, so this error did not come "
                "from it: look for a subprocess or worker running an older torch; its "
                "environment needs the variable."
            )
            # restarting this kernel or %seed_all here changes nothing for that process
            diagnosis.fixes = [
                "Set the variable in this kernel before launching the subprocess or workers "
                "(they inherit this kernel's environment): "
                "`os.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'`; a process already "
                "running keeps the value it read.",
                "Or, in the code that process runs, "
                "`torch.use_deterministic_algorithms(True, warn_only=True)`: ops that cannot "
                "be deterministic warn instead of raising.",
                "Or upgrade torch where that process runs: torch 2.10 and later no longer "
                "check the variable (pytorch/pytorch#161749).",
            ]
    if value is not None and value not in accepted:
        diagnosis.fixes.insert(
            0,
            f"CUBLAS_WORKSPACE_CONFIG is {value!r}, which cuBLAS does not accept for "
            f"determinism: it must be {' or '.join(accepted)}, set before the first cuBLAS "
            "matmul of the process.",
        )


def _enrich_nondet(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        flags = determinism.read_flags(torch)
        diagnosis.facts["deterministic mode"] = f"{flags.algorithms} (warn_only={flags.warn_only})"
        if flags.algorithms is False:
            diagnosis.summary += (
                " Deterministic mode is off in this kernel now: it was switched off after the "
                "error, or the error came from another process."
            )


def _enrich_processes(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    processes = gpu_processes()
    if processes is None:
        diagnosis.facts["GPU processes"] = "NVML not available here (check `!nvidia-smi`)"
        return
    own = os.getpid()
    others = [p for p in processes if p.pid != own]
    mine = [p for p in processes if p.pid == own]
    diagnosis.details["gpu_processes"] = [asdict(p) for p in processes]
    if others and not mine and _has_cuda_context():
        # A PID namespace (a container): NVML lists host PIDs, so this kernel is one of
        # them, and a host PID looked up here names another process or none.
        diagnosis.facts["GPU processes"] = "; ".join(
            f"pid {p.pid} on GPU {p.device} ({format_bytes(p.used_bytes)})" for p in others
        )
        diagnosis.notes.append(
            "NVML lists no process with this kernel's PID: inside a container it reports "
            "the host's PIDs, so this kernel is one of the GPU processes listed (their names "
            "are left out: looked up here, those PIDs name other processes)."
        )
        return
    if others:
        diagnosis.facts["other GPU processes"] = "; ".join(
            f"pid {p.pid} {p.name} on GPU {p.device} ({format_bytes(p.used_bytes)})" for p in others
        )
    else:
        diagnosis.facts["other GPU processes"] = "none that NVML can see"
    if mine:
        diagnosis.facts["this process"] = "; ".join(
            f"GPU {p.device}: {format_bytes(p.used_bytes)}" for p in mine
        )


def _has_cuda_context() -> bool:
    try:
        return bool(torch_support.devices_with_context(torch_support.loaded()))
    except AttributeError:  # a torch-like module without torch._C
        return False


def _enrich_gpu_memory(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Each GPU's memory as NVML sees it (no CUDA call): shows whether the GPU is full."""
    for device in machine.gpu_memory():
        used, total = device["used"], device["total"]
        diagnosis.facts[f"GPU {device['index']} memory in use"] = (
            f"{format_bytes(used)} of {format_bytes(total)}"
        )


def _enrich_driver_oom(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Tell the two causes of 'CUDA error: out of memory' apart where this process can: had
    CUDA started here when it failed? Yes if this kernel's torch had started it
    (torch.cuda.is_initialized, no CUDA call) or NVML lists this process on a GPU."""
    if diagnosis.details.get("child") or diagnosis.details.get("framework") not in (
        None,
        "torch",
    ):
        return  # another process's or framework's error: this kernel's state says nothing
    torch = torch_support.loaded()
    by_torch = torch is not None and bool(torch_support.cuda_initialized(torch))
    processes = gpu_processes()
    listed = processes is not None and any(p.pid == os.getpid() for p in processes)
    if torch is None and processes is None:
        return  # neither torch nor NVML can say: both causes stand
    started = by_torch or listed
    diagnosis.details["cuda_started_here"] = started
    advice = memory_fixes.driver_oom(diagnosis.details)
    diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)
    diagnosis.facts["CUDA started in this kernel"] = (
        ("yes (PyTorch)" if by_torch else "yes (NVML lists this process on a GPU)")
        if started
        else "no"
    )


def _enrich_traced(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Where the failing cell was traced (`%%gpu_trace`, `%gpu_trace on`): the lines whose
    memory was alive when CUDA ran out, from the allocator's out-of-memory observer (kept
    for the failure that surfaced, handed out once)."""
    from ..trace.oom import at_failure  # the trace room, at an out-of-memory only
    from ..trace.views import place

    found = at_failure(disguised=diagnosis.kind == MEMORY_IN_DISGUISE)
    if found is None or not found.lines:
        return
    lines = [f"{format_bytes(line.nbytes)} from `{place(line.where)}`" for line in found.lines]
    diagnosis.sections.append(Section(TRACED_TITLE, lines))


TRACED_TITLE = "memory alive at the failure, by line (traced)"

_ENRICHERS: dict[str, tuple[Callable[[Diagnosis, Optional[dict]], None], ...]] = {
    OUT_OF_MEMORY: (_enrich_oom, _enrich_traced),
    MEMORY_IN_DISGUISE: (
        setup_facts.enrich_engine,
        _enrich_oom,
        _enrich_gpu_memory,
        cuda_libraries.enrich_library,
        _enrich_traced,
    ),
    CUDA_DRIVER_OOM: (_enrich_driver_oom, _enrich_processes, _enrich_oom),
    STICKY_ERROR: (origin.enrich_sticky,),
    STICKY_ERROR_ELSEWHERE: (origin.enrich_elsewhere,),
    LATE_KERNEL_ERROR: (setup_facts.enrich_driver,),
    INVALID_DEVICE: (setup_facts.enrich_devices,),
    DEVICE_BUSY: (setup_facts.enrich_compute_mode, _enrich_processes),
    FORKED_CUDA: (_enrich_forked,),
    CUBLAS_DETERMINISM: (_enrich_cublas,),
    NONDETERMINISTIC_OP: (_enrich_nondet,),
    DRIVER_MISMATCH: (setup_facts.enrich_driver,),
    DRIVER_VERSIONS: (setup_facts.enrich_driver_versions,),
    GPU_TOO_OLD: (setup_facts.enrich_capability,),
    LIBRARY_SETUP: (cuda_libraries.enrich_library,),
    LAUNCH_RESOURCES: (setup_facts.enrich_capability,),  # the GPU's name, for the report
    ATTENTION_KERNELS: (setup_facts.enrich_attention,),
    NO_GPU: (setup_facts.enrich_no_gpu,),
}
# A kind left out has nothing this process can add (device mismatch, a generator's device,
# NCCL and stream capture are told by the message alone). Another room's
# facts join a kind here, as the memory trace's lines alive at the failure do (a Section of
# the answer).


# ---------------------------------------------------------------- advise (public)


def advise(
    exc: BaseException,
    *,
    release_frames: bool = False,
    namespace: Optional[dict] = None,
) -> Optional[Diagnosis]:
    """Diagnose a CUDA error: the cause, the facts that show it, and what to do.

    Returns None for anything that is not a recognised CUDA error. Side effects: a sticky
    error raised by this process's own CUDA call marks the CUDA context broken (see
    cuda_health); one carried from a child process, or seen while PyTorch never started
    CUDA here, does not, and is advised as another process's error; with `release_frames`, an
    out-of-memory error's traceback frames are cleared so the tensors they held are freed
    (the exception's traceback then shows no local variables; not done when the
    out-of-memory error is only the implicit __context__ of another error, whose frames stay
    for %debug), and a note names the function frames cleared and the bytes of arrays that
    freed (`released_frames`). `namespace` is where to look for leftover tensors by name (a
    notebook's user namespace). Never raises.
    """
    try:
        diagnosis = classify(exc)
        if diagnosis is None:
            return None
        if diagnosis.kind == STICKY_ERROR and not origin.own_sticky_error(diagnosis):
            diagnosis = rebuild(diagnosis, origin="not started here")
    except Exception:  # a user's exception (see classify): the advice never raises
        return None
    try:
        # An out-of-memory error met only as the implicit context of another error (say, a
        # KeyError while handling it) is reported, but that error's frames stay for %debug.
        if (
            release_frames
            and diagnosis.kind in MEMORY_KINDS
            and diagnosis.details.get("found_in") != "context"
        ):
            release = released_frames.release_frames(exc)
            diagnosis.frames_released = len(release.functions)
            diagnosis.frames_released_bytes = release.freed_bytes
            note = release.note()
            if note:
                diagnosis.notes.append(note)
    except Exception:  # torch and user frames: the advice shows without the release
        pass
    with contextlib.suppress(Exception):  # torch, NVML, user objects: the last net
        _enrich(diagnosis, namespace)
    child = diagnosis.details.get("child")
    if child and diagnosis.kind != STICKY_ERROR_ELSEWHERE:
        figures = (
            ": the figures in its message are that process's"
            if (diagnosis.kind in MEMORY_KINDS)
            else ""
        )
        diagnosis.notes.append(f"Raised in {child} and raised again here{figures}.")
    return diagnosis
