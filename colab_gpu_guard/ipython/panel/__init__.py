"""The widget panel (``%gpu_panel``, ``colab_gpu_guard.panel()``): GPU memory, driver,
leftovers and per-cell history, with buttons, in core ipywidgets only (Colab renders it
without a custom widget manager; ipywidgets 7.7.1 and 8). One panel per kernel; it
refreshes after every cell while open, and with ``--live`` also while a cell runs.

The widget itself is in `widget` (imported on first use: without ipywidgets, `panel()`
returns what is missing and the status as text instead of failing).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Optional, Union

from colab_gpu_guard import notebook_refs

from .missing import PanelUnavailable, unavailable_panel, widgets_problem

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration
    from .widget import GpuPanel

__all__ = ["GpuPanel", "PanelUnavailable", "current_panel", "panel", "stop_panels"]

_WIDGET = f"{__name__}.widget"
_LAZY = ("GpuPanel", "PARTS", "WIDGET_VIEW", "_panels", "_forget")


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import widget

        return getattr(widget, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def panel(
    shell: Optional[InteractiveShell] = None,
    *,
    new: bool = False,
    registration: Optional[Registration] = None,
) -> Union[GpuPanel, PanelUnavailable]:
    """The kernel's live GPU panel widget (created on first use; the same one after that).

    Display it (it is the last expression of a cell, or ``display(panel())``); it refreshes
    after every cell while open. ``new=True`` closes the current one and makes a fresh one.
    Outside IPython it is a plain widget that refreshes only on its button or `refresh()`.
    Without ipywidgets: a `PanelUnavailable` saying so, with the status as text.
    """
    shell = shell if shell is not None else notebook_refs.running_shell()
    why = widgets_problem()
    if why is not None:
        return unavailable_panel(shell, why)
    from . import widget

    return widget.panel(shell, new=new, registration=registration)


def current_panel(shell: Optional[InteractiveShell] = None) -> Optional[GpuPanel]:
    """The open panel of `shell` (default: the running one), if any."""
    module = sys.modules.get(_WIDGET)
    return module.current_panel(shell) if module is not None else None


def stop_panels(
    shell: Optional[InteractiveShell] = None, reason: str = "colab_gpu_guard was unloaded"
) -> None:
    """Stop the panel of `shell` (``%unload_ext``): no more refreshes; the view stays."""
    module = sys.modules.get(_WIDGET)
    if module is not None:
        module.stop_panels(shell, reason)
