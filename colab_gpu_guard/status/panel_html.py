"""The widget panel's sections as HTML fragments, each a view of one `GpuStatus`: header,
per-device memory bar, no-GPU notice, notes, leftovers, footer, and an action's message.
The per-cell history chart is in `chart`. Pure functions: no widget, no query.

Everything shown that this module did not write itself - variable names, process names, GPU
names, error texts - is HTML-escaped.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Optional

from ..leftovers.html import leftovers_table
from ..nvml import INCLUDES_RESERVED, V1
from ..units import USER_VARIABLE, format_bytes
from .html import escape as _e
from .text import (
    KERNEL_AMONG,
    KERNEL_UNLISTED,
    host_ram,
    kernel_not_identified,
    kernel_not_listed,
    lost_banner,
)

if TYPE_CHECKING:
    from ..leftovers.records import Leftover
    from ..nvml import NvmlDevice
    from .snapshot import GpuStatus

TOP_LEFTOVERS = 10  # the leftovers the panel lists

# The segments of a device's memory bar: key -> (label, colour).
SEGMENTS = {
    "tensors": ("this kernel's tensors (allocated)", "#1f77b4"),
    "cache": ("this kernel's allocator cache (reserved - allocated)", "#9ecae1"),
    "context": ("CUDA context + other libraries in this process", "#9467bd"),
    "kernel": ("this kernel (NVML; no allocator figures)", "#6a51a3"),
    "others": ("other processes", "#ff7f0e"),
    "others+context": ("other processes + this kernel's CUDA context", "#ff7f0e"),
    # with NVML's v1 memory call "used" includes what the driver reserves
    "others+driver": (f"other processes ({INCLUDES_RESERVED})", "#ff7f0e"),
    "others+context+driver": (
        f"other processes + this kernel's CUDA context ({INCLUDES_RESERVED})",
        "#ff7f0e",
    ),
    "driver": ("reserved by the driver", "#7f7f7f"),
    "free": ("free", "#e5f5e0"),
}

BADGES = {
    "ok": ("CUDA context ok", "#2ca02c"),
    "not initialised": ("CUDA not initialised", "#7f7f7f"),
    "no torch": ("torch not imported", "#7f7f7f"),
    "broken": ("CUDA context broken: restart the runtime", "#d62728"),
    "busy": ("GPU busy: queued CUDA work still running", "#e6a100"),
    "forked": ("forked process: CUDA cannot be used here", "#7f7f7f"),
}

_FONT = "font-family:var(--jp-ui-font-family,sans-serif);font-size:13px;line-height:1.4"
_MUTED = "opacity:.7"
_WARN = "color:#b00020"

# The host RAM figures as the no-GPU notice and the footer word them.
_NO_GPU_RAM = "host RAM {available} available of {total}; this kernel uses {rss}"
_FOOTER_RAM = "host RAM {available} free of {total}, this kernel {rss}"


def render_header(status: GpuStatus) -> str:
    """GPU model(s), driver, CUDA driver, torch + CUDA runtime, Colab yes/no, context badge."""
    view, torch = status.nvml, status.torch
    if view.available and view.devices:
        names: dict[str, int] = {}
        for device in view.devices:
            name = device.name or "GPU (name n/a)"
            names[name] = names.get(name, 0) + 1
        gpus = ", ".join(
            f"{count} x {name}" if count > 1 else name for name, count in names.items()
        )
    elif view.available:
        gpus = "no GPU visible to NVML"
    else:
        gpus = "no GPU"
    driver = view.driver_version if view.available else None
    cuda_driver = view.cuda_driver_version if view.available else None
    if torch.version is None:
        torch_text = "torch not imported"
    elif torch.cuda_runtime:
        torch_text = f"torch {torch.version} (CUDA runtime {torch.cuda_runtime})"
    else:
        torch_text = f"torch {torch.version} (CPU-only build)"
    colab = "yes" if status.host.runtime == "Colab" else "no"
    runtime = "" if status.host.runtime in ("Colab", "local") else f" ({status.host.runtime})"
    label, colour = BADGES.get(torch.health, (f"CUDA context: {torch.health}", "#7f7f7f"))
    detail = f' title="{_e(torch.health_detail)}"' if torch.health_detail else ""
    badge = (
        f'<span class="cgg-badge cgg-health-{_e(torch.health.replace(" ", "-"))}"{detail} '
        f'style="background:{colour};color:#fff;border-radius:3px;padding:0 6px">'
        f"{_e(label)}</span>"
    )
    return (
        f'<div class="cgg-header-html" style="{_FONT}">'
        f"<b>GPU guard</b> &middot; <b>{_e(gpus)}</b> {badge}<br>"
        f"driver {_e(driver or 'n/a')} &middot; CUDA driver {_e(cuda_driver or 'n/a')} "
        f"&middot; {_e(torch_text)} &middot; Colab: {colab}{_e(runtime)}</div>"
    )


def device_segments(status: GpuStatus, device: NvmlDevice) -> list[tuple[str, int]]:
    """The memory bar of one NVML device as (segment key, bytes), in drawing order.

    tensors = allocated and cache = reserved - allocated come from this kernel's caching
    allocator (CUDA devices of this kernel on that GPU); context = what NVML charges to this
    process beyond the allocator's reserved bytes; others = NVML's used bytes not charged to
    this process; driver = what the driver sets aside (NVML v2 memory call; with v1 it is
    inside NVML's used, and the others segment says so); free = NVML. This kernel's NVML
    figure is its entry matched by PID, or by memory in a container (`gpu_status`).
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
        if nvml_mine is not None:
            segments.append(("others" + v1, max(0, used - nvml_mine)))
        elif mine:
            segments.append(("others+context" + v1, max(0, used - reserved)))
        else:
            segments.append(("others" + v1, used))
    if device.memory_reserved:
        segments.append(("driver", device.memory_reserved))
    if device.memory_free is not None:
        segments.append(("free", device.memory_free))
    return segments


def _bar(segments: list[tuple[str, int]], total: Optional[int]) -> str:
    whole = total if total else sum(size for _, size in segments)
    if not whole:
        return ""
    cells = []
    legend = []
    for key, size in segments:
        label, colour = SEGMENTS[key]
        share = 100.0 * size / whole
        tip = f"{label}: {format_bytes(size)} ({share:.1f}%)"
        if size > 0:
            cells.append(
                f'<div class="cgg-seg cgg-seg-{key}" title="{_e(tip)}" '
                f'style="width:{share:.3f}%;background:{colour};height:100%"></div>'
            )
        legend.append(
            f'<span class="cgg-legend-{key}" style="white-space:nowrap;margin-right:10px">'
            f'<span style="display:inline-block;width:9px;height:9px;background:{colour};'
            f'border:1px solid #999;margin-right:3px"></span>{_e(label)} '
            f"<b>{_e(format_bytes(size))}</b></span> "
        )
    return (
        '<div class="cgg-bar" style="display:flex;width:100%;max-width:640px;height:16px;'
        'border:1px solid #999;border-radius:2px;overflow:hidden;margin:3px 0">'
        + "".join(cells)
        + f'</div><div class="cgg-legend" style="font-size:12px">{"".join(legend)}</div>'
    )


def _measure(value: Any, unit: str) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.0f}{unit}"
    return f"{value}{unit}"


