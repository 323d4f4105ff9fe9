"""The text view of a `GpuStatus` (``str(status)``, ``%gpu_status``, the CLI) and the
line helpers the HTML view shares with it."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple, Optional

from .. import cuda_health
from ..cells.history_text import leak_text
from ..nvml import INCLUDES_RESERVED, V1, MigInstance, NvmlDevice, NvmlProcess
from ..units import NA, counted, escape_lines, format_bytes

if TYPE_CHECKING:
    from ..cells.cell_memory import CellMemory
    from ..leftovers.groups import LeftoverGroups
    from ..leftovers.records import Leftover
    from .snapshot import DeviceMemory, GpuStatus, HostInfo


def render_text(status: GpuStatus) -> str:
    text = _render_text(status)
    if status.host.process != "kernel":  # a script or `python -m colab_gpu_guard status`
        text = text.replace("this kernel", "this process")
    return text


def _render_text(status: GpuStatus) -> str:
    """The lines, each escaped (`units.escape_lines`): process, GPU and variable names are
    chosen by others (another user on a shared host, the notebook)."""
    lines = [f"GPU status | {status.host.runtime} | {when(status)} | {status.duration_ms:.1f} ms"]
    lines += [f"  {line}" for line in version_lines(status)]
    lines += [f"!! {banner}" for banner in lost_banners(status)]
    view = status.nvml
    lines += [f"  {line}" for line, _missing in nvml_summary(status)]
    for device in view.devices:
        lines.append(device_title(status, device))
        if device.lost:  # every field would read "n/a (GPU is lost)": the banner says it
            lines.append(f"  lost         {LOST_ROW}")
            lines += [
                f"  this kernel  {kernel_line(item)}" for item in status.memory_for(device.index)
            ]
            continue
        lines.append(f"  memory       {memory_line(device)}")
        lines.append(f"  load         {load_line(device)}")
        lines.append(f"  modes        {mode_line(device)}")
        for instance in device.mig_instances:
            lines.append(f"  {mig_line(instance)}")
        for item in status.memory_for(device.index):
            lines.append(f"  this kernel  {kernel_line(item)}")
        lines.extend(_process_text(status, device))
        if device.unavailable:
            lines.append(f"  not available: {reasons(device)}")
    for item in status.memory:
        if item.nvml_index is None:
            lines.append(f"this kernel  {kernel_line(item)}")
    lines.append(f"host RAM     {host_ram(status.host)}")
    if status.leftover_groups is not None:
        groups = grouped(status)
        lines.append(leftovers_heading(status))
        lines += [f"  {line}" for line in groups.lines()]
        advice = groups.advice()
        lines += [f"  {advice}"] if advice else []
    elif status.leftovers is not None:
        lines.append(leftovers_heading(status))
        lines += [f"  {_leftover_line(entry)}" for entry in status.leftovers]
    elif status.leftovers_note and status.leftovers_note != "not collected":
        lines.append(f"leftovers    {status.leftovers_note}")
    if status.history is not None or status.history_note:
        lines.append("history" + (f" ({status.history_note})" if status.history_note else ""))
        lines += [f"  {cell_line(record)}" for record in status.history or ()]
    if status.notes:
        lines.append("notes")
        lines += [f"  - {note}" for note in status.notes]
    return escape_lines(lines)  # names NVML and the notebook chose: no raw control character


def _process_text(status: GpuStatus, device: NvmlDevice) -> list[str]:
    if device.processes is None:
        if status.nvml.processes_queried:
            return [f"  processes    {NA} ({device.reason('processes') or 'not listed'})"]
        return []
    if not device.processes:
        if kernel_not_listed(status, device):
            return [f"  processes    none ({KERNEL_UNLISTED})"]
        return ["  processes    none"]
    total = sum(p.used_memory or 0 for p in device.processes)
    unknown = sum(1 for p in device.processes if p.used_memory is None)
    if unknown == len(device.processes):
        memory = f"memory {NA} (NVML gives no per-process figure)"
    elif unknown:
        memory = f"at least {format_bytes(total)} in all ({unknown} without a figure)"
    else:
        memory = f"{format_bytes(total)} in all"
    lines = [
        f"  processes    {len(device.processes)}, {memory}"
        + (f" ({KERNEL_AMONG})" if kernel_not_identified(status, device) else "")
    ]
    rows, more = process_table(status, device)
    lines.append(f"  {'':1} {'PID':>9}  {'memory':>10}  name")
    for row in rows:
        mark = "*" if row.this_process else " "
        lines.append(f"  {mark} {row.pid:>9}  {row.memory:>10}  {row.label}")
    if more:
        lines.append(f"    {more}")
    return lines


# ---------------------------------------------------------------- lines (the HTML view shares them)


def _value(value: Any, unit: str = "") -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:.1f}{unit}"
    return f"{value}{unit}"


def _on_off(value: Optional[bool]) -> str:
    return NA if value is None else ("on" if value else "off")


def when(status: GpuStatus) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status.taken_at))


def nvml_summary(status: GpuStatus) -> list[tuple[str, bool]]:
    """What the text and HTML views say of NVML before its GPUs, as (line, whether it says
    what is missing): that it lists no GPU, and what it could not answer."""
    view = status.nvml
    lines = []
    if view.available and not view.devices and view.reason("devices") is None:
        lines.append(("no GPU visible to NVML", False))
    if view.unavailable:
        lines.append((f"not available: {reasons(view)}", True))
    return lines


class Now(NamedTuple):
    """One item of the line of what matters now; kind is "error", "warn" or "info"."""

    kind: str
    text: str


def versions(status: GpuStatus) -> Now:
    """The driver and CUDA versions, or why they are unknown: no driver, a lost GPU, or
    NVML failing (its reason, said once). Kind "error" where NVML failed."""
    view = status.nvml
    if view.lost_at_start:
        return Now("error", "driver and CUDA n/a: a GPU is lost")
    if not view.available:
        return Now("info", f"driver and CUDA n/a: {view.error or 'no NVML'}")
    driver, cuda = view.driver_version, view.cuda_driver_version
    if driver is None and cuda is None:
        whys = [view.reason("driver_version"), view.reason("cuda_driver_version")]
        why = "; ".join(dict.fromkeys(reason for reason in whys if reason)) or "no answer"
        return Now("error", f"NVML failed: {why}")
    return Now("info", f"driver {driver or NA} · CUDA {cuda or NA}")


def version_lines(status: GpuStatus) -> list[str]:
    view = status.nvml
    lines = []
    failed = versions(status)
    if view.available and failed.kind == "error":  # every version query failed: say so
        lines.append(failed.text)
    elif view.available:
        lines.append(
            f"driver {view.driver_version or NA} | CUDA driver {view.cuda_driver_version or NA}"
            f" | NVML {view.nvml_version or NA}"
        )
    elif view.no_driver:  # what a machine without a GPU is, first, in plain words
        lines.append(f"No GPU: {view.error}")
    else:
        lines.append(f"NVML not available: {view.error}")
    lines.append(torch_line(status))
    return lines


def torch_line(status: GpuStatus) -> str:
    """torch's version, the CUDA (or ROCm) it was built with, and its CUDA context."""
    torch = status.torch
    context = torch.health + (f" ({torch.health_detail})" if torch.health_detail else "")
    if torch.version is None:  # the context's state only where it says more than that
        extra = f" | CUDA context: {context}" if torch.health != cuda_health.NO_TORCH else ""
        installed = (
            f"torch {torch.installed_version} installed, not imported in this process"
            if torch.installed_version
            else "torch not imported"
        )
        return f"{installed}{extra}"
    if torch.cpu_only:  # its context is never started: only a state set from outside
        extra = f" | CUDA context: {context}" if torch.health != cuda_health.NOT_INITIALISED else ""
        return f"torch {torch.version} | CPU-only build: no CUDA{extra}"
    runtime = (
        f"CUDA runtime {torch.cuda_runtime}"
        if torch.cuda_runtime
        else f"ROCm (HIP) {torch.hip_runtime}"
    )
    return f"torch {torch.version} | {runtime} | CUDA context: {context}"


