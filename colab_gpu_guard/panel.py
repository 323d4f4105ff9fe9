"""The panel's HTML fragments: pure functions from one `GpuStatus` snapshot to the HTML of
each section (header, notes, a memory bar per device, leftovers, per-cell history, footer,
messages). The widget that shows them is `colab_gpu_guard.ipython.panel`.

Everything shown that this module did not write itself - variable names, process names, GPU
names, error texts - is HTML-escaped.
"""

from __future__ import annotations

import html
import time
from typing import Any, Optional

from .units import USER_VARIABLE, format_bytes

TOP_LEFTOVERS = 10
HISTORY_CELLS = 30

# The segments of a device's memory bar: key -> (label, colour).
SEGMENTS = {
    "tensors": ("this kernel's tensors (allocated)", "#1f77b4"),
    "cache": ("this kernel's allocator cache (reserved - allocated)", "#9ecae1"),
    "context": ("CUDA context + other libraries in this process", "#9467bd"),
    "kernel": ("this kernel (NVML; no allocator figures)", "#6a51a3"),
    "others": ("other processes", "#ff7f0e"),
    "others+context": ("other processes + this kernel's CUDA context", "#ff7f0e"),
    "driver": ("reserved by the driver", "#7f7f7f"),
    "free": ("free", "#e5f5e0"),
}

BADGES = {
    "ok": ("CUDA context ok", "#2ca02c"),
    "not initialised": ("CUDA not initialised", "#7f7f7f"),
    "no torch": ("torch not imported", "#7f7f7f"),
    "broken": ("CUDA context broken: restart the runtime", "#d62728"),
}

_FONT = "font-family:var(--jp-ui-font-family,sans-serif);font-size:13px;line-height:1.4"
_MUTED = "opacity:.7"
_WARN = "color:#b00020"


def _e(value: Any) -> str:
    """Escape text for HTML (element content and quoted attributes)."""
    return html.escape(str(value), quote=True)


# ---------------------------------------------------------------- rendering (pure functions)


def render_header(status: Any) -> str:
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


