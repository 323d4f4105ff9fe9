"""The HTML view of a `GpuStatus` (``_repr_html_``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..leftovers.html import advice_html, groups_html, leftovers_table
from ..nvml import NvmlDevice
from ..units import escape_html as _e
from .text import (
    KERNEL_AMONG,
    KERNEL_UNLISTED,
    LOST_ROW,
    cell_line,
    device_title,
    grouped,
    host_ram,
    kernel_line,
    kernel_not_identified,
    kernel_not_listed,
    leftovers_heading,
    load_line,
    lost_banners,
    memory_line,
    mig_line,
    mode_line,
    nvml_summary,
    process_table,
    reasons,
    version_lines,
    when,
)

if TYPE_CHECKING:
    from .snapshot import GpuStatus

_STYLE = (
    "<style>.cgg-status{font-family:var(--jp-ui-font-family,sans-serif);font-size:13px}"
    ".cgg-status table{border-collapse:collapse;margin:2px 0 8px 0}"
    ".cgg-status td,.cgg-status th{padding:1px 8px;text-align:left;vertical-align:top}"
    ".cgg-status th{font-weight:600}.cgg-status .cgg-na{opacity:.6}"
    ".cgg-status .cgg-me{font-weight:600}.cgg-status .cgg-warn{color:#b00020}"
    ".cgg-status .cgg-banner{border:2px solid #b00020;border-radius:3px;padding:4px 8px;"
    "margin:4px 0;color:#b00020;font-weight:600}</style>"
)


_NA = ' class="cgg-na"'


def _row(label: str, value: str) -> str:
    return f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>"


def render_html(status: GpuStatus) -> str:
    parts = [_STYLE, '<div class="cgg-status">']
    parts.append(
        f"<div><b>GPU status</b> | {_e(status.host.runtime)} | {_e(when(status))} | "
        f"{status.duration_ms:.1f} ms</div>"
    )
    parts.append("<table>")
    parts += [f"<tr><td>{_e(line)}</td></tr>" for line in version_lines(status)]
    parts.append("</table>")
    parts += [f'<div class="cgg-banner">{_e(banner)}</div>' for banner in lost_banners(status)]
    view = status.nvml
    parts += [
        f"<div{_NA if missing else ''}>{_e(line)}</div>" for line, missing in nvml_summary(status)
    ]
    for device in view.devices:
        parts.append(f"<div><b>{_e(device_title(status, device))}</b></div><table>")
        if device.lost:  # every field would read "n/a (GPU is lost)": the banner says it
            parts.append(_row("lost", LOST_ROW))
            parts += [_row("this kernel", kernel_line(m)) for m in status.memory_for(device.index)]
            parts.append("</table>")
            continue
        parts.append(_row("memory", memory_line(device)))
        parts.append(_row("load", load_line(device)))
        parts.append(_row("modes", mode_line(device)))
        parts += [_row("MIG", mig_line(instance)) for instance in device.mig_instances]
        parts += [_row("this kernel", kernel_line(m)) for m in status.memory_for(device.index)]
        parts.append("</table>")
        parts.append(_process_html(status, device))
        if device.unavailable:
            parts.append(f'<div class="cgg-na">not available: {_e(reasons(device))}</div>')
    unmatched = [m for m in status.memory if m.nvml_index is None]
    if unmatched:
        parts.append("<table>")
        parts += [_row("this kernel", kernel_line(m)) for m in unmatched]
        parts.append("</table>")
    parts.append(f"<table>{_row('host RAM', host_ram(status.host))}</table>")
    if status.leftovers is not None or status.leftover_groups is not None:
        parts.append(f"<div><b>{_e(leftovers_heading(status))}</b></div>")
        if status.leftover_groups:
            parts.append(groups_html(status.leftover_groups))
            parts.append(advice_html(grouped(status).advice()))
        elif status.leftovers:
            parts.append(leftovers_table(status.leftovers))
    elif status.leftovers_note and status.leftovers_note != "not collected":
        parts.append(f'<div class="cgg-na">leftovers: {_e(status.leftovers_note)}</div>')
    if status.history is not None or status.history_note:
        heading = "history" + (f" ({status.history_note})" if status.history_note else "")
        parts.append(f"<div><b>{_e(heading)}</b></div><table>")
        parts += [f"<tr><td>{_e(cell_line(r))}</td></tr>" for r in status.history or ()]
        parts.append("</table>")
    if status.notes:
        parts.append("<ul>")
        parts += [f'<li class="cgg-warn">{_e(note)}</li>' for note in status.notes]
        parts.append("</ul>")
    parts.append("</div>")
    return "".join(parts)


def _process_html(status: GpuStatus, device: NvmlDevice) -> str:
    if device.processes is None:
        if not status.nvml.processes_queried:
            return ""
        why = device.reason("processes") or "not listed"
        return f'<div class="cgg-na">processes: n/a ({_e(why)})</div>'
    if not device.processes:
        if kernel_not_listed(status, device):
            return f"<div>processes: none ({_e(KERNEL_UNLISTED)})</div>"
        return "<div>processes: none</div>"
    table, more = process_table(status, device)
    rows = []
    if kernel_not_identified(status, device):
        rows.append(f"<div>processes: {_e(KERNEL_AMONG)}</div>")
    rows.append("<table><tr><th>PID</th><th>memory</th><th>name</th></tr>")
    for row in table:
        css = ' class="cgg-me"' if row.this_process else ""
        rows.append(
            f"<tr{css}><td>{row.pid}</td><td>{_e(row.memory)}</td><td>{_e(row.label)}</td></tr>"
        )
    if more:
        rows.append(f'<tr><td colspan="3">{_e(more)}</td></tr>')
    rows.append("</table>")
    return "".join(rows)
