"""The widget panel's sections as HTML fragments, each a view of one `GpuStatus`: the
header, a line per GPU, what matters now, an action's message, processes and details (the
leftovers in `panel_leftovers`, the per-cell chart in `chart`). Pure functions; all text
not written here is escaped, colours come from `theme`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from ..nvml import INCLUDES_RESERVED
from ..units import counted, format_bytes
from ..units import escape_html as _e
from . import theme
from .compact import (
    FREE,
    KERNEL,
    NO_GPU_RAM,
    OTHERS,
    OTHERS_CONTEXT,
    OTHERS_KERNEL,
    UNLISTED,
    Now,
    device_segments,
    freshness,
    gpu_line,
    held,
    last_leak,
    mig_text,
    no_gpu_text,
    now_items,
    versions,
)
from .notes import COLAB_NO_GPU, NO_GPU_LISTED, cpu_only_note
from .panel_leftovers import TOP_LEFTOVERS
from .text import (
    KERNEL_AMONG,
    KERNEL_UNLISTED,
    host_ram,
    kernel_not_identified,
    kernel_not_listed,
    lost_banner,
    process_label,
    torch_line,
)

if TYPE_CHECKING:
    from ..nvml import NvmlDevice
    from .snapshot import GpuStatus

# re-exported: the bar's facts live in `compact`, the leftovers section in `panel_leftovers`
__all__ = ["TOP_LEFTOVERS", "device_segments"]


# A bar segment's name in its tooltip.
SEGMENTS = {
    "tensors": "this kernel's tensors (allocated)",
    "cache": "this kernel's allocator cache (reserved - allocated)",
    "context": "CUDA context + other libraries in this process",
    "kernel": "this kernel (as NVML counts it)",
    "others": "other processes",
    "others+context": "other processes + this kernel's CUDA context",
    "others+driver": f"other processes ({INCLUDES_RESERVED})",
    "others+context+driver": f"other processes + this kernel's CUDA context ({INCLUDES_RESERVED})",
    "others+kernel": "other processes + this kernel (NVML lists it without a figure)",
    "others+kernel+driver": "other processes + this kernel (NVML lists it without a figure; "
    f"{INCLUDES_RESERVED})",
    "unlisted": "used, charged to no process NVML lists (the driver's; processes hidden "
    "from this container)",
    "unlisted+driver": f"used, charged to no process NVML lists ({INCLUDES_RESERVED})",
    "driver": "reserved by the driver",
    "free": "free",
    "used": "used",
}
PART_COLOURS = {
    KERNEL: "tensors",
    OTHERS: "others",
    OTHERS_CONTEXT: "others",
    OTHERS_KERNEL: "others",
    UNLISTED: "driver",
    FREE: "free",
}

BADGES = {
    "broken": ("error", "CUDA context broken: restart the runtime"),
    "busy": ("warn", "GPU busy: queued CUDA work still running"),
    "forked": ("warn", "forked process: CUDA cannot be used here"),
}
HEALTH_WORDS = {
    "ok": "CUDA context ok",
    "not initialised": "CUDA not used yet",
}

_LINE = f"{theme.FONT};overflow-wrap:anywhere"
# An HTML widget's content box grows with unbreakable text (a flex item's min-width is its
# content): let it shrink, so long lines wrap instead of widening the panel. Nothing that
# holds a figure or a model name is cut: lines wrap between their parts, each part whole.
PANEL_STYLE = (
    "<style>.cgg-panel .widget-html-content{min-width:0;max-width:100%;overflow:hidden}"
    ".cgg-panel .widget-html,.cgg-panel .widget-vbox{min-width:0}</style>"
)
# the no-GPU line's host RAM figures, as pieces that wrap between them
NO_GPU_RAM_PARTS = ("host RAM {available} available", "of {total};", "this kernel {rss}")
_ROW = "display:flex;flex-wrap:wrap;align-items:center;column-gap:10px;min-width:0"
HELD_NAME_CHARS = 40  # a longer name is cut on the held line (whole in its tooltip)


def _swatch(key: str) -> str:
    return (
        f'<span style="display:inline-block;width:8px;height:8px;margin-right:3px;'
        f'background:{theme.segment_colour(key)};border:1px solid {theme.BORDER}"></span>'
    )


def render_header(
    status: GpuStatus, cell: Optional[int] = None, running: str = "", fresh: bool = True
) -> str:
    """The driver and CUDA versions (or why they are unknown) first, then what runs now
    (`running`) or, with `fresh`, when the figures were taken ('after cell [N], HH:MM:SS':
    the static copy's age; the live panel, refreshed after every cell, leaves it out, so
    that a cell that changed nothing changes nothing in it); a badge for a broken, busy or
    forked CUDA context. Wraps between its parts at a narrow width."""
    when = running if running else freshness(status, cell) if fresh else ""
    fact = versions(status)
    shown = (
        theme.label("error", _e(fact.text), "cgg-versions")
        if fact.kind == "error"
        else f'<b class="cgg-versions">{_e(fact.text)}</b>'
    )
    health = status.torch.health
    badge = ""
    if health in BADGES:
        kind, text = BADGES[health]
        tip = f' title="{_e(status.torch.health_detail)}"' if status.torch.health_detail else ""
        badge = f"<span{tip}>" + theme.label(kind, _e(text), f"cgg-badge cgg-health-{_e(health)}")
        badge += "</span>"
    return (
        f"{PANEL_STYLE}"
        f'<div class="cgg-header-html" style="{_LINE};{_ROW}">'
        f"<span>{shown}</span>"
        + (f'<span class="cgg-fresh" style="{theme.MUTED}">{_e(when)}</span>' if when else "")
        + f"{badge}</div>"
    )


def _bar(segments: list[tuple[str, int]], total: Optional[int], width: str) -> str:
    whole = total if total else sum(size for _, size in segments)
    cells = []
    for key, size in segments:
        if size <= 0 or not whole:
            continue
        share = 100.0 * size / whole
        tip = f"{SEGMENTS.get(key, key)}: {format_bytes(size)} ({share:.1f}%)"
        cells.append(
            f'<span class="cgg-seg cgg-seg-{key}" title="{_e(tip)}" '
            f'style="width:{share:.3f}%;background:{theme.segment_colour(key)}"></span>'
        )
    return (
        f'<span class="cgg-bar" style="display:flex;{width};height:12px;'
        f'border:1px solid {theme.BORDER};border-radius:2px;overflow:hidden">'
        + "".join(cells)
        + "</span>"
    )


def render_device(status: GpuStatus, device: NvmlDevice) -> str:
    """One GPU - name, bar, this kernel / others / unattributed / free, used of total, busy,
    temperature, power - on one line where it fits, else wrapped between its parts (never
    cut); its MIG instances under it."""
    cuda = ", ".join(f"cuda:{m.device}" for m in status.memory_for(device.index))
    title = f"GPU {device.index}: {device.name or 'name n/a'}" + (f" ({cuda})" if cuda else "")
    if device.lost:  # the banner, not a bar and a line of n/a
        banner = _banner(lost_banner(status, device))
        return f'<div class="cgg-device" style="{theme.FONT}">{banner}</div>'
    line = gpu_line(status, device)
    parts = [
        f'<span class="cgg-part cgg-figure" style="{theme.NOWRAP}">{_swatch(PART_COLOURS[name])}'
        f"{_e(name)} <b>{_e(format_bytes(size))}</b></span>"
        for name, size in line.parts
    ]
    parts.append(f'<span class="cgg-used cgg-figure" style="{theme.NOWRAP}">{_e(line.used)}</span>')
    if line.load:
        parts.append(
            f'<span class="cgg-load cgg-figure" style="{theme.NOWRAP};{theme.MUTED}" '
            f'title="{_e(line.load_title)}">{_e(line.load)}</span>'
        )
    sizes = " · ".join(f"{name} {format_bytes(size)}" for name, size in line.parts)
    rest_title = f"{sizes} · {line.used} · {line.load_title}"
    rows = [
        f'<div class="cgg-device" style="{theme.FONT}"><div class="cgg-gpu" style="{_ROW}">',
        f'<span class="cgg-gpu-name cgg-figure" title="{_e(title)}" '
        f'style="overflow-wrap:anywhere"><b>{device.index}</b> {_e(line.name)}</span>',
        _bar(
            device_segments(status, device),
            device.memory_total,
            "flex:1 1 90px;min-width:60px;max-width:220px",
        ),
        f'<span class="cgg-gpu-rest" title="{_e(rest_title)}" style="display:flex;'
        f'flex-wrap:wrap;column-gap:6px;min-width:0">'
        + ' <span aria-hidden="true">·</span> '.join(parts)
        + "</span></div>",
    ]
    for instance in device.mig_instances:
        segments = [("used", instance.memory_used or 0)]
        if instance.memory_free is not None:
            segments.append(("free", instance.memory_free))
        rows.append(
            f'<div class="cgg-mig" style="{_ROW};padding-left:18px">'
            + _bar(segments, instance.memory_total, "flex:0 0 80px")
            + f'<span class="cgg-figure" style="{theme.NOWRAP}" title="{_e(instance.uuid or "")}">'
            f"{_e(mig_text(instance))}</span></div>"
        )
    rows.append("</div>")
    return "".join(rows)


def _banner(text: str) -> str:
    background, colour = theme.PAIRS["error"]
    return (
        f'<div class="cgg-banner" style="background:{background};color:{colour};'
        f'border-radius:3px;padding:2px 8px;font-weight:600">{_e(text)}</div>'
    )


def render_no_gpu(status: GpuStatus) -> str:
    """One calm line: that there is no GPU (why, where the header has not said it), and
    the host RAM; it wraps between the two, and the figures are never cut."""
    if status.nvml.lost_at_start:
        banner = _banner(lost_banner(status, None))
        return f'<div class="cgg-no-gpu" style="{theme.FONT}">{banner}</div>'
    why = no_gpu_text(status)
    if status.host.note:  # why the RAM figures are missing: a sentence, it wraps
        ram = f'<span class="cgg-ram">{_e(status.host.note)}</span>'
    else:  # the figures, each whole
        ram = '<span class="cgg-ram" style="display:flex;flex-wrap:wrap;column-gap:4px">'
        ram += "".join(
            f'<span class="cgg-figure" style="{theme.NOWRAP}">{_e(host_ram(status.host, part))}'
            "</span>"
            for part in NO_GPU_RAM_PARTS
        )
        ram += "</span>"
    return (
        f'<div class="cgg-no-gpu" style="{theme.FONT};{_ROW}">'
        f'<b style="overflow-wrap:anywhere">{_e(why)}</b>{ram}</div>'
    )


def _now_html(item: Now, css: str) -> str:
    if item.kind == "info":
        return f'<span class="{css}">{_e(item.text)}</span>'
    return theme.label(item.kind, _e(item.text), css, wrap=True)


def render_held(status: GpuStatus) -> str:
    """The held line: 'held between cells: `keep` 382 MiB, `Out[3]` 191 MiB (573 MiB in
    all)', each name in the code font (a long one cut, whole in its tooltip)."""
    facts = held(status)
    head = '<span class="cgg-held-head">held between cells:</span> '
    if facts.note:
        return f'<div class="cgg-held">{head}{_e(facts.note)}</div>'
    if not facts.holders:
        return f'<div class="cgg-held">{head}no arrays</div>'
    names = []
    for holder in facts.holders:
        name = holder.name
        shown = name if len(name) <= HELD_NAME_CHARS else name[: HELD_NAME_CHARS - 1] + "…"
        names.append(  # a long name may wrap (whole in its tooltip); the size never does
            f'<span class="cgg-holder" title="{_e(name)}">'
            f'<span class="cgg-code" style="{theme.CODE};overflow-wrap:anywhere">'
            f"{_e(shown)}</span> "
            f'<b class="cgg-figure" style="{theme.NOWRAP}">{_e(format_bytes(holder.nbytes))}'
            "</b></span>"
        )
    if facts.more:
        names.append(
            f'<span class="cgg-figure" style="{theme.NOWRAP}">{facts.more:,} more '
            f"{_e(format_bytes(facts.more_bytes))}</span>"
        )
    total = ""
    if len(names) > 1:
        total = (
            f' <span class="cgg-figure" style="{theme.NOWRAP}">'
            f"({_e(format_bytes(facts.total_bytes))} in all)</span>"
        )
    return f'<div class="cgg-held">{head}{", ".join(names)}{total}</div>'


