"""The widget panel: GPU memory, driver, leftovers and per-cell history, with buttons.

``%gpu_panel`` (or ``colab_gpu_guard.panel()``, which returns the widget) shows one live
panel per kernel, built only from core ipywidgets (``VBox``, ``HBox``, ``HTML``, ``Button``,
``IntText``, ``Checkbox``) with HTML and inline SVG inside ``widgets.HTML``: Colab renders it
without ``enable_custom_widget_manager()``, and so do JupyterLab, Notebook 6.5/7 and VS Code,
with ipywidgets 7.7.1 as with 8.x.

Every refresh takes one `GpuStatus` snapshot (`colab_gpu_guard.status.gpu_status`) and
renders each section from it; a section's widget is written only when its HTML changed, so a
refresh with nothing new sends (almost) nothing to the front end. The panel refreshes after
every cell (IPython's ``post_run_cell``) while it is open, and stops when it is closed
(``widget.close()``, ``Widget.close_all()``) or the extension is unloaded. Nothing runs
between cells. With ``%gpu_panel --live SECONDS`` (``live_every``) one thread per panel also
updates the header and GPU lines while a cell runs, where the front end shows widget updates
sent from a thread (not Colab: live.py); closing, stopping or unloading ends and joins it.

Everything shown that this module did not write itself - variable names, process names, GPU
names, error texts - is HTML-escaped.

widget.py holds the widgets and layout, refresh.py the snapshots and the per-cell hooks,
live.py the live thread, actions.py the buttons; this module the panel itself and the one
panel per kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

import ipywidgets as widgets

from colab_gpu_guard import notebook_refs
from colab_gpu_guard.status.compact import compact_text
from colab_gpu_guard.status.panel_html import render_message
from colab_gpu_guard.status.panel_static import render_static_panel

from ..registration import Registration, registration_for
from .actions import PanelActions

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["GpuPanel", "current_panel", "panel", "stop_panels"]

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


class GpuPanel(PanelActions):
    """The panel widget (a core ``VBox``). Refreshes after every cell while open; with
    `live_every(seconds)` its GPU lines also update while a cell runs.

    Parts, for code and tests: ``header``, ``notes``, ``devices`` (a VBox, one HTML per GPU
    or the no-GPU line), ``leftovers``, ``history``, ``refresh_button``, ``free_button``,
    ``seed_value``, ``deterministic``, ``seed_button``, ``message``, ``footer``.
    ``refreshes`` counts refreshes and ``updates`` the widget values written.
    """

    def text(self) -> str:
        """The compact status in plain text (what a terminal or a text-only output shows)."""
        if self.last_status is None:
            return "GPU guard panel: no snapshot yet"
        return compact_text(self.last_status, self._cell)

    def __repr__(self) -> str:
        return self.text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text())

    def snapshot_html(self) -> str:
        """The panel as static HTML, as it is now (header, GPU lines, the line of what
        matters now or of the last action): what renderers without widgets show."""
        shown = self.message.layout.display != "none"
        return render_static_panel(
            self.last_status, self._cell, self.message.value if shown else ""
        )

    def _repr_mimebundle_(self, **kwargs: Any) -> dict[str, Any]:
        """The live widget, and beside it the compact status as text and a static copy of
        the panel as HTML (nbconvert, GitHub and `make demo` show that; front ends with a
        widget manager show the widget)."""
        base = getattr(super(), "_repr_mimebundle_", None)  # ipywidgets 8
        if base is not None:
            data = dict(base(**kwargs) or {})
        elif not self.closed:  # ipywidgets 7's view, as its _ipython_display_ writes it
            data = {
                WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": self.model_id}
            }
        else:
            data = {}
        data["text/plain"] = self.text()  # whole: ipywidgets cuts a repr at 110 characters
        data["text/html"] = self.snapshot_html()
        return data

    if hasattr(widgets.Widget, "_ipython_display_"):  # ipywidgets 7 displays through this

        def _ipython_display_(self, **kwargs: Any) -> None:
            from IPython.display import display

            display(self._repr_mimebundle_(), raw=True)
            self._handle_displayed(**kwargs)

    def stop(self, reason: str = "colab_gpu_guard was unloaded") -> None:
        """Stop refreshing, disable the buttons and say why (the view stays visible)."""
        self.stop_live()
        self.detach()
        self._stopped = True
        if self.closed:
            return
        for button in self.buttons:
            button.disabled = True
        self.show_message(render_message("info", f"{reason}: this panel no longer refreshes"))

    def close(self) -> None:
        """Close the panel: stop refreshing and close every widget it is made of."""
        self.stop_live()
        self.detach()
        self._stopped = True
        _forget(self)
        for part in self._parts():
            part.close()
        super().close()


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
    """The kernel's live GPU panel widget (created on first use; the same one after that).

    Display it (it is the last expression of a cell, or ``display(panel())``); it refreshes
    after every cell while open. ``new=True`` closes the current one and makes a fresh one.
    Outside IPython it is a plain widget that refreshes only on its button or `refresh()`.
    """
    shell = shell if shell is not None else notebook_refs.running_shell()
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