# What to do about a lost GPU (NVML_ERROR_GPU_IS_LOST: "The GPU has fallen off the bus or
# has otherwise become inaccessible"), by runtime: nothing in this machine's software
# state brings it back; restarting the kernel or the Python process does not.
LOST_FIX = {
    "Colab": (
        "Runtime > Disconnect and delete runtime, then connect again: that gives a new "
        "machine (restarting the session keeps this one); then rerun your notebook"
    ),
    "Kaggle": "stop this session and start a new one (a new machine), then rerun your notebook",
    "local": (
        "the machine needs a reboot (or the GPU a reset by an administrator, "
        "`nvidia-smi --gpu-reset`, where the driver still reaches it); restarting the "
        "kernel is not enough"
    ),
}


LOST_ROW = "NVML answers nothing more about it: see the fix above"


def lost_banners(status: GpuStatus) -> list[str]:
    """One banner per lost GPU, with the fix for this runtime (the views show them first)."""
    view = status.nvml
    if view.lost_at_start:
        return [lost_banner(status, None)]  # NVML could not even start
    return [lost_banner(status, device) for device in view.devices if device.lost]


def lost_banner(status: GpuStatus, device: Optional[NvmlDevice]) -> str:
    what = "a GPU" if device is None else f"GPU {device.index}"
    if device is not None and device.name:
        what += f" ({device.name})"
    fix = LOST_FIX.get(status.host.runtime, LOST_FIX["local"])
    return (
        f"{what} is lost: it has fallen off the bus or otherwise become inaccessible "
        f"(NVML error 15, GPU_IS_LOST). No process can use it, and what CUDA held on it is "
        f"gone. Fix: {fix}."
    )


