"""The one leftovers table renderer (HTML), for the leftovers list, gpu_reset's report, the
status snapshot and the panel. Every name in it is escaped."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..units import escape_html as _e
from ..units import format_bytes, shape_text
from .graphs import FIX

_CELL = 'style="padding:0 8px 0 0"'
_SIZE_CELL = 'style="padding:0 8px 0 0;text-align:right"'
COLUMNS = ("name", "held by", "shape", "dtype", "device", "size")


def leftovers_table(entries: Sequence[Any]) -> str:
    """A table of leftovers (a `Leftover` or the status snapshot's entries), one row each,
    biggest first as given. Names that reach the same memory are the row's tooltip, and a
    last column when any row has them."""
    shared = any(entry.shared_with for entry in entries)
    graphs = any(getattr(entry, "graph_tensors", 0) for entry in entries)
    columns = COLUMNS + (("also reached as",) if shared else ())
    columns += ("autograd graph",) if graphs else ()
    views = any(_view_text(entry) for entry in entries)
    columns += ("view of more memory",) if views else ()
    rows = [
        '<table class="cgg-leftovers-table" style="border-collapse:collapse"><tr>'
        + "".join(f'<th style="text-align:left;padding:0 8px 0 0">{h}</th>' for h in columns)
        + "</tr>"
    ]
    for entry in entries:
        also = ", ".join(entry.shared_with)
        title = f' title="also reached as: {_e(also)}"' if also else ""
        rows.append(
            f"<tr{title}><td {_CELL}><code>{_e(entry.name)}</code></td>"
            f"<td {_CELL}>{_e(entry.held_as or '')}</td>"
            f"<td {_CELL}>{_e(shape_text(entry.shape))}</td>"
            f"<td {_CELL}>{_e(entry.type_text or '')}</td>"
            f"<td {_CELL}>{_e(entry.device or '')}</td>"
            f"<td {_SIZE_CELL}>{_e(format_bytes(entry.nbytes))}</td>"
            + (f"<td {_CELL}>{_e(also)}</td>" if shared else "")
            + (_graph_cell(entry) if graphs else "")
            + (_view_cell(entry) if views else "")
            + "</tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def _view_text(entry: Any) -> str:
    view_text = getattr(entry, "view_text", None)
    return view_text() if view_text is not None else ""


def _view_cell(entry: Any) -> str:
    text = _view_text(entry)
    if not text:
        return f"<td {_CELL}></td>"
    return f'<td {_CELL} title="{_e(text)}">{_e(entry.view_summary())}</td>'


def _graph_cell(entry: Any) -> str:
    if not getattr(entry, "graph_tensors", 0):
        return f"<td {_CELL}></td>"
    return f'<td {_CELL} title="{_e(FIX)}">{_e(entry.graph().summary())}</td>'


def leftovers_html(items: Iterable, gaps: Iterable = (), notes: Iterable[str] = ()) -> str:
    """The leftovers table, then the allocator gaps and notes as a list."""
    entries = list(items)
    table = leftovers_table(entries) if entries else "<div>no arrays found</div>"
    return table + notes_html(gaps, notes)


def notes_html(gaps: Iterable = (), notes: Iterable[str] = ()) -> str:
    """The allocator gaps and notes as a list ('' when there are none)."""
    extra = "".join(f"<li>{_e(gap)}</li>" for gap in gaps)
    extra += "".join(f"<li>{_e(note)}</li>" for note in notes)
    return f"<ul>{extra}</ul>" if extra else ""


# ---------------------------------------------------------------- groups (`groups.LeftoverGroup`)

_HIDDEN_STYLE = "color:var(--jp-warn-color0,#b45309);font-weight:600"
_RESET_STYLE = "color:var(--jp-success-color0,#1b5e20)"
_MUTED_STYLE = "color:var(--jp-ui-font-color2,#616161)"


def group_html(group: Any, open_: bool = False) -> str:
    """One group as ``<details>``: its summary line, then its entries' table; a group that
    is one array itself (`LeftoverGroup.single`) as one line, that array's."""
    badges = ""
    if group.hidden:
        word = group.hidden_word
        badges += f' <span class="cgg-hidden" style="{_HIDDEN_STYLE}">{_e(word)}</span>'
    if group.reset_frees:
        badges += f' <span class="cgg-reset" style="{_RESET_STYLE}">%gpu_reset releases it</span>'
    single = group.single
    if single is not None:
        words = _entry_words(single) + (f"; {group.shares_text()}" if group.shares else "")
        return (
            f'<div class="cgg-group"><code>{_e(single.name)}</code> '
            f"<b>{_e(format_bytes(group.nbytes))}</b> "
            f'<span style="{_MUTED_STYLE}">{_e(words)}</span>{badges}</div>'
        )
    summary = (
        f'<summary style="cursor:pointer"><code>{_e(group.name)}</code> '
        f"<b>{_e(format_bytes(group.nbytes))}</b> "
        f'<span style="{_MUTED_STYLE}">{_e(group.describe())}</span>{badges}</summary>'
    )
    body = leftovers_table(group.entries) if group.entries else ""
    if group.more > 0:
        body += f'<div style="{_MUTED_STYLE}">... {group.more:,} more in {_e(group.name)}</div>'
    return f'<details class="cgg-group"{" open" if open_ else ""}>{summary}{body}</details>'


def _entry_words(entry: Any) -> str:
    """'float32 (2000, 1000) on cpu, user variable; also reached as Out[8], _' and its
    autograd graph and view notes: one array as its group's single line says it."""
    text = " ".join(part for part in (entry.type_text, shape_text(entry.shape)) if part)
    if entry.device:
        text += f" on {entry.device}"
    if entry.holder:
        text += f", {entry.held_as}"
    notes = [text, _view_text(entry)]
    if getattr(entry, "graph_tensors", 0):
        notes.insert(1, entry.graph().text())
    if entry.shared_with:
        notes.insert(1, f"also reached as {', '.join(entry.shared_with)}")
    return "; ".join(note for note in notes if note)


def advice_html(advice: str) -> str:
    """The 'to free: ...' line of a leftovers view ('' for none)."""
    return f'<div class="cgg-advice">{_e(advice)}</div>' if advice else ""


def groups_html(groups: Iterable[Any]) -> str:
    return '<div class="cgg-groups">' + "".join(map(group_html, groups)) + "</div>"
