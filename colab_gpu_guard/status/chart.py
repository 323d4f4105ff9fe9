"""The panel's per-cell history: an inline-SVG bar chart of memory after each of the last
cells, from one `GpuStatus` (its ``history``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..nvml import INCLUDES_RESERVED, V1
from ..units import format_bytes
from .html import escape as _e
from .panel_html import _FONT, _WARN

if TYPE_CHECKING:
    from ..tracker import CellMemory
    from .snapshot import GpuStatus


def _history_values(
    status: GpuStatus, records: list[CellMemory]
) -> tuple[str, list[Optional[int]], list[Optional[int]]]:
    """What to chart: torch's allocated bytes once CUDA is in use, else NVML's used bytes
    when recorded, else nothing (the tracker records 0 allocated without CUDA)."""
    allocated = [r.allocated_after for r in records]
    cuda = bool(getattr(status.torch, "cuda_initialized", False))
    if any(value for value in allocated) or (cuda and any(v is not None for v in allocated)):
        return "allocated", allocated, [r.exact_peak for r in records]  # no outline at a bound
    used = [r.nvml_used_after for r in records]
    if any(value is not None for value in used):
        v1 = any(r.nvml_used_call == V1 for r in records)
        kind = f"NVML used ({INCLUDES_RESERVED})" if v1 else "NVML used"
        return kind, used, [None] * len(records)
    return "", [], []


def render_history(status: GpuStatus, width: int = 560, height: int = 120) -> str:
    """An inline-SVG bar chart of memory after each of the last cells: the bar is allocated
    memory after the cell, the outline its peak, red bars leaked on rerun. Each bar's
    tooltip gives the cell number and figures; the cell numbers are printed below."""
    head = f'<div class="cgg-history-html" style="{_FONT}">'
    if status.history is None:
        note = status.history_note or "not recorded"
        return f"{head}<b>Per-cell history</b>: {_e(note)}</div>"
    records = list(status.history)
    if not records:
        return f"{head}<b>Per-cell history</b>: {_e(status.history_note or 'no cells yet')}</div>"
    kind, values, peaks = _history_values(status, records)
    note = f" ({_e(status.history_note)})" if status.history_note else ""
    leaks = sum(1 for r in records if r.rerun_leak)
    leak_text = (
        f' &middot; <span style="{_WARN}">{leaks} rerun leak{"s" if leaks != 1 else ""}</span>'
        if leaks
        else ""
    )
    if not kind:
        leaked = ", ".join(
            f"[{_e(r.cell)}] +{_e(format_bytes(r.leak_bytes))}" for r in records if r.rerun_leak
        )
        return (
            f"{head}<b>Per-cell history</b>{note}: {len(records)} cells, no GPU memory figures "
            f"(CUDA is not in use in this kernel){leak_text}"
            + (f"<br>leaked on rerun: {leaked}" if leaked else "")
            + "</div>"
        )
    top = max([v for v in values if v is not None] + [p for p in peaks if p is not None] + [1])
    plot_h = height - 30
    slot = width / max(len(records), 1)
    bar_w = max(2.0, slot * 0.7)
    label_every = max(1, len(records) // 15 + (1 if len(records) % 15 else 0))
    svg = [
        f'<svg class="cgg-chart" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg" '
        'style="max-width:100%;font-size:10px">',
        f'<line x1="0" y1="{plot_h + 0.5}" x2="{width}" y2="{plot_h + 0.5}" stroke="#999"/>',
        f'<text x="2" y="10" fill="#666">{_e(format_bytes(top))}</text>',
    ]
    for index, record in enumerate(records):
        x = index * slot + (slot - bar_w) / 2
        value = values[index] or 0
        peak = peaks[index]
        bar_h = plot_h * value / top
        colour = "#d62728" if record.rerun_leak else "#1f77b4"
        tip = f"cell [{record.cell}]: {kind} {format_bytes(values[index])}"
        if kind == "allocated":
            tip += f", peak {record.peak_text}"
        if record.reserved_after is not None:
            tip += f", reserved {format_bytes(record.reserved_after)}"
        if record.rerun_leak:
            tip += f", LEAK on rerun: {format_bytes(record.leak_bytes)}"
        if record.ooms:
            tip += f", {record.ooms} OOM(s)"
        group = [f'<g class="cgg-cell"><title>{_e(tip)}</title>']
        if peak is not None and peak > value:
            peak_h = plot_h * peak / top
            group.append(
                f'<rect x="{x:.1f}" y="{plot_h - peak_h:.1f}" width="{bar_w:.1f}" '
                f'height="{peak_h:.1f}" fill="none" stroke="#1f77b4" stroke-dasharray="2,1"/>'
            )
        group.append(
            f'<rect x="{x:.1f}" y="{plot_h - bar_h:.1f}" width="{bar_w:.1f}" '
            f'height="{max(bar_h, 0.5):.1f}" fill="{colour}"/>'
        )
        if record.rerun_leak:
            group.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{max(plot_h - bar_h - 2, 9):.1f}" '
                f'text-anchor="middle" fill="#d62728">&#9650;</text>'
            )
        if index % label_every == 0 or index == len(records) - 1:
            group.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{plot_h + 12}" text-anchor="middle" '
                f'fill="#666">{_e(record.cell)}</text>'
            )
        group.append("</g>")
        svg.append("".join(group))
    svg.append(
        f'<text x="{width - 2}" y="{height - 2}" text-anchor="end" fill="#666">'
        "cell &#8594; bars: after the cell; dashed: peak; red &#9650;: leaked on rerun</text>"
    )
    svg.append("</svg>")
    last = records[-1]
    summary = (
        f"<b>Per-cell history</b>{note}: {kind} after the last {len(records)} cells, "
        f"last [{_e(last.cell)}] {_e(format_bytes(values[-1]))}{leak_text}"
    )
    return f"{head}{summary}<br>{''.join(svg)}</div>"