# How the views say that this kernel has memory on a GPU but no NVML process is known to be it.
KERNEL_AMONG = "this kernel is among them, not identified: no PID matches (PID namespace)"


KERNEL_UNLISTED = "NVML lists not even this kernel, which has a CUDA context here"


def kernel_not_identified(status: GpuStatus, device: NvmlDevice) -> bool:
    return any(m.nvml_identified_by == "not identified" for m in status.memory_for(device.index))


def kernel_not_listed(status: GpuStatus, device: NvmlDevice) -> bool:
    return any(m.nvml_identified_by == "not listed" for m in status.memory_for(device.index))


def device_title(status: GpuStatus, device: NvmlDevice) -> str:
    cuda = ", ".join(f"cuda:{m.device}" for m in status.memory_for(device.index))
    parts = [f"GPU {device.index}", device.name or NA]
    if cuda:
        parts.append(cuda)
    parts.append(device.uuid or "UUID n/a")
    parts.append(f"PCI {device.pci_bus_id or NA}")
    if device.compute_capability:
        parts.append(f"compute capability {device.compute_capability}")
    if device.lost:
        parts.append("GPU IS LOST")
    return " | ".join(parts)


def memory_line(device: NvmlDevice) -> str:
    line = f"{format_bytes(device.memory_used)} used"
    if device.memory_call == V1:
        line += f" ({INCLUDES_RESERVED}: this driver reports them together)"
    if device.memory_reserved is not None:
        line += f" + {format_bytes(device.memory_reserved)} reserved by the driver"
    return (
        f"{line} / {format_bytes(device.memory_total)} total | "
        f"{format_bytes(device.memory_free)} free"
    )


