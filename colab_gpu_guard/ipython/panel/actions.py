"""The panel's buttons: Refresh, Free memory (gpu_reset) and Seed (seed_all), and the
messages they leave. An action never raises into the front end: a failure is shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

import ipywidgets as widgets

from colab_gpu_guard.cuda_health import BUSY
from colab_gpu_guard.status.panel_html import release_summary, render_message

from .refresh import PanelRefresh

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.status import GpuStatus

BUSY_MESSAGE = (
    "the GPU is still running CUDA work queued by the last cell, so its cached memory was "
    "not emptied: press Free memory again when that work finishes"
)


class PanelActions(PanelRefresh):
    """The panel's buttons; after each action the panel refreshes."""

    def __init__(
        self,
        shell: Optional[InteractiveShell] = None,
        *,
        snapshot: Optional[Callable[..., GpuStatus]] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(shell, snapshot=snapshot, **kwargs)
        self.refresh_button.on_click(self._on_refresh)
        self.free_button.on_click(self._on_free)
        self.seed_button.on_click(self._on_seed)

    def _run_action(self, name: str, action: Callable[[], tuple[str, str]]) -> None:
        if self.closed:
            return
        if self._stopped:
            self.show_message(render_message("error", "this panel is stopped: run %gpu_panel"))
            return
        self.show_message(render_message("info", f"{name}..."))
        try:
            text, details = action()
        except Exception as error:
            self.last_error = f"{type(error).__name__}: {error}"
            self._last_action = f"{name} failed: {self.last_error}"
            self.show_message(render_message("error", self._last_action))
        else:
            self.last_error = None
            self._last_action = details or text
            self.show_message(render_message("ok", text, details))
        self.refresh()

    def _on_refresh(self, _button: Optional[widgets.Button] = None) -> None:
        if self.closed:
            return
        self.refresh()

    def _on_free(self, _button: Optional[widgets.Button] = None) -> None:
        self._run_action("Free memory", self._free)

    def _on_seed(self, _button: Optional[widgets.Button] = None) -> None:
        self._run_action("Seed", self._seed)

    def _free(self) -> tuple[str, str]:
        from colab_gpu_guard.reset import gpu_reset

        report = gpu_reset(shell=self.shell)  # not all_vars: user variables stay
        text = release_summary(report)
        if getattr(report, "cuda_state", None) == BUSY:  # busy, not broken: no restart
            text = f"{BUSY_MESSAGE}; {text}"
        return text, str(report)

    def _seed(self) -> tuple[str, str]:
        from colab_gpu_guard.seeding import seed_all

        report = seed_all(int(self.seed_value.value), deterministic=bool(self.deterministic.value))
        return f"seed_all: {report.summary()}", str(report)