def render_device(status: GpuStatus, device: NvmlDevice) -> str:
    """One GPU: title, stacked memory bar with labels, load / temperature / power, and the
    other processes using it."""
    cuda = ", ".join(f"cuda:{m.device}" for m in status.memory_for(device.index))
    title = f"GPU {device.index}: {device.name or 'name n/a'}" + (f" ({cuda})" if cuda else "")
    parts = [f'<div class="cgg-device" style="{_FONT};margin-bottom:6px">']
    if device.lost:  # the banner, not a bar and a line of n/a
        return "".join(parts) + _banner(lost_banner(status, device)) + f"<b>{_e(title)}</b></div>"
    parts.append(f"<b>{_e(title)}</b>")
    if device.memory_total is not None:
        parts.append(
            f" &middot; {_e(format_bytes(device.memory_used))} used of "
            f"{_e(format_bytes(device.memory_total))}"
        )
    parts.append(_bar(device_segments(status, device), device.memory_total))
    if device.memory_total is None:
        why = device.reason("memory_total") or "not reported"
        parts.append(f'<div style="{_MUTED}">memory n/a ({_e(why)})</div>')
    power = _measure(device.power_draw_w, " W")
    if device.power_limit_w is not None:
        power += f" / {_measure(device.power_limit_w, ' W')}"
    parts.append(
        f'<div class="cgg-load">utilisation {_e(_measure(device.utilization_gpu, "%"))} '
        f"&middot; memory bus {_e(_measure(device.utilization_memory, '%'))} &middot; "
        f"temperature {_e(_measure(device.temperature_c, ' °C'))} &middot; "
        f"power {_e(power)}</div>"
    )
    others = device.other_processes()
    among = kernel_not_identified(status, device)
    if others:
        shown = sorted(others, key=lambda p: -(p.used_memory or 0))[:5]
        items = ", ".join(
            f"{_e(p.name or '(name n/a)')} (PID {int(p.pid)}, {_e(format_bytes(p.used_memory))})"
            for p in shown
        )
        more = f" and {len(others) - len(shown)} more" if len(others) > len(shown) else ""
        heading = f"processes ({_e(KERNEL_AMONG)})" if among else "other processes"
        parts.append(f'<div class="cgg-processes">{heading}: {items}{more}</div>')
    elif kernel_not_listed(status, device):
        parts.append(f'<div style="{_MUTED}">processes: none ({_e(KERNEL_UNLISTED)})</div>')
    elif device.processes is None and status.nvml.processes_queried:
        why = device.reason("processes") or "not listed"
        parts.append(f'<div style="{_MUTED}">processes n/a ({_e(why)})</div>')
    parts.append("</div>")
    return "".join(parts)