def load_line(device: NvmlDevice) -> str:
    power = f"{_value(device.power_draw_w, ' W')} / {_value(device.power_limit_w, ' W')}"
    return " | ".join(
        (
            f"GPU {_value(device.utilization_gpu, '%')}",
            f"memory bus {_value(device.utilization_memory, '%')}",
            _value(device.temperature_c, " C"),
            f"power {power}",
        )
    )


def mode_line(device: NvmlDevice) -> str:
    mig = _on_off(device.mig_enabled)
    if device.mig_pending is not None and device.mig_pending != device.mig_enabled:
        mig += f" (pending {_on_off(device.mig_pending)} after a GPU reset)"
    ecc = _on_off(device.ecc_enabled)
    if device.ecc_errors_uncorrected is not None:
        ecc += f", {device.ecc_errors_uncorrected} uncorrected volatile errors"
    return f"compute mode {device.compute_mode or NA} | MIG {mig} | ECC {ecc}"


def mig_line(instance: MigInstance) -> str:
    return (
        f"MIG {instance.index}: {instance.name or NA} | {instance.uuid or NA} | GI "
        f"{_value(instance.gpu_instance_id)} CI {_value(instance.compute_instance_id)} | "
        f"{format_bytes(instance.memory_used)} / {format_bytes(instance.memory_total)}"
    )


def kernel_line(item: DeviceMemory) -> str:
    line = (
        f"cuda:{item.device}: allocated {format_bytes(item.allocated)} | reserved "
        f"{format_bytes(item.reserved)} | peak {format_bytes(item.peak_allocated)}"
    )
    if item.num_ooms:
        line += f" | {counted(item.num_ooms, 'OOM')}"
    if item.nvml_used_by_this_process is not None:
        how = " (matched by memory)" if item.nvml_identified_by == "memory" else ""
        line += (
            f" | NVML {format_bytes(item.nvml_used_by_this_process)}{how} -> CUDA context + "
            f"other libraries {format_bytes(item.context_and_other)}"
        )
    elif item.nvml_identified_by == "not identified":
        line += " | NVML figure n/a: this kernel not identified among NVML's processes"
    elif item.nvml_identified_by == "not listed":
        line += " | NVML figure n/a: NVML lists no process on this GPU"
    else:
        line += " | NVML figure for this kernel n/a"
    return line


class ProcessRow(NamedTuple):
    """One row of a GPU's process table, as the text and HTML views show it."""

    pid: int
    memory: str
    label: str
    this_process: bool


def process_table(status: GpuStatus, device: NvmlDevice) -> tuple[list[ProcessRow], str]:
    """The rows of a GPU's process table, and the line saying how many were left out ('' for
    none)."""
    shown, hidden = shown_processes(status, device)
    rows = [
        ProcessRow(p.pid, format_bytes(p.used_memory), process_label(p), p.this_process)
        for p in shown
    ]
    return rows, f"... and {hidden} more (%gpu_status --processes lists all)" if hidden else ""


def shown_processes(status: GpuStatus, device: NvmlDevice) -> tuple[list[NvmlProcess], int]:
    processes = list(device.processes or ())
    limit = status.process_limit
    if limit is None or len(processes) <= limit:
        return processes, 0
    shown = processes[:limit]
    mine = [p for p in processes[limit:] if p.this_process]
    shown.extend(mine)  # this kernel is always listed
    return shown, len(processes) - len(shown)


def process_label(process: NvmlProcess, spelled_out: bool = False) -> str:
    """A process's name, its kinds and MIG instance, this kernel marked. The text view's
    table marks it "<- this kernel" and writes "MIG GI 1 CI 0" as nvidia-smi's columns do;
    `spelled_out` (the panel) says "(this kernel)" and "MIG GPU instance 1, compute
    instance 0"."""
    label = process.name or "(name n/a)"
    extra = []
    if process.kinds != ("compute",):
        extra.append("+".join(process.kinds))
    if process.gpu_instance_id is not None:
        gpu, compute = process.gpu_instance_id, process.compute_instance_id
        if spelled_out:
            extra.append(f"MIG GPU instance {gpu}, compute instance {compute}")
        else:
            extra.append(f"MIG GI {gpu} CI {compute}")
    if extra:
        label += f" [{', '.join(extra)}]"
    if process.this_process:
        how = ", matched by memory" if process.matched_by_memory else ""
        if spelled_out:
            label += f" (this kernel{how})"
        else:
            label += "  <- this kernel" + (f" ({how[2:]})" if how else "")
    return label


