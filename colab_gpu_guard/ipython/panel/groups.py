"""The panel's Leftovers section as widgets: the totals, one row per holder group (a
core ``ToggleButton`` with the group's name, one line of what it is, its arrays under it
while open), and the lines under them. Open groups stay open across refreshes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import ipywidgets as widgets

from colab_gpu_guard.status.panel_leftovers import (
    TOP_LEFTOVERS,
    render_group_body,
    render_group_line,
    render_leftovers_foot,
    render_leftovers_head,
    shown_groups,
)
from colab_gpu_guard.units import escape_text

if TYPE_CHECKING:
    from colab_gpu_guard.leftovers.groups import LeftoverGroup
    from colab_gpu_guard.status import GpuStatus

OPEN, SHUT = "\u25be ", "\u25b8 "  # the disclosure triangles on the panel's toggles
REMEMBERED = 100  # open group names kept, the most recently opened

Write = Callable[..., bool]  # PanelView.set(widget, value, trait="value")
Show = Callable[[widgets.Widget, bool], None]  # PanelView.show(widget, shown)


def _layout(**css: Any) -> widgets.Layout:
    # no margin: a widget's default 2 px margins beside width 100% overflow the panel
    return widgets.Layout(margin="0", **css)


class GroupRow(widgets.VBox):
    """One group: its toggle and line, and its arrays under them while open. ``name`` is
    the group it shows (None while kept aside), ``group`` its last `LeftoverGroup`."""

    def __init__(self, on_toggle: Callable[[GroupRow], None]) -> None:
        self.name: Optional[str] = None
        self.group: Optional[LeftoverGroup] = None
        self.toggle = widgets.ToggleButton(
            value=False,
            description="",
            tooltip="",
            layout=widgets.Layout(
                width="auto",
                max_width="50%",
                min_width="0",
                height="22px",
                flex="0 1 auto",
                margin="0 8px 0 0",
            ),
        )
        self.toggle.add_class("cgg-group-toggle")
        self.line = widgets.HTML(value="", layout=_layout(flex="1 1 0%", min_width="0"))
        self.line.add_class("cgg-group-what-part")
        self.head = widgets.HBox(
            [self.toggle, self.line], layout=_layout(width="100%", align_items="center")
        )
        self.body = widgets.HTML(value="", layout=_layout(width="100%", display="none"))
        self.body.add_class("cgg-group-body")
        super().__init__([self.head, self.body], layout=_layout(width="100%"))
        self.add_class("cgg-group-row")
        self.toggle.observe(lambda _change: on_toggle(self), names="value")

    def parts(self) -> list[widgets.Widget]:
        return [self.toggle, self.line, self.head, self.body, self]


class LeftoversView(widgets.VBox):
    """The Leftovers section. ``opened``: the names of the groups the user opened (oldest
    first); ``rows``: the shown rows in order. Writes go through the view's `write` and
    `show`, which send only what changed and count it.

    Which groups are open lives here, in the kernel, by the group's name (``model``,
    ``Out[3]``, ``<traceback: f() local 'x'>``), not by its place in the list: a refresh
    rewrites only what changed, a group that moves keeps its row (the rows are reordered),
    and a group that drops out of the list - deleted, freed, or no longer among the
    biggest - comes back as the user left it, open or closed, as long as the name is among
    the last `REMEMBERED` opened. The browser's own ``<details>`` cannot do this: a changed
    HTML value replaces the DOM and closes it. At most `top` rows ever exist: a row whose
    group left the list is kept aside and reused for the next new group.
    """

    def __init__(self, write: Write, show: Show, top: int = TOP_LEFTOVERS, **kwargs: Any):
        self._write, self._show_part = write, show
        self.top = top
        self.opened: dict[str, None] = {}
        self._by_name: dict[str, GroupRow] = {}
        self._spare: list[GroupRow] = []
        self._syncing = False
        self.head = widgets.HTML(value="", layout=_layout(width="100%"))
        self.head.add_class("cgg-leftovers-head")
        self.rows_box = widgets.VBox([], layout=_layout(width="100%"))
        self.rows_box.add_class("cgg-groups")
        self.foot = widgets.HTML(value="", layout=_layout(width="100%", display="none"))
        self.foot.add_class("cgg-leftovers-foot-part")
        super().__init__([self.head, self.rows_box, self.foot], **kwargs)
        self.add_class("cgg-leftovers")

    @property
    def rows(self) -> tuple[GroupRow, ...]:
        return tuple(self.rows_box.children)

    def row(self, name: str) -> Optional[GroupRow]:
        """The row showing the group `name`, if it is listed."""
        return self._by_name.get(name)

    def is_open(self, name: str) -> bool:
        return name in self.opened

    def render(self, status: GpuStatus) -> None:
        """Draw the section from `status`: rows follow the groups by name."""
        self._write(self.head, render_leftovers_head(status, self.top))
        groups = shown_groups(status, self.top)
        kept = {group.name for group in groups}
        for name, row in self._by_name.items():
            if name not in kept:
                row.name = None
                self._spare.append(row)
        by_name = {}
        for group in groups:
            row = self._by_name.get(group.name)
            if row is None:
                row = self._spare.pop() if self._spare else GroupRow(self._on_toggle)
                row.name = group.name
            row.group = group
            by_name[group.name] = row
            self._sync(row)
        self._by_name = by_name
        self._write(self.rows_box, tuple(by_name.values()), "children")
        foot = render_leftovers_foot(status, self.top)
        self._write(self.foot, foot)
        self._show_part(self.foot, bool(foot))

    def _sync(self, row: GroupRow) -> None:
        """Write a row from its group and whether that group is open (only what changed;
        a closed group's arrays are drawn when it opens)."""
        group, shown = row.group, self.is_open(row.name or "")
        self._syncing = True
        try:
            self._write(row.toggle, shown, "value")
        finally:
            self._syncing = False
        name = escape_text(group.name)  # the toggle's words are text: a name's controls shown
        self._write(row.toggle, (OPEN if shown else SHUT) + name, "description")
        self._write(row.toggle, name, "tooltip")
        self._write(row.line, render_group_line(group))
        if shown:
            self._write(row.body, render_group_body(group))
        self._show_part(row.body, shown)

    def _on_toggle(self, row: GroupRow) -> None:
        """The user opened or closed a group: remember it by name and draw the row."""
        if self._syncing or row.name is None:
            return
        self.opened.pop(row.name, None)
        if row.toggle.value:
            self.opened[row.name] = None
            for name in list(self.opened)[:-REMEMBERED]:
                del self.opened[name]
        self._sync(row)

    def parts(self) -> list[widgets.Widget]:
        """Every widget of the section (the rows kept aside too), for closing."""
        rows = [*self._by_name.values(), *self._spare]
        return [part for row in rows for part in row.parts()] + [
            self.head,
            self.rows_box,
            self.foot,
        ]