def _banner(text: str) -> str:
    return (
        f'<div class="cgg-banner" style="border:2px solid #b00020;border-radius:3px;'
        f'padding:4px 8px;margin:4px 0;{_WARN};font-weight:600">{_e(text)}</div>'
    )


def render_no_gpu(status: GpuStatus) -> str:
    """Why there is no GPU (NVML's message), and the host RAM."""
    view = status.nvml
    if view.lost_at_start:
        return f'<div class="cgg-no-gpu" style="{_FONT}">{_banner(lost_banner(status, None))}</div>'
    if not view.available:
        why = f"No GPU: {view.error or 'NVML is not available'}"
    else:
        why = "No GPU: NVML works but lists no GPU"
    ram = host_ram(status.host, _NO_GPU_RAM)
    return (
        f'<div class="cgg-no-gpu" style="{_FONT}"><b>{_e(why)}</b><br>{_e(ram)}<br>'
        f'<span style="{_MUTED}">Leftovers below are CPU arrays; '
        "&quot;Free memory&quot; still releases what the notebook holds.</span></div>"
    )


def render_notes(status: GpuStatus) -> str:
    if not status.notes:
        return ""
    items = "".join(f"<li>{_e(note)}</li>" for note in status.notes)
    return f'<ul class="cgg-notes" style="{_FONT};{_WARN};margin:2px 0">{items}</ul>'


def _freeable(entry: Leftover) -> bool:
    """Held only by output history / traceback frames / the last exception: what
    ``gpu_reset()`` (without ``--all``) releases. User variables are never touched."""
    return (entry.holder or "") != USER_VARIABLE


