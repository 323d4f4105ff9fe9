"""The panel's Leftovers section as HTML fragments, each a view of one `GpuStatus`: the
totals, a line per holder group that opens to its arrays, and the lines under them. The
live panel gives each group its own widgets (``ipython/panel/groups.py``); the views
outside it use ``<details>`` (``leftovers/html.py``). Pure functions; all text not
written here is escaped, colours come from `theme`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..units import USER_VARIABLE, counted, format_bytes, shape_text
from ..units import escape_html as _e
from . import theme

if TYPE_CHECKING:
    from ..leftovers.groups import LeftoverGroup
    from ..leftovers.records import Leftover
    from .snapshot import GpuStatus

TOP_LEFTOVERS = 10  # the leftovers (or holder groups) the panel lists

# A group's toggle is a core ToggleButton: drawn as a plain disclosure line (no button
# face), its name in the code font, ellipsised (the full name is its tooltip).
GROUPS_STYLE = (
    "<style>.cgg-panel .cgg-group-row button.cgg-group-toggle{background:transparent;"
    "box-shadow:none;color:inherit;text-align:left;line-height:22px;padding:0 4px 0 0;"
    "font-family:var(--jp-code-font-family,var(--vscode-editor-font-family,monospace));"
    "font-size:12px}.cgg-panel .cgg-group-row button.cgg-group-toggle:hover{"
    "text-decoration:underline}</style>"
)
# what a group is, its marks and its size: on one line where they fit, else wrapped (the
# size never cut)
_LINE = "display:flex;flex-wrap:wrap;column-gap:8px;align-items:baseline;min-width:0"


def shown_groups(status: GpuStatus, top: int = TOP_LEFTOVERS) -> tuple[LeftoverGroup, ...]:
    """The holder groups the panel lists: the snapshot's first `top`, one per name."""
    if status.leftovers is None or not status.leftovers:
        return ()
    unique: dict[str, LeftoverGroup] = {}
    for group in status.leftover_groups or ():
        unique.setdefault(group.name, group)
    return tuple(unique.values())[:top]


def render_leftovers_head(status: GpuStatus, top: int = TOP_LEFTOVERS) -> str:
    """The totals over the groups ('13 arrays, 57.1 MiB in all'); without groups (a
    snapshot that has only the arrays) the biggest `top` arrays as a table under it."""
    head = (
        f'{GROUPS_STYLE}<div class="cgg-leftovers-html" style="{theme.FONT}">'
        '<div class="cgg-section-heading" style="font-weight:600">Leftovers: what the '
        "notebook holds between cells</div>"
    )
    if status.leftovers is None:
        return f"{head}{_e(status.leftovers_note or 'not collected')}</div>"
    entries = list(status.leftovers)
    count = status.leftovers_count
    title = f"{counted(count, 'array')}, {_e(format_bytes(status.leftovers_bytes))} in all"
    if not entries:
        return f"{head}{title} · nothing held between cells</div>"
    if status.leftover_groups:
        return f"{head}{title}</div>"
    more = f" (the {top} biggest shown)" if count > top else ""
    return f"{head}{title}{more}{entries_table(entries[:top])}</div>"