def reasons(record: Any) -> str:
    return ", ".join(f"{name} ({why})" for name, why in record.unavailable)


def _leftover_line(entry: Leftover) -> str:
    parts = [entry.name, format_bytes(entry.nbytes)]
    if entry.device:
        parts.append(entry.device)
    if entry.type_text:
        parts.append(entry.type_text)
    if entry.shape is not None:
        parts.append(str(tuple(entry.shape)))
    if entry.holder:
        parts.append(f"held by {entry.held_as}")
    if entry.shared_with:
        parts.append("shares memory with " + ", ".join(entry.shared_with))
    return " | ".join(parts)


def cell_line(record: CellMemory) -> str:
    """One cell of the history: torch's CUDA figures where the cell has them (else host
    memory), NVML's, the time, and a rerun or its LEAK as `%gpu_history` says it."""
    parts = []
    if record.devices:
        change = None
        if record.allocated_before is not None and record.allocated_after is not None:
            change = record.allocated_after - record.allocated_before
        sign = "+" if (change or 0) >= 0 else ""
        parts += (
            f"allocated {format_bytes(record.allocated_after)} ({sign}{format_bytes(change)})",
            f"peak {record.peak_text}",
            f"reserved {format_bytes(record.reserved_after)}",
        )
    elif record.rss_after is not None:
        parts.append(f"host RSS {format_bytes(record.rss_after)}")
    if record.nvml_used_after is not None:
        used = f"NVML used, all processes {format_bytes(record.nvml_used_after)}"
        parts.append(f"{used} ({INCLUDES_RESERVED})" if record.nvml_used_call == V1 else used)
    if record.duration_s is not None:
        parts.append(f"{record.duration_s:.2f} s")
    if record.ooms:
        parts.append(counted(record.ooms, "OOM"))
    if record.rerun_leak:
        parts.append(leak_text(record))
    elif record.rerun_of is not None:
        parts.append(f"rerun of [{record.rerun_of}]")
    cell = "-" if record.cell is None else record.cell
    return " ".join((f"[{cell}]", " | ".join(parts))) if parts else f"[{cell}]"


def leftovers_heading(status: GpuStatus) -> str:
    if status.leftover_groups is not None:
        return grouped(status).heading()
    shown = len(status.leftovers or ())
    return (
        f"leftovers ({shown} of {status.leftovers_count}, "
        f"{format_bytes(status.leftovers_bytes)} in all)"
    )


def grouped(status: GpuStatus) -> LeftoverGroups:
    """The snapshot's groups (the biggest ones) with the totals of every block."""
    from ..leftovers.groups import LeftoverGroups

    groups = tuple(status.leftover_groups or ())
    count = max(status.leftover_groups_count, len(groups))
    return LeftoverGroups(groups, status.leftovers_count, status.leftovers_bytes, (), count)


# The host RAM figures as `gpu_status` words them; the panel words them its own way.
STATUS_RAM = "{total} total | {available} available | this kernel {rss} (PID {pid})"


def host_ram(host: HostInfo, template: str = STATUS_RAM) -> str:
    """The host RAM line of every view: the note saying why the figures are missing, else
    `template` filled with the sizes (``{total}``, ``{available}``, ``{rss}``) and ``{pid}``."""
    if host.note:
        return host.note
    return template.format(
        total=format_bytes(host.ram_total),
        available=format_bytes(host.ram_available),
        rss=format_bytes(host.process_rss),
        pid=host.pid,
    )
