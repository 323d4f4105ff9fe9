"""The per-cell memory history as text: `format_history` (what %gpu_history prints) and a
flagged rerun in words (`leak_text`), as every view says them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..units import format_bytes, signed_bytes

if TYPE_CHECKING:
    from .tracker import CellMemory

PEAK_BOUND_NOTE = (
    "peak '<= X': the cell stayed below an earlier peak ('>= X': it reset torch's peak "
    "itself), so only a bound is known; %gpu_history --reset-peaks on gives exact per-cell "
    "peaks (it resets torch's peak counters before every cell)"
)


def leak_text(record: CellMemory) -> str:
    """A flagged rerun in words, as every view says it: "LEAK: kept +80 MiB cpu again (run
    before: [3]); held by `losses` (grew by 1 item)"; "" for a record not flagged."""
    if not record.rerun_leak:
        return ""
    per_device = record.leaks or ((record.leak_kind, record.leak_bytes),)
    kept = ", ".join(f"{signed_bytes(amount)} {device}" for device, amount in per_device)
    text = f"LEAK: kept {kept} again (run before: [{record.rerun_of}])"
    return text + (f"; held by {record.held_by}" if record.held_by else "")


def _nvml_header(history: list[CellMemory]) -> str:
    from ..nvml import INCLUDES_RESERVED, V1

    if any(record.nvml_used_call == V1 for record in history):
        return f"NVML used ({INCLUDES_RESERVED})"
    return "NVML used"


def format_history(history: list[CellMemory], limit: Optional[int] = None) -> str:
    """A text table of `history` (the last `limit` records if given). Columns no record
    has a figure for (torch's CUDA figures, NVML's) are left out."""
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError("limit must be a non-negative integer")
        if limit == 0:
            return f"memory history: {len(history)} cell(s) recorded; --limit 0 shows none"
        history = history[-limit:]
    if not history:
        return "memory history: no cells recorded yet"
    cuda = any(record.devices for record in history)
    header = ["cell", "time"]
    if cuda:
        header += ["allocated before", "after", "change", "peak", "reserved", "OOMs"]
    nvml = any(record.nvml_used_after is not None for record in history)
    header += [_nvml_header(history)] if nvml else []
    header += ["host RSS", "rerun"]
    rows = []
    for record in history:
        row = [
            f"[{record.cell}]" if record.cell is not None else "[-]",
            f"{record.duration_s:.3f} s",
        ]
        if cuda:
            if record.devices:
                row += [
                    format_bytes(record.allocated_before),
                    format_bytes(record.allocated_after),
                    signed_bytes(record.delta),
                    record.peak_text,
                    format_bytes(record.reserved_after),
                    str(record.ooms) if not record.ooms else f"{record.ooms} OOM!",
                ]
            else:
                row += ["-", "-", "-", "-", "-", "-"]
        if nvml:
            used = record.nvml_used_after
            row.append(format_bytes(used) if used is not None else "-")
        row.append(format_bytes(record.rss_after) if record.rss_after is not None else "-")
        if record.rerun_leak:
            row.append(leak_text(record))
        elif record.rerun_of is not None:
            row.append(f"rerun of [{record.rerun_of}]")
        else:
            row.append("")
        rows.append(row)
    widths = [max(len(header[i]), *(len(row[i]) for row in rows)) for i in range(len(header))]
    lines = ["  ".join(text.ljust(width) for text, width in zip(header, widths)).rstrip()]
    lines += [
        "  ".join(text.ljust(width) for text, width in zip(row, widths)).rstrip() for row in rows
    ]
    leaks = [record for record in history if record.rerun_leak]
    title = f"memory history: {len(history)} cell(s)"
    if not cuda:
        title += (
            " (no torch CUDA figures recorded)" if nvml else " (no GPU figures: host memory only)"
        )
    if leaks:
        cells = ", ".join(f"[{record.cell}]" for record in leaks)
        title += f"; kept memory again on rerun: {cells}"
    footer = []
    if any(record.devices and record.peak_bound for record in history):
        footer.append(PEAK_BOUND_NOTE)
    return "\n".join([title, *lines, *footer])