def render_now(status: GpuStatus) -> str:
    """Under the GPU lines: what is held between cells, the last rerun that kept memory
    again, and what else matters now (each item whole, lines wrap)."""
    lines = [render_held(status)]
    leak = last_leak(status)
    if leak is not None:
        lines.append(f'<div class="cgg-leak-line">{_now_html(leak, "cgg-now-leak")}</div>')
    items = now_items(status)
    if items:
        shown = " · ".join(_now_html(item, f"cgg-now-{item.kind}") for item in items)
        lines.append(f'<div class="cgg-now-items">{shown}</div>')
    return f'<div class="cgg-now-html" style="{_LINE}">{"".join(lines)}</div>'


def render_message(kind: str, text: str, details: str = "") -> str:
    """An action's outcome on one line ('ok', 'error' or 'info'); the full report in its
    tooltip (and one click away in Details)."""
    body = _e(text)
    if kind == "error":
        body = theme.label("error", body, "cgg-msg-error", wrap=True)
    else:
        body = f'<span class="cgg-msg-{_e(kind)}">{body}</span>'
    tip = _e(details, lines=True) if details else _e(text)  # a report: its lines stay
    return f'<div class="cgg-message-html" style="{_LINE}" title="{tip}">{body}</div>'


def section_label(name: str, status: Optional[GpuStatus]) -> str:
    """The toggle's words, a count saying what it counts: 'Leftovers · 3 holders',
    'Processes · 2 others' (the section lists this kernel too), 'History', 'Details'."""
    if status is None:
        return name
    if name == "Leftovers" and status.leftovers is not None and status.leftovers_count:
        facts = held(status)
        return f"Leftovers · {counted(facts.holder_count, 'holder')}"
    if name == "Processes":
        count = sum(len(device.other_processes()) for device in status.nvml.devices)
        return f"Processes · {counted(count, 'other')}" if count else name
    return name


