"""A traced cell's report as text (terminals, nbconvert) and HTML (an inline SVG timeline in
the theme's colours, no script): made only from the `TraceReport` record."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..units import counted, escape_lines, format_bytes
from ..units import escape_html as _esc
from .kinds import CELL, MODULE, NONE, OWN, SAVED, SourceLine
from .lines import label

if TYPE_CHECKING:
    from .records import DeviceTrace, LineMemory, TraceReport

_SPARKS = "▁▂▃▄▅▆▇█"
_TEXT_WIDTH = 60
_SHOWN = 5


def place(where: SourceLine) -> str:
    """``[5] line 12  out = model(x)``: the line's label and its text."""
    return f"{label(where)}  {where.text}" if where.text else label(where)


def _cell_name(report: TraceReport) -> str:
    if report.cell is not None:
        return f"cell [{report.cell}]"
    return "the saved snapshot" if report.recording == SAVED else "this code"


def headline(report: TraceReport, trace: DeviceTrace) -> str:
    head = (
        f"gpu_trace: {_cell_name(report)} on cuda:{trace.device}: peak "
        f"{format_bytes(trace.peak_allocated)} allocated, {format_bytes(trace.peak_reserved)} "
        f"reserved (start {format_bytes(trace.start_allocated)}, end "
        f"{format_bytes(trace.end_allocated)}, {trace.event_count:,} allocator events)"
    )
    return head


def _line_rows(lines: tuple[LineMemory, ...], names: bool) -> list[str]:
    rows = []
    for line in lines[:_SHOWN]:
        allocations = counted(line.count, "allocation")
        row = f"  {format_bytes(line.nbytes):>10}  {allocations:<16} {place(line.where)}"
        if names and line.names:
            row += "  <- " + ", ".join(line.names)
        rows.append(row)
        for inner in line.inner:
            rows.append(f"  {'':>10}  {format_bytes(inner.nbytes):>10} in {place(inner.where)}")
    if len(lines) > _SHOWN:
        rest = sum(line.nbytes for line in lines[_SHOWN:])
        rows.append(f"  {format_bytes(rest):>10}  at {len(lines) - _SHOWN} more places")
    return rows


