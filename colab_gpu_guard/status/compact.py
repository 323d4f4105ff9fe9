"""The compact status: what the panel shows collapsed, as plain facts shared by its HTML
(`panel_html`) and its text (`compact_text`: the panel's plain-text fallback).

Three facts first: the driver and CUDA versions (or why they are unknown), one line per GPU
(this kernel / others / unattributed / free, used of total, utilisation, temperature, power)
with its MIG instances, and what is held between cells (the total and the biggest holders
by name, and the last rerun that kept memory again); then what matters now. Pure functions
of one `GpuStatus`; no query.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple, Optional

from ..leftovers.graphs import FIX as GRAPH_FIX
from ..leftovers.groups import AUTOGRAD_GRAPH
from ..nvml import V1
from ..units import USER_VARIABLE, escape_lines, format_bytes, signed_bytes
from .text import Now, host_ram, lost_banner, versions

if TYPE_CHECKING:
    from ..cells.tracker import CellMemory
    from ..nvml import MigInstance, NvmlDevice
    from .snapshot import GpuStatus

# The parts of a GPU's memory as the compact line names them: unlisted is used memory NVML
# charges to no process it lists (the driver's own; processes hidden from a container).
KERNEL, OTHERS, UNLISTED, FREE = "this kernel", "others", "unattributed", "free"
# others with what of this kernel's is not known apart from them (its CUDA context where
# NVML does not list it; all of it where NVML lists it without a figure)
OTHERS_CONTEXT, OTHERS_KERNEL = "others + CUDA context", "others + this kernel"
# each bar segment's part of the line (a "+driver" suffix dropped), in the line's order
_PART_OF = {
    **dict.fromkeys(("tensors", "cache", "context", "kernel"), KERNEL),
    "others": OTHERS,
    "others+context": OTHERS_CONTEXT,
    "others+kernel": OTHERS_KERNEL,
    "unlisted": UNLISTED,
    "free": FREE,
}
_URGENCY = ("error", "warn", "info")
FREEABLE_WARN = 2**20  # hidden memory below this is shown calmly, not as a warning
NO_GPU_RAM = "host RAM {available} available of {total}; this kernel {rss}"
COLAB_NO_GPU = "this Colab runtime has none: Runtime > Change runtime type > a GPU"


class GpuLine(NamedTuple):
    """One GPU as its compact line shows it."""

    index: int
    name: str
    parts: tuple[tuple[str, int], ...]  # ((KERNEL | OTHERS | UNLISTED | FREE), bytes), no zeros
    used: str  # "3.91 GiB of 15 GiB"
    load: str  # "busy 37% · 51 °C · 32 W"
    load_title: str  # the same with names and the power limit


def _measure(value: Optional[float], unit: str) -> Optional[str]:
    if value is None:
        return None
    return f"{value:.0f}{unit}" if isinstance(value, float) else f"{value}{unit}"


def device_segments(status: GpuStatus, device: NvmlDevice) -> list[tuple[str, int]]:
    """The memory bar of one NVML device as (segment key, bytes), in drawing order.

    tensors = allocated and cache = reserved - allocated come from this kernel's caching
    allocator (CUDA devices of this kernel on that GPU); context = what NVML charges to this
    process beyond the allocator's reserved bytes; kernel = NVML's figure for this process
    when there are no allocator figures; others = NVML's used bytes not charged to this
    process, as far as the other processes NVML lists are charged them; unlisted = the rest
    of them, which NVML charges to no process it lists (a few MiB of the driver's beside a
    context; processes a container cannot see): with no other process listed, none of it is
    called other processes; others+kernel = used, where NVML lists this kernel without a
    figure (its share is unknown); others+context = others with this kernel's CUDA
    context, where NVML does not list it (a container's host PIDs); driver = what the
    driver sets aside (NVML v2 memory call; with v1 it is inside NVML's used, and the
    others or unlisted key says so); free = NVML. This kernel's NVML figure is its entry
    matched by PID, or by memory in a container (`gpu_status`).
    """
    mine = status.memory_for(device.index)
    used = device.memory_used
    nvml_mine = device.used_by_this_process()
    segments: list[tuple[str, int]] = []
    reserved = 0
    if mine:
        allocated = sum(m.allocated for m in mine)
        reserved = sum(m.reserved for m in mine)
        segments.append(("tensors", allocated))
        segments.append(("cache", max(0, reserved - allocated)))
        if nvml_mine is not None:
            segments.append(("context", max(0, nvml_mine - reserved)))
    elif nvml_mine is not None:
        segments.append(("kernel", nvml_mine))
    if used is not None:
        v1 = "+driver" if device.memory_call == V1 else ""
        if mine and nvml_mine is None:
            segments.append(("others+context" + v1, max(0, used - reserved)))
        elif nvml_mine is None and _listed_without_figure(device):
            segments.append(("others+kernel" + v1, used))
        else:
            rest = max(0, used - (nvml_mine or 0))
            charged = _charged_to_others(device)
            if charged is None:
                segments.append(("others" + v1, rest))
            else:
                segments.append(("others", min(rest, charged)))
                if rest > charged:
                    segments.append(("unlisted" + v1, rest - charged))
    if device.memory_reserved:
        segments.append(("driver", device.memory_reserved))
    if device.memory_free is not None:
        segments.append(("free", device.memory_free))
    return segments


def _listed_without_figure(device: NvmlDevice) -> bool:
    """NVML lists this kernel on the GPU but gives no figure for it (Windows WDDM, MIG
    without privileges): what is not the others' is partly this kernel's."""
    return any(p.this_process and p.used_memory is None for p in device.processes or ())


def _charged_to_others(device: NvmlDevice) -> Optional[int]:
    """The used bytes NVML charges to the other processes it lists; None where that list is
    unknown (not queried, a process's figure not reported)."""
    if device.processes is None:
        return None
    charged = 0
    for process in device.other_processes():
        if process.used_memory is None:
            return None
        charged += process.used_memory
    return charged


def memory_parts(status: GpuStatus, device: NvmlDevice) -> tuple[tuple[str, int], ...]:
    """this kernel / others / unlisted / free of one GPU, from the bar's segments
    (`device_segments`). Unlisted memory under 1% of the GPU's (the driver's few MiB
    beside a context) is left to the bar's tooltip and the used figure: the line stays
    short."""
    sums = dict.fromkeys(_PART_OF.values(), 0)
    for key, size in device_segments(status, device):
        part = _PART_OF.get(key.removesuffix("+driver"))  # "driver" itself: no part
        if part is not None:
            sums[part] += size
    if device.memory_total and sums[UNLISTED] * 100 < device.memory_total:
        sums[UNLISTED] = 0
    return tuple((name, size) for name, size in sums.items() if size > 0)


def gpu_line(status: GpuStatus, device: NvmlDevice) -> GpuLine:
    used = (
        f"{format_bytes(device.memory_used)} of {format_bytes(device.memory_total)}"
        if device.memory_total is not None
        else "memory n/a"
    )
    util = _measure(device.utilization_gpu, "%")
    temp = _measure(device.temperature_c, " °C")
    power = _measure(device.power_draw_w, " W")
    busy = f"busy {util}" if util is not None else None  # NVML: time a kernel was running
    load = " · ".join(item for item in (busy, temp, power) if item is not None)
    limit = _measure(device.power_limit_w, " W")
    bus = _measure(device.utilization_memory, "%")
    title = (
        f"utilisation {util or 'n/a'}, memory bus {bus or 'n/a'}"
        f", temperature {temp or 'n/a'}, power {power or 'n/a'}" + (f" of {limit}" if limit else "")
    )
    return GpuLine(
        device.index,
        device.name or "GPU (name n/a)",
        memory_parts(status, device),
        used,
        load,
        title,
    )


def mig_text(instance: MigInstance) -> str:
    """'MIG 3g.20gb: 8 GiB of 20 GiB' (the profile, not the GPU's name again)."""
    name = instance.name or f"MIG {instance.index}"
    profile = name.rsplit(" MIG ", 1)[-1] if " MIG " in name else name
    return (
        f"MIG {profile}: {format_bytes(instance.memory_used)} of "
        f"{format_bytes(instance.memory_total)}"
    )


def _last_growth(records: list[CellMemory]) -> Optional[Now]:
    """The last cell's growth of CUDA memory (a rerun that kept memory again is the leak
    line's, `last_leak`)."""
    if not records:
        return None
    last = records[-1]
    if not last.rerun_leak and last.devices and last.delta > 0:
        cell = "-" if last.cell is None else last.cell
        return Now("info", f"cell [{cell}] kept {signed_bytes(last.delta)} of CUDA memory")
    return None


def where_kept(device: str) -> str:
    """A device of a rerun leak in words: 'in host memory' for "cpu", else 'on cuda:0'."""
    return "in host memory" if device == "cpu" else f"on {device}"


def leak_words(record: CellMemory) -> str:
    """A rerun that kept memory again, in words: "cell [5] (a rerun of [3]) kept +16 MiB in
    host memory again, held by `kept`"."""
    cell = "-" if record.cell is None else record.cell
    again = f" (a rerun of [{record.rerun_of}])" if record.rerun_of is not None else ""
    per_device = record.leaks or ((record.leak_kind, record.leak_bytes),)
    kept = ", ".join(f"{signed_bytes(size)} {where_kept(device)}" for device, size in per_device)
    return f"cell [{cell}]{again} kept {kept} again, {record.holder_text}"


def last_leak(status: GpuStatus) -> Optional[Now]:
    """The latest rerun in the history that kept memory again (it stays said until the
    history no longer holds it, whatever the buttons did since)."""
    for record in reversed(status.history or ()):
        if record.rerun_leak:
            return Now("warn", f"rerun leak: {leak_words(record)}")
    return None


def _graph_holder(status: GpuStatus) -> Optional[Now]:
    """The variable whose tensors keep the most autograd-graph memory alive (the commonest
    way a notebook runs out of memory: `losses.append(loss)`), where it is 1 MiB or more."""
    graphs = [
        group
        for group in status.leftover_groups or ()
        if group.kind == AUTOGRAD_GRAPH and group.graph_nbytes >= FREEABLE_WARN
    ]
    if not graphs:
        return None
    biggest = max(graphs, key=lambda group: group.graph_nbytes)
    return Now(
        "warn",
        f"`{biggest.name}` keeps {format_bytes(biggest.graph_nbytes)} alive in autograd "
        f"graphs ({GRAPH_FIX})",
    )


def now_items(status: GpuStatus) -> list[Now]:
    """What matters now besides the three facts, most urgent first: a broken or busy CUDA
    context, memory that Free would release, the variable keeping the most autograd-graph
    memory, the last cell's growth of CUDA memory. [] when there is nothing to add."""
    items: list[Now] = []
    health = status.torch.health
    if health == "broken":
        items.append(Now("error", "CUDA context broken: restart the runtime"))
    elif health == "busy":
        items.append(Now("warn", "GPU busy: CUDA work queued by the last cell is still running"))
    elif health == "forked":
        items.append(Now("warn", "forked process: CUDA cannot be used here"))
    freeable = freeable_bytes(status)
    if freeable:
        items.append(
            Now(
                # a few bytes (a scalar in Out) are true but not worth a warning
                "warn" if freeable >= FREEABLE_WARN else "info",
                f"{format_bytes(freeable)} hidden in output history / tracebacks: "
                "Free memory releases it",
            )
        )
    graphs = _graph_holder(status)
    if graphs is not None:
        items.append(graphs)
    growth = _last_growth(list(status.history or ()))
    if growth is not None:
        items.append(growth)
    items.sort(key=lambda item: _URGENCY.index(item.kind))  # stable: warnings before info
    return items


def freeable_bytes(status: GpuStatus) -> Optional[int]:
    """What Free memory would release (held by no user variable); None: not searched."""
    if status.leftovers is None:
        return None
    if status.leftovers_freeable_bytes is not None:
        return status.leftovers_freeable_bytes
    return sum(e.nbytes for e in status.leftovers if (e.holder or "") != USER_VARIABLE)


class Holder(NamedTuple):
    """One holder of the held line: the name a user types (or sees) and its bytes."""

    name: str
    nbytes: int


class Held(NamedTuple):
    """What is held between cells, for one line: the biggest holders by name, how many
    more there are and what they hold, the total; `note` instead when not searched."""

    holders: tuple[Holder, ...]
    more: int
    more_bytes: int
    total_bytes: int
    holder_count: int
    note: str = ""  # why there are no figures ("not searched: Refresh looks for them")


HELD_SHOWN = 3  # holders named on the held line


def held(status: GpuStatus, shown: int = HELD_SHOWN) -> Held:
    """The held line's facts: the holder groups when the snapshot has them (else its
    arrays by name), biggest first, the first `shown` named."""
    if status.leftovers is None:
        note = status.leftovers_note or "not searched"
        if note == "not collected":
            note = "not searched: Refresh looks for them"
        return Held((), 0, 0, 0, 0, note)
    if status.leftover_groups:
        count = max(status.leftover_groups_count, len(status.leftover_groups))
        ranked = sorted(status.leftover_groups, key=lambda group: -group.nbytes)
        pairs = [Holder(group.name, group.nbytes) for group in ranked if group.nbytes > 0]
        # "N more" counts holders of memory: a name that only shares what a listed one
        # holds (Out[N] showing `model`) adds nothing; those past the snapshot's `top` count
        unlisted = count - len(status.leftover_groups)
        holders = len(pairs) + unlisted
    else:
        count = holders = status.leftovers_count
        ranked = sorted(status.leftovers, key=lambda entry: -entry.nbytes)
        pairs = [Holder(entry.name, entry.nbytes) for entry in ranked]
    named = tuple(pairs[:shown])
    rest = max(0, status.leftovers_bytes - sum(holder.nbytes for holder in named))
    more = max(0, holders - len(named)) if rest else 0
    return Held(named, more, rest if more else 0, status.leftovers_bytes, count)


def held_text(status: GpuStatus) -> str:
    """'held between cells: `keep` 382 MiB, `Out[3]` 191 MiB (573 MiB in all)'."""
    facts = held(status)
    if facts.note:
        return f"held between cells: {facts.note}"
    if not facts.holders:
        return "held between cells: no arrays"
    names = [f"`{holder.name}` {format_bytes(holder.nbytes)}" for holder in facts.holders]
    if facts.more:
        names.append(f"{facts.more:,} more {format_bytes(facts.more_bytes)}")
    total = f" ({format_bytes(facts.total_bytes)} in all)" if len(names) > 1 else ""
    return f"held between cells: {', '.join(names)}{total}"


def no_gpu_text(status: GpuStatus) -> str:
    """Why no GPU is shown, where the versions fact has not said it already."""
    view = status.nvml
    if not view.available:  # the versions fact says why
        why = COLAB_NO_GPU if status.host.runtime == "Colab" else ""
    elif view.reason("devices") is not None:
        failed = versions(status).kind == "error"  # said there: "NVML failed: ..."
        why = "" if failed else f"the GPU list could not be read ({view.reason('devices')})"
    else:
        why = "NVML works but lists no GPU"
    return f"No GPU: {why}" if why else "No GPU"


def why_no_gpu(status: GpuStatus) -> str:
    """Why there is no GPU, whole, for a line that stands alone (the panel's header and
    its no-GPU line share it out between them)."""
    view = status.nvml
    if not view.available:
        return f"No GPU: {view.error or 'NVML is not available'}"
    if versions(status).kind == "error":
        return f"No GPU: {versions(status).text}"
    return no_gpu_text(status)


def freshness(status: GpuStatus, cell: Optional[int]) -> str:
    """'after cell [12], 14:03:07' (or 'at 14:03:07' before any cell)."""
    at = time.strftime("%H:%M:%S", time.localtime(status.taken_at))
    return f"after cell [{cell}], {at}" if cell is not None else f"at {at}"


def compact_text(status: GpuStatus, cell: Optional[int] = None) -> str:
    """The compact status in plain text: the panel's text fallback, the three facts first."""
    lines = [f"GPU guard · {versions(status).text} · {freshness(status, cell)}"]
    if status.has_gpu:
        for device in status.nvml.devices:
            if device.lost:
                lines.append(lost_banner(status, device))
                continue
            line = gpu_line(status, device)
            parts = " / ".join(f"{name} {format_bytes(size)}" for name, size in line.parts)
            lines.append(
                f"GPU {line.index} {line.name}: {parts} · {line.used}"
                + (f" · {line.load}" if line.load else "")
            )
            lines += [f"  {mig_text(instance)}" for instance in device.mig_instances]
    elif status.nvml.lost_at_start:
        lines.append(lost_banner(status, None))
    else:
        lines.append(f"{no_gpu_text(status)} · {host_ram(status.host, NO_GPU_RAM)}")
    lines.append(held_text(status))
    leak = last_leak(status)
    if leak is not None:
        lines.append(leak.text)
    items = now_items(status)
    if items:
        lines.append("; ".join(item.text for item in items))
    return escape_lines(lines)  # GPU and variable names: no raw control character