# the widest words each toggle can show, for its fixed width (a count must not push the
# buttons after it)
WIDEST_LABEL = {
    "Leftovers": "Leftovers · 999 holders",
    "Processes": "Processes · 9 others",
    "History": "History",
    "Details": "Details",
}


def section_heading(text: str) -> str:
    """The heading an opened section starts with."""
    return f'<div class="cgg-section-heading" style="{theme.FONT};font-weight:600">{_e(text)}</div>'


def render_processes(status: GpuStatus) -> str:
    """Every GPU's processes as NVML lists them (this kernel marked)."""
    parts = [
        f'<div class="cgg-processes" style="{theme.FONT}">',
        section_heading("GPU processes, as NVML lists them (this kernel marked)"),
    ]
    if not status.has_gpu:
        parts.append("No GPU: no GPU processes to list")
    for device in status.nvml.devices:
        head = f"<b>GPU {device.index}</b>: "
        if device.processes:
            among = kernel_not_identified(status, device)
            note = f" ({_e(KERNEL_AMONG)})" if among else ""
            items = "".join(
                f'<div style="overflow-wrap:anywhere;padding-left:18px">'
                f"PID {int(p.pid)} · {_e(format_bytes(p.used_memory))} · "
                f"{_e(process_label(p, spelled_out=True))}</div>"
                for p in sorted(device.processes, key=lambda p: -(p.used_memory or 0))
            )
            count = counted(len(device.processes), "process", "processes")
            parts.append(f"<div>{head}{count}{note}</div>{items}")
        elif kernel_not_listed(status, device):
            parts.append(f"<div>{head}none ({_e(KERNEL_UNLISTED)})</div>")
        elif device.processes is None and status.nvml.processes_queried:
            why = device.reason("processes") or "not listed"
            parts.append(f"<div>{head}processes n/a ({_e(why)})</div>")
        else:
            parts.append(f"<div>{head}none</div>")
    parts.append("</div>")
    return "".join(parts)


