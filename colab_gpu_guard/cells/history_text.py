"""The per-cell memory history as text: `format_history` (what %gpu_history prints), a
flagged rerun in words (`leak_text`) and what holds its earlier objects (`held_by_text`),
as every view says them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..units import (
    OUTPUT_HISTORY,
    counted,
    escape_lines,
    escape_text,
    format_bytes,
    signed_bytes,
)
from .rerun_holders import (
    CACHE,
    CYCLE,
    EXCEPTIONS,
    GRAPHS,
    IN_CYCLE,
    LAST_ERROR,
    OUTPUT,
    TRACEBACK,
    Holder,
)

if TYPE_CHECKING:
    from .cell_memory import CellMemory

PEAK_BOUND_NOTE = (
    "peak '<= X': the cell stayed below an earlier peak ('>= X': it reset torch's peak "
    "itself), so only a bound is known; %gpu_history --reset-peaks on gives exact per-cell "
    "peaks (it resets torch's peak counters before every cell)"
)


# what a `CYCLE` holder is, and what frees it
CYCLES = (
    "unreachable reference cycles, not yet collected: %gpu_reset or Python's garbage "
    "collector frees them"
)
# what to do with a container that grew on a rerun by plain items: it may be kept on purpose
# (a list of checkpoints), so the fix is said for the other case
START_AFRESH = "if each run should start afresh, empty it at the top of the cell"
# the end of a LEAK line whose holders hold less than half of what it kept
UNEXPLAINED = "; the rest by something else: find_leftovers() lists what is alive"


def holder_words(holder: Holder, share: str = "") -> str:
    """A holder as a LEAK line names it: "`losses` (grew by 1 autograd graph, 16 MiB
    saved; fix: ...)", "`Out[7]` (output history: %gpu_reset releases it)", "<traceback:
    f() local 'x'> (the last error's traceback: %gpu_reset releases it)"; `share` ("1 MiB
    of it") goes after what it is, before what to do."""
    name, what, then = _holder_parts(holder, small_share=bool(share))
    return f"{name} ({what}{f'; {share}' if share else ''}{then})"


def _holder_parts(holder: Holder, small_share: bool = False) -> tuple[str, str, str]:
    """A holder's name, what it is, and what to do with its separator ("" for none);
    `small_share`: it holds less than half of what the rerun kept."""
    if holder.kind == OUTPUT:
        return f"`{holder.name}`", OUTPUT_HISTORY, ": %gpu_reset releases it"
    if holder.kind == TRACEBACK:
        return ", ".join(holder.locals), _why_alive(holder), ""
    if holder.kind == CYCLE:
        return (
            f"the previous run's `{holder.name}`",
            f"{holder.what}: {CYCLES}",
            "",
        )
    from ..leftovers.graphs import FIX as GRAPH_FIX  # not at %load_ext: only when worded

    growth = holder.growth  # a VARIABLE's
    assert growth is not None
    graph_text = counted(growth.graphs, "autograd graph")
    kept = growth.earlier_nbytes
    if kept is not None and growth.earlier_graphs:
        # what holds the previous run's objects, as every report counts those graphs (the
        # leftovers scan's own figure for them, then and later); this run's graphs may
        # count less now, while a name (`batch`) still reaches what they saved
        older = growth.earlier_graphs
        which = "graph keeps" if older == 1 else f"{older} graphs keep"
        graph_text += f"; the previous run's {which} {format_bytes(kept)}"
    elif growth.graph_nbytes is not None:
        graph_text += f", {format_bytes(growth.graph_nbytes)} saved"
    name = f"`{holder.name}`"
    if holder.kind == CACHE:  # a functools cache: named by its function
        what = f"its functools cache grew by {counted(growth.count, 'result')}"
        if growth.graphs:
            what += f", {graph_text}"
        return name, what, f"; `{holder.name}.cache_clear()` releases them"
    if growth.items == GRAPHS:
        return name, f"grew by {graph_text}", f"; {GRAPH_FIX}"
    if growth.items == EXCEPTIONS:
        holds = f": {', '.join(growth.locals)}" if growth.locals else ""
        return name, f"grew by {counted(growth.count, 'exception')}{holds}", ""
    if growth.graphs:
        return name, f"grew by {counted(growth.count, 'item')}, {graph_text}", f"; {GRAPH_FIX}"
    # emptying a holder of a small share frees little of what was kept: no fix said
    return (
        name,
        f"grew by {counted(growth.count, 'item')}",
        "" if small_share else f"; {START_AFRESH}",
    )


def _why_alive(holder: Holder) -> str:
    """Why a failed run's error, whose traceback holds memory, is still alive."""
    if holder.alive == LAST_ERROR:
        return "the last error's traceback: %gpu_reset releases it"
    where = f"run [{holder.cell}]'s error"
    if holder.alive == IN_CYCLE:
        return (
            f"{where}, in a reference cycle with IPython's record of the run: freed "
            "when the garbage collector runs, or by %gpu_reset"
        )
    return f"{where}, still alive"


def held_by_text(holders: tuple[Holder, ...], explained: bool, kept: tuple) -> str:
    """What a LEAK line says holds a rerun's earlier objects (`CellMemory.held_by`): its
    `holders`' words; where they hold less than half of what it `kept` ((device, bytes),
    ...), each with the bytes it holds and "the rest by something else"; "" for none."""
    if explained or not holders:
        return ", ".join(holder_words(holder) for holder in holders)
    texts = [
        holder_words(holder, f"{format_bytes(holder.share(kept))} of it") for holder in holders
    ]
    return ", ".join(texts) + UNEXPLAINED


def leak_text(record: CellMemory) -> str:
    """A flagged rerun in words, as every view says it: "LEAK: rerun of [3] kept +80 MiB on
    cpu again; held by `losses` (grew by 1 item; if each run ...)"; "" for a record not
    flagged."""
    if not record.rerun_leak:
        return ""
    per_device = record.leaks or ((record.leak_kind, record.leak_bytes),)
    kept = ", ".join(f"{signed_bytes(amount)} on {device}" for device, amount in per_device)
    text = f"LEAK: rerun of [{record.rerun_of}] kept {kept} again"
    # the holders' names are the notebook's (or a JSON file's): escaped for every text view
    return escape_text(text + (f"; held by {record.held_by}" if record.held_by else ""))


def _nvml_header(history: list[CellMemory]) -> str:
    from ..nvml import INCLUDES_RESERVED, V1

    if any(record.nvml_used_call == V1 for record in history):
        return f"NVML used ({INCLUDES_RESERVED})"
    return "NVML used"


def format_history(history: list[CellMemory], limit: Optional[int] = None) -> str:
    """A text table of `history` (the last `limit` records if given). Columns no record
    has a figure for (torch's CUDA figures, NVML's) are left out."""
    recorded = len(history)
    if limit is not None:
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 0:
            raise ValueError("limit must be a non-negative integer")
        if limit == 0:
            return f"memory history: {counted(recorded, 'cell')} recorded; --limit 0 shows none"
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
    title = f"memory history: {counted(len(history), 'cell')}"
    if recorded > len(history):  # --limit: the last N of all the cells recorded
        title = f"memory history: the last {len(history):,} of {counted(recorded, 'cell')}"
    if not cuda:
        title += (
            " (no torch CUDA figures recorded)"
            if nvml
            else " (no GPU figures: host RSS is the whole kernel process's memory)"
        )
    if leaks:
        cells = ", ".join(f"[{record.cell}]" for record in leaks)
        title += f"; kept memory again on rerun: {cells}"
    footer = []
    if any(record.devices and record.peak_bound for record in history):
        footer.append(PEAK_BOUND_NOTE)
    return escape_lines([title, *lines, *footer])
