"""The panel's per-cell chart: what each of the last cells kept.

A bar per cell is this kernel's own change during the cell, the reading after it minus the
one before: CUDA allocated bytes (summed over devices) once torch uses CUDA; else what NVML
charges this kernel's PID over all GPUs (CuPy, JAX, TensorFlow, CUDA without torch), once
NVML lists that PID with memory; else the process's resident host memory, saying why
NVML's figure is missing where NVML lists processes (inside a container NVML lists host
PIDs, so this kernel's PID never appears). On a scale with labelled ticks, the biggest
change labelled, each cell's allocator peak above its bar, and rerun leaks named (what the
rerun kept, and which cell it reruns). Plain HTML boxes (no SVG): the bars share the
panel's width and the text takes the theme's colour.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple, Optional

from ..units import counted, format_bytes, signed_bytes
from ..units import escape_html as _e
from . import theme
from .compact import leak_words

if TYPE_CHECKING:
    from ..cells.tracker import CellMemory
    from .snapshot import GpuStatus

CUDA_MEASURE = "CUDA allocated"
NVML_MEASURE = "NVML: this process on the GPU"
HOST_MEASURE = "host resident memory"  # RSS: memory reused from the heap does not show
PLOT_H = 72  # px
MARK_H = 12  # px: the headroom over the plot where the biggest bar's marker may sit
AXIS_W = 60  # px: the tick labels' column


class CellChange(NamedTuple):
    cell: Optional[int]
    change: Optional[int]  # None: not known (the first host reading)
    peak: Optional[int]  # the CUDA peak above the cell's start, when exact
    record: CellMemory
    after: Optional[int] = None  # NVML's or the host's reading after the cell


def cell_changes(
    records: list[CellMemory], process_now: Optional[int] = None
) -> tuple[str, list[CellChange]]:
    """(measure, each cell's change): CUDA allocated when any cell had CUDA devices; else
    what NVML charges this kernel's PID, once NVML listed it with memory; else host memory;
    "" when nothing was measured. `process_now`: NVML's figure for this PID now, for the
    last cell while the tracker's thread has not read it yet."""
    if any(r.devices for r in records):
        return CUDA_MEASURE, [
            CellChange(
                r.cell,
                r.delta if r.devices else None,
                r.exact_peak - r.allocated_before
                if r.devices and r.exact_peak is not None
                else None,
                r,
            )
            for r in records
        ]
    readings = [r.nvml_process_used for r in records]
    if readings and readings[-1] is None:
        readings[-1] = process_now
    if any(readings):
        changes = _differences(records, readings)
        known = [c.change for c in changes if c.change is not None]
        host = any(r.rss_after is not None for r in records)
        # a figure that never moved (a constant context) says less than the host's
        if known and (any(known) or not host):
            return NVML_MEASURE, changes
    if not any(r.rss_after is not None for r in records):
        return "", []
    starts = [r.rss_before for r in records]
    return HOST_MEASURE, _differences(records, [r.rss_after for r in records], starts)


def _differences(
    records: list[CellMemory],
    readings: list[Optional[int]],
    starts: Optional[list[Optional[int]]] = None,
) -> list[CellChange]:
    """Each cell's reading minus the one it started from (`starts`, where known), else
    minus the reading after the cell before it (None where either is missing)."""
    changes, before = [], None
    for index, (record, value) in enumerate(zip(records, readings)):
        start = starts[index] if starts is not None else None
        if start is None:
            start = before
        change = value - start if value is not None and start is not None else None
        changes.append(CellChange(record.cell, change, None, record, value))
        before = value
    return changes


def process_used_now(status: GpuStatus) -> Optional[int]:
    """What NVML charges this kernel over every GPU in the snapshot (its entries as
    `matching` marks them; 0 when none is listed); None where a GPU's processes are not
    listed or an entry of this kernel's has no figure."""
    if not status.has_gpu:
        return None
    total = 0
    for device in status.nvml.devices:
        if device.processes is None:
            return None
        mine = [p.used_memory for p in device.processes if p.this_process]
        if any(used is None for used in mine):
            return None
        total += sum(used or 0 for used in mine)
    return total


def why_not_nvml(status: GpuStatus, records: list[CellMemory]) -> str:
    """Why the chart shows host memory on a machine whose NVML lists processes: no entry
    has this kernel's PID (none yet on a GPU, or a container: NVML lists host PIDs), or the
    processes cannot be listed; "" when there is nothing to say."""
    if not status.has_gpu or any(r.devices for r in records):
        return ""
    if any(r.nvml_process_used == 0 for r in records) or process_used_now(status) == 0:
        return (
            f"host memory: NVML lists no GPU memory for this kernel's PID {status.nvml.pid} "
            "(no GPU use yet, or a container, where NVML lists host PIDs)"
        )
    unlisted = [d for d in status.nvml.devices if d.processes is None]
    if unlisted and status.nvml.processes_queried:
        why = unlisted[0].reason("processes") or "not listed"
        return f"host memory: NVML does not list the GPU's processes here ({why})"
    return ""


def _nice(value: float) -> float:
    """The smallest 1, 2 or 5 x 1024^k x 10^j at or above value (a tick that reads well)."""
    if value <= 0:
        return 1.0
    unit = 1024 ** int(math.log(value, 1024)) if value >= 1024 else 1
    scaled = value / unit
    step = 10 ** math.floor(math.log10(scaled))
    for factor in (1, 2, 5, 10):
        if factor * step >= scaled:
            return factor * step * unit
    return 10 * step * unit


OWN_CELL = "this cell opened the panel, and its change is mostly the panel's own"


def render_history(status: GpuStatus, cells: int = 30, own_cell: Optional[int] = None) -> str:
    """The chart of the last `cells` cells' changes, or why there is none. A record before
    them, when the history has one, gives the first cell's host reading before it.
    `own_cell`: the cell that opened the panel; its host-memory change (importing and
    drawing the panel) is not charged to it."""
    head = f'<div class="cgg-history-html" style="{theme.FONT}">'
    if status.history is None:
        return f"{head}Per-cell history: {_e(status.history_note or 'not recorded')}</div>"
    records = list(status.history)
    measure, changes = cell_changes(records, process_used_now(status))
    changes = changes[-cells:]
    own = {own_cell} if measure == HOST_MEASURE and own_cell is not None else set()
    changes = [item._replace(change=None) if item.cell in own else item for item in changes]
    if not changes:
        note = status.history_note or ("no cells yet" if not records else "nothing measured")
        return f"{head}Per-cell history: {_e(note)}</div>"
    known = [c.change for c in changes if c.change is not None]
    peaks = [c.peak for c in changes if c.peak is not None]
    high = _nice(max([0, *known, *peaks]))
    low = -_nice(-min(known)) if known and min(known) < 0 else 0.0
    span = high - low
    zero_y = PLOT_H * high / span
    biggest = max(changes, key=lambda c: c.change if c.change is not None else -math.inf)
    bars = []
    for item in changes:
        top = item is biggest and (item.change or 0) > 0
        bars.append(_bar(item, measure, span, zero_y, top, item.cell in own))
    labels = _cell_labels(changes)
    ticks = "".join(
        f'<div style="position:absolute;right:4px;top:{y - 9:.0f}px;{theme.NOWRAP}">'
        f"{_e(label)}</div>"
        for y, label in (
            (0, signed_bytes(int(high))),
            (zero_y, "0 B"),
            *(((PLOT_H, signed_bytes(int(low))),) if low < 0 else ()),
        )
    )
    grid = "".join(
        f'<div style="position:absolute;left:0;right:0;top:{y:.0f}px;'
        f'border-top:1px {style} {theme.BORDER}"></div>'
        for y, style in ((0, "dotted"), (zero_y, "solid"), (PLOT_H, "dotted"))
    )
    last = changes[-1]
    summary = f"<b>What each cell kept</b> ({_e(measure)}, the last {len(changes)} cells)"
    if last.change is not None:
        summary += f" · last [{_e(last.cell)}] {_e(signed_bytes(last.change))}"
    if biggest.change is not None and biggest.change > 0:
        summary += f" · most &#9650; [{_e(biggest.cell)}] {_e(signed_bytes(biggest.change))}"
    leaks = [leak_words(c.record) for c in changes if c.record.rerun_leak]
    leak_html = "".join(
        f'<div class="cgg-leak">{theme.label("warn", "rerun leak")} {_e(text)}</div>'
        for text in leaks
    )
    legend = (
        f'<div style="{theme.MUTED};font-size:12px">bar: this kernel\'s change during the cell'
        + ("; outline: its peak above the start" if peaks else "")
        + "; hover a bar for its figures</div>"
    )
    why = why_not_nvml(status, records) if measure == HOST_MEASURE else ""
    if why:
        legend += f'<div class="cgg-chart-why" style="{theme.MUTED};font-size:12px">{_e(why)}</div>'
    return (
        f"{head}{summary}"
        f'<div class="cgg-chart" style="display:flex;margin-top:{4 + MARK_H}px">'
        f'<div style="position:relative;flex:0 0 {AXIS_W}px;height:{PLOT_H}px;font-size:11px">'
        f"{ticks}</div>"
        f'<div style="flex:1 1 auto;min-width:0">'
        f'<div style="position:relative;height:{PLOT_H}px;display:flex;align-items:stretch">'
        f"{grid}{''.join(bars)}</div>"
        f'<div class="cgg-chart-cells" style="position:relative;height:14px;font-size:11px;'
        f'line-height:14px">'
        f"{''.join(labels)}</div></div></div>{leak_html}{legend}</div>"
    )


LABELS = 8  # cell numbers under the bars at most: each has room for its digits at 240 px


def _cell_labels(changes: list[CellChange]) -> list[str]:
    """The cell numbers under the bars, each centred under its bar: every k-th cell's (the
    last one always), so that each has room for its digits; never cut."""
    count = len(changes)
    every = max(1, math.ceil(count / LABELS))
    spans = []
    for index, item in enumerate(changes):
        if (count - 1 - index) % every or item.cell is None:
            continue
        if index == count - 1:  # the last one ends at the plot's edge, whole
            where = "right:0"
        elif index == 0:  # the first one starts at its edge
            where = "left:0"
        else:  # centred under its bar
            where = f"left:{100 * (index + 0.5) / count:.3f}%;transform:translateX(-50%)"
        spans.append(
            f'<span class="cgg-chart-cell" style="position:absolute;{where};{theme.NOWRAP}">'
            f"{_e(item.cell)}</span>"
        )
    return spans


def _bar(
    item: CellChange, measure: str, span: float, zero_y: float, biggest: bool, own: bool
) -> str:
    change = item.change
    record = item.record
    cell = "-" if item.cell is None else item.cell
    if own:
        known = f"not charged: {OWN_CELL}"
    elif change is not None:
        known = signed_bytes(change)
    else:
        known = "change not known (first reading)"
    tip = f"cell [{cell}]: {measure} {known}"
    if measure == CUDA_MEASURE:
        tip += f", allocated after {format_bytes(record.allocated_after)}, peak {record.peak_text}"
    elif measure == NVML_MEASURE and item.after is not None:
        tip += f", after {format_bytes(item.after)}"
    elif record.rss_after is not None:
        tip += f", resident after {format_bytes(record.rss_after)}"
    if record.rerun_leak:
        tip += f"; rerun leak: {leak_words(record)}"
    if record.ooms:
        tip += f"; {counted(record.ooms, 'out-of-memory error')}"
    parts = [
        f'<div class="cgg-cell" title="{_e(tip)}" style="position:relative;flex:1 1 0;'
        'min-width:0;margin:0 1px">'
    ]
    if item.peak is not None and item.peak > 0:
        height = PLOT_H * item.peak / span
        parts.append(
            f'<div class="cgg-cell-peak" style="position:absolute;left:15%;right:15%;'
            f"top:{zero_y - height:.1f}px;height:{height:.1f}px;"
            f'border:1px dashed {theme.segment_colour("tensors")}"></div>'
        )
    if change:
        height = max(1.0, PLOT_H * abs(change) / span)
        top = zero_y - height if change > 0 else zero_y
        key = "others" if record.rerun_leak else "tensors"
        parts.append(
            f'<div class="cgg-cell-bar" style="position:absolute;left:15%;right:15%;'
            f'top:{top:.1f}px;height:{height:.1f}px;background:{theme.segment_colour(key)}">'
            "</div>"
        )
        if biggest:  # above the bar, in the headroom the plot keeps: never on the bar
            parts.append(
                f'<div class="cgg-cell-max" style="position:absolute;left:0;right:0;'
                f"text-align:center;top:{top - MARK_H:.0f}px;font-size:10px;"
                f'line-height:{MARK_H}px">&#9650;</div>'
            )
    parts.append("</div>")
    return "".join(parts)


# ---------------------------------------------------------------- live sparklines

SPARK_POINTS = 40  # readings a live GPU line's sparkline shows, the latest last
_BLOCKS = "\u2581\u2582\u2583\u2584\u2585\u2586\u2587\u2588"


class LiveReading(NamedTuple):
    """One live tick's reading of a GPU: NVML's used and total memory, its busy percent."""

    used: Optional[int]
    total: Optional[int]
    busy: Optional[int]


def sparkline(values: list[Optional[float]], top: float) -> str:
    """One block character per value, its height the value's share of `top` (a space where
    a value is unknown)."""
    if top <= 0:
        return ""
    last = len(_BLOCKS) - 1
    return "".join(
        " " if value is None else _BLOCKS[max(0, min(last, round(last * value / top)))]
        for value in values
    )


def render_sparklines(readings: list[LiveReading], seconds: float) -> str:
    """Under a GPU line while it is live: its memory and how busy it was over the last
    readings, as sparklines with the latest figures ('memory ▂▃▅▇ 12 GiB · busy ▁▇ 80%,
    last 80 s')."""
    shown = readings[-SPARK_POINTS:]
    if len(shown) < 2:
        return ""
    total = next((r.total for r in reversed(shown) if r.total), None)
    parts = []
    if total:
        memory = sparkline([r.used for r in shown], total)
        latest = shown[-1].used
        parts.append(
            f'<span style="{theme.NOWRAP}">memory <span class="cgg-spark">{memory}</span> '
            f"{_e(format_bytes(latest))}</span>"
        )
    if any(r.busy is not None for r in shown):
        busy = sparkline([r.busy for r in shown], 100)
        latest_busy = shown[-1].busy
        parts.append(
            f'<span style="{theme.NOWRAP}">busy <span class="cgg-spark">{busy}</span> '
            f"{'n/a' if latest_busy is None else f'{latest_busy}%'}</span>"
        )
    if not parts:
        return ""
    span = (len(shown) - 1) * seconds
    return (
        f'<div class="cgg-sparklines" style="{theme.FONT};display:flex;flex-wrap:wrap;'
        f'column-gap:10px;padding-left:18px" title="read every {seconds:g} s while a cell '
        f'runs">{" · ".join(parts)}<span style="{theme.MUTED};{theme.NOWRAP}">last '
        f"{span:.0f} s</span></div>"
    )