def details_notes(status: GpuStatus) -> list[str]:
    """The snapshot's notes that the collapsed panel has not said already (why there is no
    GPU; a CPU-only torch, which the torch line says)."""
    said = {COLAB_NO_GPU, NO_GPU_LISTED, cpu_only_note(status.torch)}
    return [note for note in status.notes if note not in said]


def render_details(status: GpuStatus, last_action: str = "") -> str:
    """NVML's and torch's versions, the CUDA context, Colab or not, notes, host RAM, the
    snapshot's cost, and the last action's one-line result (its full report is the
    section's 'full report' toggle)."""
    torch = status.torch
    health = HEALTH_WORDS.get(torch.health) or BADGES.get(torch.health, ("", torch.health))[1]
    colab = "yes" if status.host.runtime == "Colab" else "no"
    runtime = "" if status.host.runtime in ("Colab", "local") else f" ({status.host.runtime})"
    # a CPU-only torch: the torch line says so; "CUDA not used yet" would not be true
    context = "" if torch.cpu_only else f"{health} · "
    lines = []
    if status.nvml.available and status.nvml.nvml_version:
        lines.append(f"NVML {status.nvml.nvml_version}")
    lines += [torch_line(status), f"{context}Colab: {colab}{runtime}"]
    lines.append(host_ram(status.host, NO_GPU_RAM))
    when = time.strftime("%H:%M:%S", time.localtime(status.taken_at))
    lines.append(f"snapshot {when}, took {status.duration_ms:.0f} ms")
    body = section_heading("Details") + "".join(
        f'<div style="overflow-wrap:anywhere">{_e(line)}</div>' for line in lines
    )
    notes = details_notes(status)
    if notes:
        body += (
            '<ul class="cgg-notes" style="margin:2px 0;padding-left:18px">'
            + "".join(f"<li>{_e(note)}</li>" for note in notes)
            + "</ul>"
        )
    if last_action:
        body += (
            f'<div class="cgg-last-action" style="{_LINE}"><b>last action:</b> '
            f"{_e(last_action)}</div>"
        )
    return f'<div class="cgg-details-html" style="{theme.FONT}">{body}</div>'


