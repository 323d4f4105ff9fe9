"""The panel's buttons: Refresh, Free memory (gpu_reset) and Seed (seed_all), and the
messages they leave. An action never raises into the front end: a failure is shown."""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import TYPE_CHECKING, Callable, Optional

import ipywidgets as widgets

from colab_gpu_guard.cuda_health import BUSY
from colab_gpu_guard.status.panel_html import release_summary, render_message

if TYPE_CHECKING:
    from .hooks import CellHooks
    from .refresh import Refresher
    from .view import PanelView

BUSY_MESSAGE = (
    "the GPU is still running CUDA work queued by the last cell, so its cached memory was "
    "not emptied: press Free memory again when that work finishes"
)


def seed_is_slow(deterministic: bool) -> str:
    """Why this Seed may take seconds, or "": torch is imported first where it is not yet
    (seed_all seeds an installed torch), and the first `torch.use_deterministic_algorithms`
    imports torch's compiler (``torch._inductor.config``: its source does so to set
    ``deterministic``), several seconds the first time in a kernel."""
    from colab_gpu_guard.frameworks import torch as torch_support

    if torch_support.loaded() is None:
        if not torch_support.installed():
            return ""
        return "importing torch first: this takes a few seconds the first time"
    if deterministic and "torch._inductor.config" not in sys.modules:
        return (
            "the first deterministic seed loads torch's compiler (torch._inductor): this "
            "takes a few seconds once per kernel"
        )
    return ""


class PanelActions:
    """What the buttons do; after each action the panel refreshes. ``queued`` names the
    actions clicked while a cell runs, to run when it ends."""

    def __init__(self, view: PanelView, refresher: Refresher, hooks: CellHooks) -> None:
        self.view = view
        self.refresher = refresher
        self.hooks = hooks
        self.queued: dict[str, Callable[[], None]] = {}
        parts = view.parts
        parts.refresh_button.on_click(self._on_refresh)
        parts.free_button.on_click(self._on_free)
        parts.seed_button.on_click(self._on_seed)
        self._shown_deterministic = self._show_deterministic_in_force()

    def _queue(self, name: str, run: Callable[[], None]) -> bool:
        """Keep a click read in another thread while a cell runs (True), to run after it.

        JupyterLab 4.4+ sends comm messages to a kernel subshell, whose thread reads them at
        once (ipykernel 7.0 to 7.3; 7.4 sends them where the widget last published from, a
        subshell when code run there wrote to it), and an action must not walk or free what
        the running cell is using. Read in the cell's own thread (the cell clicked, or
        processed UI events) it runs."""
        running = self.refresher.running
        if running is None or running.thread == threading.get_ident():
            return False
        with self.view.lock:
            self.queued[name] = run
            names = ", ".join(self.queued)
            self.view.show_message(
                render_message("info", f"{names}: queued, runs when the cell ends")
            )
        return True

    def run_queued(self) -> None:
        """Run the clicks kept while the cell ran (it has ended)."""
        with self.view.lock:
            queued, self.queued = list(self.queued.values()), {}
        for run in queued:
            # boundary: this runs in IPython's post_run_cell callback, which must never raise
            with contextlib.suppress(Exception):
                run()

    def _run_action(self, name: str, action: Callable[[], tuple[str, str]]) -> None:
        refresher, view = self.refresher, self.view
        if refresher.closed() or self._queue(name, lambda: self._run_action(name, action)):
            return
        if self.hooks.stopped:
            view.show_message(render_message("error", "this panel is stopped: run %gpu_panel"))
            return
        view.show_message(render_message("info", self._starting(name)))
        try:
            text, details = action()
        except Exception as error:  # boundary: gpu_reset / seed_all on the user's objects
            refresher.last_error = f"{type(error).__name__}: {error}"
            line = f"{name} failed: {refresher.last_error}"
            view.action_done(line, "")
            view.show_message(render_message("error", line))
        else:
            refresher.last_error = None
            view.action_done(text, details)
            view.show_message(render_message("ok", text, details))
        refresher.refresh()

    def _starting(self, name: str) -> str:
        """What the message says while an action runs: for Seed, why it may take seconds."""
        if name != "Seed":
            return f"{name}..."
        slow = seed_is_slow(bool(self.view.parts.deterministic.value))
        return f"Seed... {slow}" if slow else "Seed..."

    def _on_refresh(self, _button: Optional[widgets.Button] = None) -> None:
        if self.refresher.closed() or self._queue("Refresh", self._on_refresh):
            return
        self.refresher.refresh()

    def _on_free(self, _button: Optional[widgets.Button] = None) -> None:
        self._run_action("Free memory", self._free)

    def _on_seed(self, _button: Optional[widgets.Button] = None) -> None:
        self._run_action("Seed", self._seed)

    def _free(self) -> tuple[str, str]:
        from colab_gpu_guard.reset.apply import gpu_reset

        report = gpu_reset(shell=self.refresher.shell)  # not all_vars: user variables stay
        text = release_summary(report)
        if getattr(report, "cuda_state", None) == BUSY:  # busy, not broken: no restart
            text = f"{BUSY_MESSAGE}; {text}"
        return text, str(report)

    def _show_deterministic_in_force(self) -> bool:
        """Tick the deterministic box as the mode in force (torch's switch where torch is
        imported), and return what it shows."""
        from colab_gpu_guard.frameworks import torch as torch_support
        from colab_gpu_guard.seeding import determinism

        on = determinism.modes_in_force(torch_support.loaded()).deterministic
        self.view.parts.deterministic.value = on
        return on

    def _seed(self) -> tuple[str, str]:
        """Seed, keeping every mode in force (as `%seed_all SEED` does): a ticked box switches
        deterministic mode on where the user ticked it; the box never switches it off (that
        is `%seed_all --no-deterministic`). Afterwards the box shows the mode in force."""
        from colab_gpu_guard.seeding import seed_all

        parts = self.view.parts
        ticked = bool(parts.deterministic.value) and not self._shown_deterministic
        report = seed_all(int(parts.seed_value.value), deterministic=True if ticked else None)
        parts.deterministic.value = self._shown_deterministic = report.deterministic
        manager = getattr(self.refresher.shell, "magics_manager", None)
        seed_magics = manager.registry.get("SeedMagics") if manager is not None else None
        if seed_magics is not None:  # %seed_all --every-cell on: this seed becomes its base
            seed_magics.take_over_every_cell(report)
        return f"seed_all: {report.summary()}", str(report)
