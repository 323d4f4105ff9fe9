"""The widget panel's sections as HTML fragments, each a view of one `GpuStatus`: the
header, a line per GPU, what matters now, an action's message, processes and details (the
leftovers in `panel_leftovers`, the per-cell chart in `chart`). Pure functions; all text
not written here is escaped, colours come from `theme`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from ..nvml import INCLUDES_RESERVED
from ..units import format_bytes
from . import theme
from .compact import (
    FREE,
    KERNEL,
    NO_GPU_RAM,
    OTHERS,
    OTHERS_CONTEXT,
    OTHERS_KERNEL,
    UNLISTED,
    device_segments,
    freshness,
    gpu_line,
    mig_text,
    no_gpu_text,
    now_items,
)
from .html import escape as _e
from .panel_leftovers import TOP_LEFTOVERS
from .text import (
    KERNEL_AMONG,
    KERNEL_UNLISTED,
    host_ram,
    kernel_not_identified,
    kernel_not_listed,
    lost_banner,
    process_label,
    version_lines,
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

_LINE = f"{theme.FONT};{theme.ELLIPSIS}"
# An HTML widget's content box grows with unbreakable text (a flex item's min-width is its
# content): let it shrink, so long lines are ellipsised instead of widening the panel.
PANEL_STYLE = (
    "<style>.cgg-panel .widget-html-content{min-width:0;max-width:100%;overflow:hidden}"
    ".cgg-panel .widget-html,.cgg-panel .widget-vbox{min-width:0}"
    # a narrow panel puts a GPU's figures on a second line under its name and bar
    ".cgg-panel{container-type:inline-size}@container (max-width:560px){"
    ".cgg-panel .cgg-gpu{flex-wrap:wrap}.cgg-panel .cgg-gpu-rest{flex-basis:100%}}</style>"
)
_ROW = "display:flex;flex-wrap:wrap;align-items:center;column-gap:10px;min-width:0"
_GPU_ROW = "display:flex;flex-wrap:nowrap;align-items:center;column-gap:10px;min-width:0"


def _swatch(key: str) -> str:
    return (
        f'<span style="display:inline-block;width:8px;height:8px;margin-right:3px;'
        f'background:{theme.segment_colour(key)};border:1px solid {theme.BORDER}"></span>'
    )


def render_header(status: GpuStatus, cell: Optional[int] = None, running: str = "") -> str:
    """'GPU guard · after cell [N], HH:MM:SS', or what runs now; a badge for a broken,
    busy or forked CUDA context."""
    when = _e(running) if running else _e(freshness(status, cell))
    health = status.torch.health
    badge = ""
    if health in BADGES:
        kind, text = BADGES[health]
        tip = f' title="{_e(status.torch.health_detail)}"' if status.torch.health_detail else ""
        badge = (
            f"<span{tip}> "
            + theme.label(kind, _e(text), f"cgg-badge cgg-health-{_e(health)}")
            + "</span>"
        )
    return (
        f"{PANEL_STYLE}"
        f'<div class="cgg-header-html" style="{_LINE}" title="GPU guard: {when}">'
        f'<b class="cgg-fresh">{when}</b>{badge}</div>'
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
    """One GPU on one line - name, bar, this kernel / others / unlisted / free, used of total,
    utilisation, temperature, power - and its MIG instances under it."""
    cuda = ", ".join(f"cuda:{m.device}" for m in status.memory_for(device.index))
    title = f"GPU {device.index}: {device.name or 'name n/a'}" + (f" ({cuda})" if cuda else "")
    if device.lost:  # the banner, not a bar and a line of n/a
        banner = _banner(lost_banner(status, device))
        return f'<div class="cgg-device" style="{theme.FONT}">{banner}</div>'
    line = gpu_line(status, device)
    parts = " · ".join(
        f'<span class="cgg-part" style="{theme.NOWRAP}">{_swatch(PART_COLOURS[name])}'
        f"{_e(name)} <b>{_e(format_bytes(size))}</b></span>"
        for name, size in line.parts
    )
    sizes = " · ".join(f"{name} {format_bytes(size)}" for name, size in line.parts)
    rest_title = f"{sizes} · {line.used} · {line.load_title}"
    rows = [
        f'<div class="cgg-device" style="{theme.FONT}"><div class="cgg-gpu" style="{_GPU_ROW}">',
        f'<span class="cgg-gpu-name" title="{_e(title)}" style="{theme.ELLIPSIS};'
        f'flex:0 1 auto;max-width:240px"><b>{device.index}</b> {_e(line.name)}</span>',
        _bar(
            device_segments(status, device),
            device.memory_total,
            "flex:1 1 90px;min-width:60px;max-width:220px",
        ),
        f'<span class="cgg-gpu-rest" title="{_e(rest_title)}" style="{theme.ELLIPSIS};'
        f'flex:0 1 auto">{parts} · <span class="cgg-used">{_e(line.used)}</span>',
    ]
    if line.load:
        rows.append(f' · <span class="cgg-load" style="{theme.MUTED}">{_e(line.load)}</span>')
    rows.append("</span></div>")
    for instance in device.mig_instances:
        segments = [("used", instance.memory_used or 0)]
        if instance.memory_free is not None:
            segments.append(("free", instance.memory_free))
        rows.append(
            f'<div class="cgg-mig" style="{_ROW};padding-left:18px">'
            + _bar(segments, instance.memory_total, "flex:0 0 80px")
            + f'<span style="{theme.NOWRAP}" title="{_e(instance.uuid or "")}">'
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
    """One calm line: why there is no GPU, and the host RAM."""
    if status.nvml.lost_at_start:
        banner = _banner(lost_banner(status, None))
        return f'<div class="cgg-no-gpu" style="{theme.FONT}">{banner}</div>'
    why = no_gpu_text(status)
    ram = host_ram(status.host, NO_GPU_RAM)
    return (
        # the reason may be cut (its title has it whole); the host-RAM figure never is: at a
        # narrow width it wraps to its own line
        f'<div class="cgg-no-gpu" style="{theme.FONT};{_ROW}" title="{_e(why)}">'
        f'<b style="{theme.ELLIPSIS}">{_e(why)}</b>'
        f'<span style="{theme.NOWRAP}">{_e(ram)}</span></div>'
    )


def render_now(status: GpuStatus) -> str:
    """One line of what matters now; every item in the tooltip."""
    items = now_items(status)
    shown = " · ".join(
        theme.label(item.kind, _e(item.text), f"cgg-now-{item.kind}")
        if item.kind != "info"
        else f'<span class="cgg-now-info">{_e(item.text)}</span>'
        for item in items
    )
    tip = "\n".join(item.text for item in items)
    return f'<div class="cgg-now-html" style="{_LINE}" title="{_e(tip)}">{shown}</div>'


def render_message(kind: str, text: str, details: str = "") -> str:
    """An action's outcome on one line ('ok', 'error' or 'info'); the full report in its
    tooltip (and in the Details section)."""
    body = _e(text)
    if kind == "error":
        body = theme.label("error", body, "cgg-msg-error")
    else:
        body = f'<span class="cgg-msg-{_e(kind)}">{body}</span>'
    tip = _e(details or text)
    return f'<div class="cgg-message-html" style="{_LINE}" title="{tip}">{body}</div>'


def section_label(name: str, status: Optional[GpuStatus]) -> str:
    """The toggle's words: 'Leftovers 3', 'Processes 2', 'History', 'Details'."""
    if status is None:
        return name
    if name == "Leftovers" and status.leftovers is not None and status.leftovers_count:
        return f"Leftovers {status.leftovers_count}"
    if name == "Processes":
        count = sum(len(device.other_processes()) for device in status.nvml.devices)
        return f"Processes {count}" if count else name
    return name