def device_segments(status: Any, device: Any) -> list[tuple[str, int]]:
    """The memory bar of one NVML device as (segment key, bytes), in drawing order.

    tensors = allocated and cache = reserved - allocated come from this kernel's caching
    allocator (CUDA devices of this kernel on that GPU); context = what NVML charges to this
    process beyond the allocator's reserved bytes; others = NVML's used bytes not charged to
    this process; driver = what the driver sets aside (NVML v2 memory call); free = NVML.
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
        if nvml_mine is not None:
            segments.append(("others", max(0, used - nvml_mine)))
        elif mine:
            segments.append(("others+context", max(0, used - reserved)))
        else:
            segments.append(("others", used))
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


def render_device(status: Any, device: Any) -> str:
    """One GPU: title, stacked memory bar with labels, load / temperature / power, and the
    other processes using it."""
    cuda = ", ".join(f"cuda:{m.device}" for m in status.memory_for(device.index))
    title = f"GPU {device.index}: {device.name or 'name n/a'}" + (f" ({cuda})" if cuda else "")
    parts = [f'<div class="cgg-device" style="{_FONT};margin-bottom:6px"><b>{_e(title)}</b>']
    if device.lost:
        parts.append(f' <span style="{_WARN}">GPU is lost (fell off the bus)</span>')
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
    if others:
        shown = sorted(others, key=lambda p: -(p.used_memory or 0))[:5]
        items = ", ".join(
            f"{_e(p.name or '(name n/a)')} (PID {int(p.pid)}, {_e(format_bytes(p.used_memory))})"
            for p in shown
        )
        more = f" and {len(others) - len(shown)} more" if len(others) > len(shown) else ""
        parts.append(f'<div class="cgg-processes">other processes: {items}{more}</div>')
    elif device.processes is None and status.nvml.processes_queried:
        why = device.reason("processes") or "not listed"
        parts.append(f'<div style="{_MUTED}">processes n/a ({_e(why)})</div>')
    parts.append("</div>")
    return "".join(parts)


def render_no_gpu(status: Any) -> str:
    """Why there is no GPU (NVML's message), and the host RAM."""
    view = status.nvml
    if not view.available:
        why = f"No GPU: {view.error or 'NVML is not available'}"
    else:
        why = "No GPU: NVML works but lists no GPU"
    host = status.host
    if host.note:
        ram = host.note
    else:
        ram = (
            f"host RAM {format_bytes(host.ram_available)} available of "
            f"{format_bytes(host.ram_total)}; this kernel uses {format_bytes(host.process_rss)}"
        )
    return (
        f'<div class="cgg-no-gpu" style="{_FONT}"><b>{_e(why)}</b><br>{_e(ram)}<br>'
        f'<span style="{_MUTED}">Leftovers below are CPU arrays; '
        "&quot;Free memory&quot; still releases what the notebook holds.</span></div>"
    )


def render_notes(status: Any) -> str:
    if not status.notes:
        return ""
    items = "".join(f"<li>{_e(note)}</li>" for note in status.notes)
    return f'<ul class="cgg-notes" style="{_FONT};{_WARN};margin:2px 0">{items}</ul>'


def _freeable(entry: Any) -> bool:
    """Held only by output history / traceback frames / the last exception: what
    ``gpu_reset()`` (without ``--all``) releases. User variables are never touched."""
    return (entry.holder or "") != USER_VARIABLE


def render_leftovers(status: Any, top: int = TOP_LEFTOVERS) -> str:
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
    rows = [
        '<table style="border-collapse:collapse"><tr>'
        + "".join(
            f'<th style="text-align:left;padding:0 8px 0 0">{h}</th>'
            for h in ("name", "held by", "shape", "dtype", "device", "size")
        )
        + "</tr>"
    ]
    for entry in entries[:top]:
        shape = "" if entry.shape is None else "(" + ", ".join(str(n) for n in entry.shape) + ")"
        shared = (
            f' title="also reached as: {_e(", ".join(entry.shared_with))}"'
            if (entry.shared_with)
            else ""
        )
        rows.append(
            f'<tr{shared}><td style="padding:0 8px 0 0"><code>{_e(entry.name)}</code></td>'
            f'<td style="padding:0 8px 0 0">{_e(entry.holder or "")}</td>'
            f'<td style="padding:0 8px 0 0">{_e(shape)}</td>'
            f'<td style="padding:0 8px 0 0">{_e(entry.dtype or "")}</td>'
            f'<td style="padding:0 8px 0 0">{_e(entry.device or "")}</td>'
            f'<td style="padding:0 8px 0 0;text-align:right">{_e(format_bytes(entry.nbytes))}</td>'
            "</tr>"
        )
    rows.append("</table>")
    reset_line = (
        f'<div class="cgg-freeable">held by output history / tracebacks: '
        f"<b>{_e(format_bytes(freeable))}</b>"
        + (" &middot; &quot;Free memory&quot; (%gpu_reset) releases it" if freeable else "")
        + "</div>"
    )
    return f"{head}{title}{''.join(rows)}{reset_line}{stale}</div>"


def _history_values(
    status: Any, records: list[Any]
) -> tuple[str, list[Optional[int]], list[Optional[int]]]:
    """What to chart: torch's allocated bytes once CUDA is in use, else NVML's used bytes
    when recorded, else nothing (the tracker records 0 allocated without CUDA)."""
    allocated = [r.allocated_after for r in records]
    cuda = bool(getattr(status.torch, "cuda_initialized", False))
    if any(value for value in allocated) or (cuda and any(v is not None for v in allocated)):
        return "allocated", allocated, [r.peak for r in records]
    used = [r.nvml_used_after for r in records]
    if any(value is not None for value in used):
        return "NVML used", used, [None] * len(records)
    return "", [], []


def render_history(status: Any, width: int = 560, height: int = 120) -> str:
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
        if peak is not None:
            tip += f", peak {format_bytes(peak)}"
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


def render_footer(status: Any) -> str:
    host = status.host
    if host.note:
        ram = host.note
    else:
        ram = (
            f"host RAM {format_bytes(host.ram_available)} free of {format_bytes(host.ram_total)}, "
            f"this kernel {format_bytes(host.process_rss)}"
        )
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