def sparkline(trace: DeviceTrace, width: int = _TEXT_WIDTH) -> tuple[str, int]:
    """The timeline as `width` characters at most (each the highest of its stretch), and
    the column of the peak."""
    values = [point.allocated for point in trace.timeline]
    if not values:
        return "", -1
    step = max(1, -(-len(values) // width))
    columns = [max(values[i : i + step]) for i in range(0, len(values), step)]
    low, high = min(columns + [trace.start_allocated]), max(columns)
    span = max(high - low, 1)
    text = "".join(_SPARKS[min(7, (value - low) * 8 // span)] for value in columns)
    peak_index = next(
        (i for i, point in enumerate(trace.timeline) if point.event == trace.peak_event), -1
    )
    return text, (peak_index // step if peak_index >= 0 else -1)


def dropped_text(report: TraceReport, trace: DeviceTrace) -> str:
    if report.recording == OWN:
        return (
            f"(the history kept only the last {trace.event_count:,} events of this cell: "
            "raise --max-entries to see its start)"
        )
    return (
        f"(the history kept only the last {trace.event_count:,} events of this cell: its "
        "start is not in it, so the figures cover only what it kept)"
    )


def device_lines(report: TraceReport, trace: DeviceTrace) -> list[str]:
    lines = [headline(report, trace)]
    if trace.oom is not None:
        lines.append(
            f"CUDA out of memory at {place(trace.oom.where)}: asked for "
            f"{format_bytes(trace.oom.requested)} with {format_bytes(trace.oom.device_free)} "
            "free on the GPU"
        )
    if trace.dropped:
        lines.append(dropped_text(report, trace))
    lines.append("Alive at the peak, by line:")
    lines += _line_rows(trace.at_peak, names=False)
    kept = trace.kept_nbytes
    lines.append(f"Kept at the end (allocated in this cell, still alive): {format_bytes(kept)}")
    lines += _line_rows(trace.kept, names=True)
    spark, column = sparkline(trace)
    if spark:
        low = min([trace.start_allocated] + [point.allocated for point in trace.timeline])
        lines.append(
            f"Allocated over the cell's events, {format_bytes(low)} ({_SPARKS[0]}) to "
            f"{format_bytes(trace.peak_allocated)} ({_SPARKS[-1]}), ^ the peak:"
        )
        lines.append("  " + spark)
        if column >= 0:
            lines.append("  " + " " * column + "^ " + format_bytes(trace.peak_allocated))
    return lines


def footer(report: TraceReport) -> list[str]:
    lines = []
    if report.recording == OWN:
        lines.append(
            f"(recorded for this cell only, at most {report.max_entries:,} events; "
            "recording is off again)"
        )
    elif report.recording == SAVED:
        lines.append("(read from a saved snapshot: its whole recorded history)")
    elif report.recording != NONE:
        lines.append(
            "(your own torch.cuda.memory._record_memory_history recording was on: left as "
            "it is, this cell's events read from it)"
        )
        if not report.users_stacks:
            lines.append("(it keeps no Python stacks, so allocations have no line)")
    if report.names is not None and report.devices:
        how = "as asked" if report.names.requested else "a quick scan"
        done = "" if report.names.complete else ", stopped at its time limit"
        lines.append(
            f"(names after '<-': find_leftovers, {how}, {report.names.seconds * 1000:.0f} ms{done})"
        )
    if report.saved_to is not None:
        lines.append(
            f"torch's snapshot saved to {report.saved_to} (open it at pytorch.org/memory_viz)"
        )
    return lines


def report_text(report: TraceReport) -> str:
    if report.unavailable is not None:
        return escape_lines([f"gpu_trace: {report.unavailable}"])
    if not report.devices:
        return escape_lines(
            [f"gpu_trace: {_cell_name(report)} allocated no CUDA memory"] + footer(report)
        )
    lines: list[str] = []
    for trace in report.devices:
        lines += device_lines(report, trace)
    return escape_lines(lines + footer(report))


# ---------------------------------------------------------------- HTML

_FONT = (
    "font-family:var(--jp-ui-font-family,var(--vscode-font-family,system-ui,sans-serif));"
    "font-size:13px;line-height:18px;color:inherit"
)
_CODE = (
    "font-family:var(--jp-code-font-family,monospace);padding:0;background:none;"
    "white-space:normal;overflow-wrap:anywhere"
)
_TD = "text-align:left;vertical-align:top;padding:1px 6px;overflow-wrap:anywhere"
# A view under 28em (JupyterLab at 600 px with its file browser open leaves it ~210 px)
# gives each line's figures a row and its place and code the next, whole: as a table, the
# code's column would be a few letters wide. Where container queries or <style> are
# missing (GitHub's renderer), the table stays.
_NARROW = (
    "<style>.cgg-trace{container-type:inline-size}@container (max-width:28em){"
    ".cgg-trace .cgg-lines tr{display:grid;grid-template-columns:6em auto}"
    ".cgg-trace .cgg-lines td:nth-child(2){text-align:left!important}"
    ".cgg-trace .cgg-lines td:nth-child(3){grid-column:1/-1;padding-left:2em}}</style>"
)
_NUM = "text-align:right;vertical-align:top;white-space:nowrap;padding:1px 6px"
_AREA = "var(--jp-brand-color1,var(--vscode-charts-blue,#1976d2))"
_PEAK = "var(--jp-error-color1,var(--vscode-charts-red,#d32f2f))"
_GRID = "rgba(128,128,128,.35)"
_W, _H = 600, 90


def _place_html(where: SourceLine) -> str:
    if where.kind not in (CELL, MODULE):  # folded: words, not a line of the user's
        return f"<i>{_esc(label(where))}</i>"
    name = f"<b>{_esc(label(where))}</b>"
    if where.kind == MODULE:
        name = f'<b title="{_esc(where.filename)}">{_esc(label(where))}</b>'
    code = f' <code style="{_CODE}">{_esc(where.text)}</code>' if where.text else ""
    return name + code


def _table(lines: tuple[LineMemory, ...], names: bool) -> str:
    rows = []
    for line in lines[:_SHOWN]:
        held = ""
        if names and line.names:
            held = " &larr; " + ", ".join(f"<code>{_esc(name)}</code>" for name in line.names)
        rows.append(
            f'<tr><td style="{_NUM}">{format_bytes(line.nbytes)}</td>'
            f'<td style="{_TD};white-space:nowrap;opacity:.8">'
            f"{counted(line.count, 'allocation')}</td>"
            f'<td style="{_TD}">{_place_html(line.where)}{held}</td></tr>'
        )
        for inner in line.inner:
            rows.append(
                f'<tr style="opacity:.8"><td></td><td style="{_NUM}">'
                f'{format_bytes(inner.nbytes)}</td><td style="{_TD}">in '
                f"{_place_html(inner.where)}</td></tr>"
            )
    if len(lines) > _SHOWN:
        rest = sum(line.nbytes for line in lines[_SHOWN:])
        rows.append(
            f'<tr style="opacity:.8"><td style="{_NUM}">{format_bytes(rest)}</td>'
            f'<td></td><td style="{_TD}">at {len(lines) - _SHOWN} more places</td></tr>'
        )
    return (
        '<table class="cgg-lines" style="border-collapse:collapse;margin:2px 0 6px 0">'
        + "".join(rows)
        + "</table>"
    )


def timeline_svg(trace: DeviceTrace) -> str:
    """Allocated bytes over the events as an inline SVG (no script): the area in the
    theme's brand colour, the peak marked, the biggest allocations labelled by line."""
    points = trace.timeline
    if not points:
        return ""
    last = max(trace.event_count - 1, 1)
    top = max(max(p.allocated for p in points), 1)

    def xy(event: int, value: int) -> tuple[float, float]:
        return (event / last * (_W - 2) + 1, _H - 14 - value / top * (_H - 28))

    path = [xy(0, trace.start_allocated)] + [xy(p.event, p.allocated) for p in points]
    coords = " ".join(f"{x:.1f},{y:.1f}" for x, y in path)
    base = f"{path[-1][0]:.1f},{_H - 14} 1,{_H - 14}"
    parts = [
        f'<polygon points="{coords} {base}" fill="{_AREA}" fill-opacity=".35" '
        f'stroke="{_AREA}" stroke-width="1.2"/>',
        f'<line x1="0" y1="{_H - 14}" x2="{_W}" y2="{_H - 14}" stroke="{_GRID}"/>',
    ]
    if trace.peak_event >= 0:
        px, py = xy(trace.peak_event, trace.peak_allocated)
        anchor = "end" if px > _W * 0.7 else "start"
        shift = -4 if anchor == "end" else 4
        parts.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3" fill="{_PEAK}"/>')
        parts.append(
            f'<text x="{px + shift:.1f}" y="{max(py - 3, 10):.1f}" font-size="11" '
            f'fill="currentColor" text-anchor="{anchor}">peak '
            f"{_esc(format_bytes(trace.peak_allocated))}</text>"
        )
    labelled: list[float] = []
    for mark in sorted(trace.landmarks, key=lambda mark: -mark.nbytes):
        mx = xy(mark.event, 0)[0]
        if any(abs(mx - x) < 130 for x in labelled):
            continue  # the labels would overlap: the bigger allocation's stays
        labelled.append(mx)
        anchor = "end" if mx > _W * 0.7 else "start"
        parts.append(
            f'<text x="{mx:.1f}" y="{_H - 2}" font-size="10" fill="currentColor" '
            f'opacity=".8" text-anchor="{anchor}">{_esc(label(mark.where))} '
            f"{_esc(format_bytes(mark.nbytes))}</text>"
        )
        parts.append(
            f'<line x1="{mx:.1f}" y1="{_H - 14}" x2="{mx:.1f}" y2="{_H - 10}" '
            f'stroke="currentColor" opacity=".6"/>'
        )
    return (
        f'<svg class="cgg-trace-timeline" viewBox="0 0 {_W} {_H}" width="100%" '
        f'style="max-width:{_W}px;height:auto;display:block;color:inherit" role="img" '
        f'aria-label="allocated memory over the cell">{"".join(parts)}</svg>'
    )


def _device_html(report: TraceReport, trace: DeviceTrace) -> str:
    parts = [f"<div><b>{_esc(headline(report, trace))}</b></div>"]
    if trace.oom is not None:
        parts.append(
            f'<div style="font-weight:600">CUDA out of memory at {_place_html(trace.oom.where)}: '
            f"asked for {format_bytes(trace.oom.requested)} with "
            f"{format_bytes(trace.oom.device_free)} free on the GPU</div>"
        )
    parts.append(timeline_svg(trace))
    parts.append("<div>Alive at the peak, by line:</div>" + _table(trace.at_peak, names=False))
    parts.append(
        f"<div>Kept at the end (allocated in this cell, still alive): "
        f"{format_bytes(trace.kept_nbytes)}</div>" + _table(trace.kept, names=True)
    )
    return "".join(parts)


def report_html(report: TraceReport) -> str:
    if report.unavailable is not None or not report.devices:
        body = f"<pre>{_esc(report_text(report), lines=True)}</pre>"
    else:
        body = "".join(_device_html(report, trace) for trace in report.devices)
        body += "".join(
            f"<div style='opacity:.8'>{_esc(dropped_text(report, trace))}</div>"
            for trace in report.devices
            if trace.dropped
        )
        body += "".join(f"<div style='opacity:.8'>{_esc(line)}</div>" for line in footer(report))
    return (
        f'{_NARROW}<div class="cgg-trace" style="{_FONT};max-width:100%;overflow-x:auto">'
        f"{body}</div>"
    )