def render_leftovers_foot(status: GpuStatus, top: int = TOP_LEFTOVERS) -> str:
    """Under the groups: how many holders are not listed and what they hold, what Free
    memory releases, and how old the figures are when a slow scan was not repeated."""
    if status.leftovers is None:
        return ""
    lines = []
    entries = list(status.leftovers)
    groups = shown_groups(status, top)
    unlisted = max(status.leftover_groups_count, len(groups)) - len(groups) if groups else 0
    if unlisted > 0:
        rest = status.leftovers_bytes - sum(group.nbytes for group in groups)
        lines.append(
            f'<div class="cgg-more-groups" style="{theme.MUTED}">... and '
            f"{counted(unlisted, 'more holder')}, {_e(format_bytes(max(0, rest)))} (the "
            f"{len(groups)} biggest listed)</div>"
        )
    if entries:
        freeable = status.leftovers_freeable_bytes
        if freeable is None:
            freeable = sum(e.nbytes for e in entries if (e.holder or "") != USER_VARIABLE)
        lines.append(
            f'<div class="cgg-freeable">held by output history / tracebacks: '
            f"<b>{_e(format_bytes(freeable))}</b>"
            + (" · Free memory (%gpu_reset) releases it" if freeable else "")
            + "</div>"
        )
    if status.leftovers_note:  # carried over from an earlier, slow scan
        lines.append(
            f'<div class="cgg-stale" style="{theme.MUTED}">{_e(status.leftovers_note)}</div>'
        )
    if not lines:
        return ""
    return f'<div class="cgg-leftovers-foot" style="{theme.FONT}">{"".join(lines)}</div>'


def render_group_line(group: LeftoverGroup) -> str:
    """What a group is, beside its toggle: 'Sequential: 8 arrays on cpu', hidden or
    released by Free marked, and its size."""
    mark = ""
    if group.reset_frees:
        mark = theme.label("warn", "Free releases it", "cgg-released")
    elif group.hidden:
        mark = theme.label("warn", group.hidden_word, "cgg-hidden")
    what = _e(group.describe())
    return (
        f'<div class="cgg-group-line" style="{theme.FONT};{_LINE}">'
        f'<span class="cgg-group-what" title="{what}" style="{theme.MUTED};'
        f'flex:1 1 120px;min-width:0;overflow-wrap:anywhere">{what}</span>{mark}'
        f'<span class="cgg-group-size cgg-figure" style="{theme.NOWRAP};margin-left:auto">'
        f"{_e(format_bytes(group.nbytes))}</span></div>"
    )


def render_group_body(group: LeftoverGroup) -> str:
    """An opened group: its biggest arrays, and how many more it holds."""
    body = entries_table(group.entries) if group.entries else ""
    if group.more > 0:
        body += f'<div style="{theme.MUTED}">... {group.more:,} more in {_e(group.name)}</div>'
    return (
        f'<div class="cgg-group-body-html" style="{theme.FONT};padding:0 0 4px 14px">{body}</div>'
    )


def entries_table(entries: Sequence[Leftover]) -> str:
    """Arrays, one row each: the name (wrapping, never cut), then what holds it, its shape,
    dtype and device, and its size, each whole. Wide, a row is one line; narrow, it wraps
    into a short list under the name."""
    rows = ['<div class="cgg-leftovers-table">']
    for entry in entries:
        also = ", ".join(entry.shared_with)
        name = entry.name + (f" (also {also})" if also else "")
        view = entry.view_summary()
        if view:
            name += f" (view: {view})"
        facts = [
            f"held by {entry.held_as}" if entry.holder else "",
            shape_text(entry.shape),
            entry.type_text or "",
            entry.device or "",
        ]
        shown = " · ".join(
            f'<span style="{theme.NOWRAP}">{_e(fact)}</span>' for fact in facts if fact
        )
        rows.append(
            f'<div class="cgg-entry" style="{_ENTRY}">'
            f'<span class="cgg-entry-name" style="{theme.CODE};flex:1 1 160px;min-width:0;'
            f'overflow-wrap:anywhere">{_e(name)}</span>'
            f'<span class="cgg-entry-facts" style="{theme.MUTED};flex:0 1 auto;min-width:0">'
            f"{shown}</span>"
            f'<b class="cgg-entry-size cgg-figure" style="{theme.NOWRAP};margin-left:auto">'
            f"{_e(format_bytes(entry.nbytes)).replace(' ', '&nbsp;')}</b></div>"
        )
    rows.append("</div>")
    return "".join(rows)


_ENTRY = "display:flex;flex-wrap:wrap;column-gap:8px;align-items:baseline;min-width:0"