def render_report(report: str) -> str:
    """An action's full report, shown when its toggle is pressed."""
    return (
        f'<pre class="cgg-report" style="white-space:pre-wrap;overflow-wrap:anywhere;'
        f'word-break:normal;margin:0;font-size:12px;{theme.CODE}">{_e(report, lines=True)}</pre>'
    )


def release_summary(report: Any) -> str:
    """One line for a `ReleaseReport`: what was dropped, freed, and is still held."""
    dropped = getattr(report, "dropped", None)
    if not isinstance(dropped, dict):
        lines = [line.strip() for line in str(report).splitlines() if line.strip()]
        return lines[0] if lines else "gpu_reset done"
    words = getattr(report, "dropped_counts", None)
    if callable(words):
        counts = ", ".join(words())
    else:
        counts = ", ".join(f"{count} {kind}" for kind, count in dropped.items() if count)
    parts = [f"gpu_reset: dropped {counts or 'nothing'}"]
    freed = getattr(report, "freed_bytes", None)
    if freed is not None:
        parts.append(f"freed {format_bytes(freed)}")
    held = getattr(report, "leftovers", None) or ()
    if held:
        total = getattr(held, "total_bytes", None)  # a LeftoverList: no entry made per block
        if not isinstance(total, int):
            total = sum(int(getattr(item, "nbytes", 0) or 0) for item in held)
        noun = "array" if len(held) == 1 else "arrays"
        parts.append(f"still held: {len(held)} {noun}, {format_bytes(total)}")
    else:
        parts.append("no arrays held by the notebook's variables")
    if getattr(report, "restart_required", False):
        parts.append("the CUDA context is broken: restart the runtime")
    parts += [f"WARNING: {warning}" for warning in getattr(report, "warnings", None) or ()]
    return "; ".join(parts)
