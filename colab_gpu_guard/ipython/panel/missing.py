"""What `panel()` and ``%gpu_panel`` give where ipywidgets is not installed: one line
saying what is missing and how to install it, and the status as text."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from colab_gpu_guard import notebook_refs

if TYPE_CHECKING:
    from colab_gpu_guard.status import GpuStatus

NEEDS_WIDGETS = "the panel needs ipywidgets, which is not installed here (pip install ipywidgets)"
WIDGETS_MISSING = f"{NEEDS_WIDGETS}; the status as text instead:"


def widgets_missing() -> bool:
    """ipywidgets cannot be imported here (not installed, or blocked)."""
    if "ipywidgets" in sys.modules:
        return sys.modules["ipywidgets"] is None
    return importlib.util.find_spec("ipywidgets") is None


@dataclass(frozen=True)
class PanelUnavailable:
    """The panel could not be made: `why` (one line), and the `status` it would show."""

    why: str
    status: GpuStatus

    def __str__(self) -> str:
        return f"{self.why}\n{self.status}"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        from colab_gpu_guard.status.html import escape

        return f"<div>{escape(self.why)}</div>{self.status.to_html()}"

    def to_dict(self) -> dict[str, Any]:
        return {"why": self.why, "status": self.status.to_dict()}


def unavailable_panel(shell: Any, who: str = "panel()") -> PanelUnavailable:
    """The report for `who` without ipywidgets: the status taken now, as `%gpu_status`."""
    from colab_gpu_guard.status import gpu_status

    namespace: Optional[dict] = notebook_refs.namespace_to_scan(shell)
    return PanelUnavailable(f"{who}: {WIDGETS_MISSING}", gpu_status(namespace=namespace))
