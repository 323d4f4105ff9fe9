"""What `panel()` and ``%gpu_panel`` give where ipywidgets is not installed: one line
saying what is missing and how to install it, and the status as text."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from colab_gpu_guard import notebook_refs
from colab_gpu_guard.units import escape_html, escape_text

if TYPE_CHECKING:
    from colab_gpu_guard.status import GpuStatus

NEEDS_WIDGETS = "the panel needs ipywidgets, which is not installed here (pip install ipywidgets)"
AS_TEXT = "the status as text instead:"


def widgets_problem() -> Optional[str]:
    """Why ipywidgets cannot be used here (not installed, blocked, or one of its own
    dependencies missing: ipywidgets 7 imports ipykernel, which needs psutil), or None."""
    if "ipywidgets" in sys.modules:
        return NEEDS_WIDGETS if sys.modules["ipywidgets"] is None else None
    if importlib.util.find_spec("ipywidgets") is None:
        return NEEDS_WIDGETS
    try:
        import ipywidgets  # noqa: F401  (the panel imports it next anyway)
    except ImportError as error:
        missing = getattr(error, "name", None) or ""
        fix = f" (pip install {missing.split('.')[0]})" if missing else ""
        return f"the panel needs ipywidgets, which could not be imported here: {error}{fix}"
    return None


@dataclass(frozen=True)
class PanelUnavailable:
    """The panel could not be made: `why` (one line), and the `status` it would show."""

    why: str
    status: GpuStatus

    def __str__(self) -> str:
        return f"{escape_text(self.why)}\n{self.status}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        return f"<div>{escape_html(self.why)}</div>{self.status.to_html()}"

    def to_dict(self) -> dict[str, Any]:
        return {"why": self.why, "status": self.status.to_dict()}


def unavailable_panel(shell: Any, why: str, who: str = "panel()") -> PanelUnavailable:
    """The report for `who` without ipywidgets (`why`, from `widgets_problem`): the status
    taken now, as `%gpu_status`."""
    from colab_gpu_guard.status import gpu_status

    namespace: Optional[dict] = notebook_refs.namespace_to_scan(shell)
    return PanelUnavailable(f"{who}: {why}; {AS_TEXT}", gpu_status(namespace=namespace))
