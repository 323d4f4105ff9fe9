"""The panel widget (`GpuPanel`), one per kernel: composed of its view, refresher, live
lines, actions and cell hooks; and how a kernel's panel is made, found and stopped."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Optional

import ipywidgets as widgets

from colab_gpu_guard import notebook_refs
from colab_gpu_guard.status.panel_html import render_message

from ..registration import Registration, registration_for
from .actions import PanelActions
from .hooks import CellHooks
from .live import LiveLines
from .refresh import Refresher, running_cell, starting_cell
from .view import PanelView, close_its_models, panel_layout

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.status import GpuStatus

__all__ = ["GpuPanel", "current_panel", "panel", "stop_panels"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
# the view's widgets that code and tests reach from the panel (``panel.header``)
PARTS = (
    "header",
    "devices",
    "actions",
    "toggles",
    "sections",
    "now",
    "message",
    "leftovers",
    "processes",
    "history",
    "details",
    "details_box",
    "report_toggle",
    "report",
    "seed_row",
    "seed_value",
    "deterministic",
    "refresh_button",
    "free_button",
    "seed_button",
)


class _Delegate:
    """A read-only attribute of the panel that is one of its parts' (``panel.refreshes``
    is ``panel.refresher.refreshes``)."""

    def __init__(self, part: str, name: str = "") -> None:
        self.part, self.name = part, name

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = self.name or name

    def __get__(self, panel: Optional[GpuPanel], owner: Optional[type] = None) -> Any:
        if panel is None:
            return self
        return getattr(getattr(panel, self.part), self.name)


class GpuPanel(widgets.VBox):
    """The panel widget (a core ``VBox``). Refreshes after every cell while open; with
    `live_every(seconds)` its GPU lines also update while a cell runs.

    Its widgets, for code and tests, are the view's `PARTS` (``panel.header``). It is
    composed of ``view`` (view.py), ``refresher`` (refresh.py), ``live_lines`` (the live
    GPU lines: live.py, ticker.py), ``clicks`` (what the buttons do: actions.py) and
    ``hooks`` (the cell events it follows: hooks.py).
    """

    def __init__(
        self,
        shell: Optional[InteractiveShell] = None,
        *,
        snapshot: Optional[Callable[..., GpuStatus]] = None,
        **kwargs: Any,
    ) -> None:
        self.view = view = PanelView()
        for name in PARTS:
            setattr(self, name, getattr(view.parts, name))
        super().__init__(view.parts.children, layout=panel_layout(), **kwargs)
        self.add_class("cgg-panel")
        self.refresher = Refresher(view, shell, lambda: self.closed, snapshot)
        view.own_cell = running_cell(shell)  # made in a cell: that cell's cost is ours
        self.hooks = CellHooks(
            (("pre_run_cell", self._pre_run_cell), ("post_run_cell", self._post_run_cell))
        )
        self.live_lines = LiveLines(view, self.refresher)
        self.clicks = PanelActions(view, self.refresher, self.hooks)

    # what its parts hold, read from the panel
    updates = _Delegate("view")  # widget values written
    last_status = _Delegate("view", "status")  # the snapshot shown
    refreshes = _Delegate("refresher")
    last_error = _Delegate("refresher")
    shell = _Delegate("refresher")
    registration = _Delegate("hooks")
    queued = _Delegate("clicks")  # actions clicked while a cell runs, run when it ends
    live_seconds = _Delegate("live_lines", "seconds")  # None: no live updates
    live_thread = _Delegate("live_lines", "thread")
    live_stats = _Delegate("live_lines", "stats")

    @property
    def closed(self) -> bool:
        return self.comm is None

    @property
    def live(self) -> bool:
        """Open and refreshing after every cell."""
        return not self.closed and not self.hooks.stopped and self.hooks.attached

    def refresh(self, status: Optional[GpuStatus] = None) -> int:
        """Take one snapshot (unless given one) and write the sections that changed.
        Returns how many widget values were written."""
        return self.refresher.refresh(status)

    # ------------------------------------------------------------ following the cells

    def attach(
        self, shell: Optional[InteractiveShell] = None, registration: Optional[Registration] = None
    ) -> None:
        """Refresh after every cell of `shell`: through the extension's `registration`
        when given (so `%unload_ext` stops it), else directly on the shell's events."""
        self.hooks.detach()
        if shell is not None:
            self.refresher.shell = shell
        shell = self.refresher.shell
        if shell is None or self.closed:
            return
        self.hooks.attach(shell, registration)
        for button in self.view.parts.buttons:
            button.disabled = False

    def detach(self) -> None:
        """Stop refreshing after cells."""
        self.hooks.detach()

    def _pre_run_cell(self, info: Any = None) -> None:
        # boundary: IPython's pre_run_cell callback, which must never raise into IPython
        with contextlib.suppress(Exception):
            stored = getattr(info, "store_history", True)
            live = self.live_lines.seconds is not None
            self.refresher.cell_began(starting_cell(self.shell) if stored else None, live)
            self.live_lines.cell_started()

    def _post_run_cell(self, result: Any = None) -> None:
        self.live_lines.cell_ended()
        if self.closed:
            self.refresher.running = None
            self.hooks.detach()
        else:
            self.refresher.cell_ended(result)
        self.live_lines.say_if_stopped()
        self.clicks.run_queued()

    # ------------------------------------------------------------ live GPU lines

    def live_every(self, seconds: Optional[float], this_cell: Optional[int] = None) -> None:
        """Update the header and GPU lines every `seconds` while a cell runs (0.5 to 60);
        None stops that. The caller checks `live.why_not_live`. `this_cell`: the cell
        calling this, when the panel may not have seen it begin (it was opened in it): the
        rest of that cell runs live too."""
        following = not self.closed and not self.hooks.stopped
        self.live_lines.every(seconds, this_cell, following)

    # ------------------------------------------------------------ shown without widgets

    def text(self) -> str:
        """The compact status in plain text (what a terminal or a text-only output shows)."""
        return self.view.text(self.refresher.cell)

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def snapshot_html(self) -> str:
        """The panel as static HTML, as it is now: what renderers without widgets show."""
        return self.view.static_html(self.refresher.cell)

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, and beside it the compact status as text and a static copy of
        the panel as HTML (nbconvert without stored widget state, GitHub and `make demo`
        show that; front ends with a widget manager show the widget; nbconvert with stored
        widget state shows only the widget, drawn by a script it loads from a CDN: see
        docs/status.md for the export command that works offline)."""
        data = _widget_view(self, **kwargs)
        data["text/plain"] = self.text()  # whole: ipywidgets cuts a repr at 110 characters
        data["text/html"] = self.snapshot_html()
        return data

    if hasattr(widgets.Widget, "_ipython_display_"):  # ipywidgets 7 displays through this

        def _ipython_display_(self, **kwargs: Any) -> None:
            from IPython.display import display

            display(self._repr_mimebundle_(), raw=True)
            self._handle_displayed(**kwargs)

    # ------------------------------------------------------------ the end

    def stop(self, reason: str = "colab_gpu_guard was unloaded") -> None:
        """Stop refreshing, disable the buttons and say why (the view stays visible)."""
        self.live_lines.stop()
        self.hooks.stop()
        if self.closed:
            return
        for button in self.view.parts.buttons:
            button.disabled = True
        self.view.show_message(render_message("info", f"{reason}: this panel no longer refreshes"))

    def close(self) -> None:
        """Close the panel: stop refreshing and close every widget it is made of."""
        self.live_lines.stop()
        self.hooks.stop()
        _forget(self)
        self.view.close()
        super().close()
        close_its_models(self)


def _widget_view(panel: GpuPanel, **kwargs: Any) -> dict[str, Any]:
    """The widget's own output: ipywidgets 8's bundle, or 7's view as its
    ``_ipython_display_`` writes it."""
    base = getattr(widgets.VBox, "_repr_mimebundle_", None)  # ipywidgets 8
    if base is not None:
        return dict(base(panel, **kwargs) or {})
    if panel.closed:
        return {}
    return {WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": panel.model_id}}


# ---------------------------------------------------------------- one panel per kernel

_panels: dict[int, GpuPanel] = {}


def _key(shell: Optional[InteractiveShell]) -> int:
    return id(shell) if shell is not None else 0


def _forget(instance: GpuPanel) -> None:
    for key, value in list(_panels.items()):
        if value is instance:
            del _panels[key]


def current_panel(shell: Optional[InteractiveShell] = None) -> Optional[GpuPanel]:
    """The open panel of `shell` (default: the running one), if any."""
    shell = shell if shell is not None else notebook_refs.running_shell()
    instance = _panels.get(_key(shell))
    if instance is not None and instance.closed:
        _forget(instance)
        return None
    return instance


def panel(
    shell: Optional[InteractiveShell] = None,
    *,
    new: bool = False,
    registration: Optional[Registration] = None,
) -> GpuPanel:
    """The kernel's panel (created on first use; the same one after that): see
    ``colab_gpu_guard.ipython.panel.panel``."""
    if registration is None and shell is not None:
        registration = registration_for(shell)
    instance = current_panel(shell)
    if instance is not None and new:
        instance.close()
        instance = None
    if instance is None:
        instance = GpuPanel(shell)
        _panels[_key(shell)] = instance
        instance.refresh()
        instance.attach(shell, registration)
        return instance
    # Shown again: the same live panel; re-hook if it was stopped or hooked elsewhere.
    if not instance.live or (
        registration is not None and instance.registration is not registration
    ):
        instance.attach(shell, registration)
    instance.refresh()
    return instance


def stop_panels(
    shell: Optional[InteractiveShell] = None, reason: str = "colab_gpu_guard was unloaded"
) -> None:
    """Stop the panel of `shell` (``%unload_ext``): no more refreshes; the view stays."""
    instance = _panels.pop(_key(shell), None)
    if instance is not None:
        instance.stop(reason)