def render_leftovers(status: GpuStatus, top: int = TOP_LEFTOVERS) -> str:
    """The `top` biggest leftover arrays, and what `%gpu_reset` would free."""
    head = f'<div class="cgg-leftovers-html" style="{_FONT}">'
    if status.leftovers is None:
        note = status.leftovers_note or "not collected"
        return f"{head}<b>Leftovers</b>: {_e(note)}</div>"
    entries = list(status.leftovers)
    freeable = getattr(status, "leftovers_freeable_bytes", None)
    if freeable is None:  # a snapshot without the total: from the entries it holds
        freeable = 0
        seen: set[Any] = set()
        for entry in entries:
            key = entry.storage_id if entry.storage_id is not None else ("name", entry.name)
            if key not in seen and _freeable(entry):
                seen.add(key)
                freeable += entry.nbytes
    count = status.leftovers_count
    title = (
        f"<b>Leftovers</b>: {count} array{'s' if count != 1 else ''}, "
        f"{_e(format_bytes(status.leftovers_bytes))} in all"
    )
    if count > top:
        title += f" (the {top} biggest shown)"
    stale = ""
    if status.leftovers_note:  # leftovers carried over from an earlier, slow scan
        stale = f'<div class="cgg-stale" style="{_MUTED}">{_e(status.leftovers_note)}</div>'
    if not entries:
        return f"{head}{title} &middot; nothing held between runs{stale}</div>"
    table = leftovers_table(entries[:top])
    reset_line = (
        f'<div class="cgg-freeable">held by output history / tracebacks: '
        f"<b>{_e(format_bytes(freeable))}</b>"
        + (" &middot; &quot;Free memory&quot; (%gpu_reset) releases it" if freeable else "")
        + "</div>"
    )
    return f"{head}{title}{table}{reset_line}{stale}</div>"


def render_footer(status: GpuStatus) -> str:
    ram = host_ram(status.host, _FOOTER_RAM)
    when = time.strftime("%H:%M:%S", time.localtime(status.taken_at))
    return (
        f'<div class="cgg-footer-html" style="{_FONT};font-size:11px;{_MUTED}">{_e(ram)} '
        f"&middot; refreshed {when} ({status.duration_ms:.0f} ms)</div>"
    )


def render_message(kind: str, text: str, details: str = "") -> str:
    """An action's outcome: kind is 'ok', 'error' or 'info'."""
    style = {"ok": "color:#1b5e20", "error": _WARN, "info": _MUTED}.get(kind, "")
    body = f'<span class="cgg-msg-{_e(kind)}" style="{style}">{_e(text)}</span>'
    if details:
        body += (
            '<details><summary style="cursor:pointer">details</summary>'
            f'<pre style="white-space:pre-wrap;margin:0">{_e(details)}</pre></details>'
        )
    return f'<div style="{_FONT}">{body}</div>'


def release_summary(report: Any) -> str:
    """One line for a `ReleaseReport`: what was dropped, freed, and is still held."""
    dropped = getattr(report, "dropped", None)
    if not isinstance(dropped, dict):
        lines = [line.strip() for line in str(report).splitlines() if line.strip()]
        return lines[0] if lines else "gpu_reset done"
    counts = ", ".join(f"{count} {kind}" for kind, count in dropped.items() if count)
    parts = [f"gpu_reset: dropped {counts or 'nothing'}"]
    freed = getattr(report, "freed_bytes", None)
    if freed is not None:
        parts.append(f"freed {format_bytes(freed)}")
    held = list(getattr(report, "leftovers", None) or ())
    if held:
        total = sum(int(getattr(item, "nbytes", 0) or 0) for item in held)
        parts.append(f"still held: {len(held)} block(s), {format_bytes(total)}")
    else:
        parts.append("no arrays held by any name")
    if getattr(report, "restart_required", False):
        parts.append("the CUDA context is broken: restart the runtime")
    parts += [f"WARNING: {warning}" for warning in getattr(report, "warnings", None) or ()]
    return "; ".join(parts)