def render_processes(status: GpuStatus) -> str:
    """Every GPU's processes as NVML lists them (this kernel marked)."""
    parts = [f'<div class="cgg-processes" style="{theme.FONT}">']
    if not status.has_gpu:
        parts.append("No GPU: no GPU processes to list")
    for device in status.nvml.devices:
        head = f"<b>GPU {device.index}</b>: "
        if device.processes:
            among = kernel_not_identified(status, device)
            note = f" ({_e(KERNEL_AMONG)})" if among else ""
            items = "".join(
                f'<div style="{theme.ELLIPSIS};padding-left:18px" title="{_e(process_label(p))}">'
                f"PID {int(p.pid)} · {_e(format_bytes(p.used_memory))} · "
                f"{_e(process_label(p))}</div>"
                for p in sorted(device.processes, key=lambda p: -(p.used_memory or 0))
            )
            count = len(device.processes)
            noun = "process" if count == 1 else "processes"
            parts.append(f"<div>{head}{count} {noun}{note}</div>{items}")
        elif kernel_not_listed(status, device):
            parts.append(f"<div>{head}none ({_e(KERNEL_UNLISTED)})</div>")
        elif device.processes is None and status.nvml.processes_queried:
            why = device.reason("processes") or "not listed"
            parts.append(f"<div>{head}processes n/a ({_e(why)})</div>")
        else:
            parts.append(f"<div>{head}none</div>")
    parts.append("</div>")
    return "".join(parts)


def render_details(status: GpuStatus, last_action: str = "") -> str:
    """Versions, the CUDA context, Colab or not, notes, host RAM, the snapshot's cost, and
    the last action's full report."""
    torch = status.torch
    health = HEALTH_WORDS.get(torch.health) or BADGES.get(torch.health, ("", torch.health))[1]
    colab = "yes" if status.host.runtime == "Colab" else "no"
    runtime = "" if status.host.runtime in ("Colab", "local") else f" ({status.host.runtime})"
    # a CPU-only torch: the version line says so; "CUDA not used yet" would not be true
    context = "" if torch.cpu_only else f"{health} · "
    lines = [*version_lines(status), f"{context}Colab: {colab}{runtime}"]
    lines.append(host_ram(status.host, NO_GPU_RAM))
    when = time.strftime("%H:%M:%S", time.localtime(status.taken_at))
    lines.append(f"snapshot {when}, took {status.duration_ms:.0f} ms")
    body = "".join(f"<div>{_e(line)}</div>" for line in lines)
    if status.notes:
        body += (
            '<ul class="cgg-notes" style="margin:2px 0;padding-left:18px">'
            + "".join(f"<li>{_e(note)}</li>" for note in status.notes)
            + "</ul>"
        )
    if last_action:
        body += (
            '<div><b>last action</b></div><pre style="white-space:pre-wrap;'
            f'overflow-wrap:anywhere;word-break:normal;margin:0;font-size:12px">{_e(last_action)}</pre>'
        )
    return f'<div class="cgg-details-html" style="{theme.FONT}">{body}</div>'


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
