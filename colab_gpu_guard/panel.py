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
(``widget.close()``, ``Widget.close_all()``) or the extension is unloaded. There are no
background threads: widget updates from threads do not render in Colab.

Everything shown that this module did not write itself - variable names, process names, GPU
names, error texts - is HTML-escaped.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
import types
from typing import Any, Callable, Optional

import ipywidgets as widgets

from . import notebook_refs
from .status.chart import render_history
from .status.panel_html import (
    TOP_LEFTOVERS,
    release_summary,
    render_device,
    render_footer,
    render_header,
    render_leftovers,
    render_message,
    render_no_gpu,
    render_notes,
)

__all__ = ["GpuPanel", "current_panel", "panel", "stop_panels"]

HISTORY_CELLS = 30
DEFAULT_SEED = 42
# After a cell, a snapshot that took this long or less is always taken again; a slower one
# (the leftovers scan of a namespace holding 10^5 arrays takes ~0.5 s) is repeated only once
# it would cost at most SCAN_SHARE of the time since the last one, and the shown leftovers
# say how old they are in between. The Refresh button always scans.
ALWAYS_SCAN_S = 0.05
SCAN_SHARE = 0.1
_clock = time.monotonic  # tests move it


# ---------------------------------------------------------------- the widget


def _take_status(shell: Any, leftovers: bool = True) -> Any:
    from .status import gpu_status

    return gpu_status(
        leftovers=leftovers,
        history=True,
        namespace=notebook_refs.namespace_to_scan(shell),
        top=TOP_LEFTOVERS,  # the snapshot carries the totals; only the shown ones as entries
        history_limit=HISTORY_CELLS,
    )


class GpuPanel(widgets.VBox):
    """The panel widget (a core ``VBox``). Refreshes after every cell while open.

    Parts, for code and tests: ``header``, ``notes``, ``devices`` (a VBox, one HTML per GPU
    or the no-GPU line), ``leftovers``, ``history``, ``refresh_button``, ``free_button``,
    ``seed_value``, ``deterministic``, ``seed_button``, ``message``, ``footer``.
    ``refreshes`` counts refreshes and ``updates`` the widget values written.
    """

    def __init__(
        self,
        shell: Any = None,
        *,
        snapshot: Optional[Callable[[Any], Any]] = None,
        **kwargs: Any,
    ) -> None:
        self.shell = shell
        self._snapshot = snapshot or _take_status
        self._hook: Optional[tuple[str, Any]] = None  # ("registration", reg) | ("shell", sh)
        self._stopped = False
        self.refreshes = 0
        self.updates = 0
        self.last_status: Any = None
        self.last_error: Optional[str] = None
        self._scan: Optional[tuple[float, float, Any]] = None  # (done at, seconds, status)

        def html_part(name: str) -> widgets.HTML:
            part = widgets.HTML(value="", layout=widgets.Layout(width="100%"))
            part.add_class(f"cgg-{name}")
            return part

        self.header = html_part("header")
        self.notes = html_part("notes")
        self.devices = widgets.VBox([], layout=widgets.Layout(width="100%"))
        self.devices.add_class("cgg-devices")
        self.leftovers = html_part("leftovers")
        self.history = html_part("history")
        self.refresh_button = widgets.Button(
            description="Refresh", icon="refresh", tooltip="take a new snapshot now"
        )
        self.free_button = widgets.Button(
            description="Free memory",
            button_style="warning",
            icon="trash",
            tooltip="gpu_reset(): release output history, tracebacks and cached blocks "
            "(never your variables)",
        )
        self.seed_value = widgets.IntText(
            value=DEFAULT_SEED, description="seed", layout=widgets.Layout(width="170px")
        )
        self.deterministic = widgets.Checkbox(
            value=False,
            description="deterministic",
            indent=False,
            layout=widgets.Layout(width="120px"),
        )
        self.seed_button = widgets.Button(
            description="Seed", icon="random", tooltip="seed_all(seed, deterministic=...)"
        )
        for button in (self.refresh_button, self.free_button, self.seed_button):
            button.layout = widgets.Layout(width="auto")
        self.actions = widgets.HBox(
            [
                self.refresh_button,
                self.free_button,
                self.seed_value,
                self.deterministic,
                self.seed_button,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.actions.add_class("cgg-actions")
        self.message = html_part("message")
        self.footer = html_part("footer")
        self._device_parts: list[widgets.HTML] = []
        self.refresh_button.on_click(self._on_refresh)
        self.free_button.on_click(self._on_free)
        self.seed_button.on_click(self._on_seed)
        super().__init__(
            [
                self.header,
                self.notes,
                self.devices,
                self.leftovers,
                self.history,
                self.actions,
                self.message,
                self.footer,
            ],
            layout=widgets.Layout(
                border="1px solid #bbb", padding="6px", width="100%", max_width="760px"
            ),
            **kwargs,
        )
        self.add_class("cgg-panel")

    # ------------------------------------------------------------ state

    @property
    def closed(self) -> bool:
        return self.comm is None

    @property
    def live(self) -> bool:
        """Open and refreshing after every cell."""
        return not self.closed and not self._stopped and self._hook is not None

    def _set(self, part: widgets.HTML, value: str) -> bool:
        if part.value == value:
            return False
        part.value = value
        self.updates += 1
        return True

    # ------------------------------------------------------------ refresh

    def refresh(self, status: Any = None) -> int:
        """Take one snapshot (unless given one) and write the sections that changed.
        Returns how many widget values were written."""
        if self.closed:
            return 0
        started = self.updates
        try:
            if status is None:
                status = self._full_snapshot()
        except Exception as error:  # never a traceback in the log
            self.last_error = f"{type(error).__name__}: {error}"
            self._set(self.message, render_message("error", f"snapshot failed: {self.last_error}"))
            return self.updates - started
        self.last_status = status
        self.refreshes += 1
        self._set(self.header, render_header(status))
        self._set(self.notes, render_notes(status))
        self._render_devices(status)
        self._set(self.leftovers, render_leftovers(status))
        self._set(self.history, render_history(status))
        self._set(self.footer, render_footer(status))
        return self.updates - started

    def _full_snapshot(self) -> Any:
        status = self._snapshot(self.shell)
        seconds = float(getattr(status, "duration_ms", 0.0) or 0.0) / 1000.0
        self._scan = (_clock(), seconds, status)
        return status

    def _cell_snapshot(self) -> Any:
        """The snapshot after a cell: a full one, unless the last full one was slow and
        recent; then everything but the leftovers is new, and they say how old they are."""
        scan = self._scan
        if (
            scan is None
            or self._snapshot is not _take_status
            or scan[2].leftovers is None
            or scan[1] <= ALWAYS_SCAN_S
            or _clock() - scan[0] >= scan[1] / SCAN_SHARE
        ):
            return self._full_snapshot()
        _done, seconds, scanned = scan
        taken = time.strftime("%H:%M:%S", time.localtime(scanned.taken_at))
        note = (
            f"as of {taken}: finding them took {seconds * 1000:.0f} ms, so after a cell it "
            f"runs at most every {seconds / SCAN_SHARE:.0f} s; Refresh finds them now"
        )
        return dataclasses.replace(
            _take_status(self.shell, leftovers=False),
            leftovers=scanned.leftovers,
            leftovers_count=scanned.leftovers_count,
            leftovers_bytes=scanned.leftovers_bytes,
            leftovers_freeable_bytes=scanned.leftovers_freeable_bytes,
            leftovers_note=note,
        )

    def _render_devices(self, status: Any) -> None:
        if status.has_gpu:
            pages = [render_device(status, device) for device in status.nvml.devices]
        else:
            pages = [render_no_gpu(status)]
        if len(pages) != len(self._device_parts):
            parts = []
            for index in range(len(pages)):
                if index < len(self._device_parts):
                    parts.append(self._device_parts[index])
                else:
                    part = widgets.HTML(value="", layout=widgets.Layout(width="100%"))
                    part.add_class("cgg-device-part")
                    parts.append(part)
            for extra in self._device_parts[len(pages) :]:
                extra.close()
            self._device_parts = parts
            self.devices.children = tuple(parts)
            self.updates += 1
        for part, page in zip(self._device_parts, pages):
            self._set(part, page)

    # ------------------------------------------------------------ actions

    def _run_action(self, name: str, action: Callable[[], tuple[str, str]]) -> None:
        if self.closed:
            return
        if self._stopped:
            self._set(
                self.message, render_message("error", "this panel is stopped: run %gpu_panel")
            )
            return
        self._set(self.message, render_message("info", f"{name}..."))
        try:
            text, details = action()
        except Exception as error:
            self.last_error = f"{type(error).__name__}: {error}"
            self._set(self.message, render_message("error", f"{name} failed: {self.last_error}"))
        else:
            self.last_error = None
            self._set(self.message, render_message("ok", text, details))
        self.refresh()

    def _on_refresh(self, _button: Any = None) -> None:
        if self.closed:
            return
        self.refresh()

    def _on_free(self, _button: Any = None) -> None:
        self._run_action("Free memory", self._free)

    def _on_seed(self, _button: Any = None) -> None:
        self._run_action("Seed", self._seed)

    def _free(self) -> tuple[str, str]:
        from .memory import gpu_reset

        report = gpu_reset(shell=self.shell)  # not all_vars: user variables stay
        return release_summary(report), str(report)

    def _seed(self) -> tuple[str, str]:
        from .seeding import seed_all

        report = seed_all(int(self.seed_value.value), deterministic=bool(self.deterministic.value))
        text = str(report)
        line = text.splitlines()[0] if text else f"seed_all: seed {report.seed}"
        seeded = ", ".join(rng.name for rng in report.seeded)
        if seeded:
            line += f"; seeded {seeded}"
        if report.deterministic:
            line += "; deterministic algorithms on"
        return line, text

    # ------------------------------------------------------------ lifecycle

    def attach(self, shell: Any = None, registration: Any = None) -> None:
        """Refresh after every cell of `shell`: through the extension's `registration`
        when given (so `%unload_ext` stops it), else directly on the shell's events."""
        self.detach()
        if shell is not None:
            self.shell = shell
        if self.shell is None or self.closed:
            return
        self._stopped = False
        if registration is not None:
            registration.register_event("post_run_cell", self._post_run_cell)
            self._hook = ("registration", registration)
        else:
            self.shell.events.register("post_run_cell", self._post_run_cell)
            self._hook = ("shell", self.shell)
        for button in (self.refresh_button, self.free_button, self.seed_button):
            button.disabled = False

    def detach(self) -> None:
        """Stop refreshing after cells."""
        hook, self._hook = self._hook, None
        if hook is None:
            return
        kind, owner = hook
        if kind == "registration":
            owner.unregister_event("post_run_cell", self._post_run_cell)
        else:
            with contextlib.suppress(ValueError):  # already removed by someone else
                owner.events.unregister("post_run_cell", self._post_run_cell)

    @property
    def registration(self) -> Any:
        return self._hook[1] if self._hook and self._hook[0] == "registration" else None

    def stop(self, reason: str = "colab_gpu_guard was unloaded") -> None:
        """Stop refreshing, disable the buttons and say why (the view stays visible)."""
        self.detach()
        self._stopped = True
        if self.closed:
            return
        for button in (self.refresh_button, self.free_button, self.seed_button):
            button.disabled = True
        self._set(self.message, render_message("info", f"{reason}: this panel no longer refreshes"))

    def close(self) -> None:
        """Close the panel: stop refreshing and close every widget it is made of."""
        self.detach()
        self._stopped = True
        _forget(self)
        for part in self._parts():
            part.close()
        super().close()

    def _parts(self) -> list[widgets.Widget]:
        return [
            *self._device_parts,
            self.header,
            self.notes,
            self.devices,
            self.leftovers,
            self.history,
            self.refresh_button,
            self.free_button,
            self.seed_value,
            self.deterministic,
            self.seed_button,
            self.actions,
            self.message,
            self.footer,
        ]

    def _post_run_cell(self, result: Any = None) -> None:
        if self.closed:
            self.detach()
            return
        try:
            try:
                status = self._cell_snapshot()
            except Exception as error:
                self.last_error = f"{type(error).__name__}: {error}"
                self._set(
                    self.message, render_message("error", f"snapshot failed: {self.last_error}")
                )
                return
            self.refresh(status)
        except Exception as error:  # a callback must never raise into IPython
            self.last_error = f"{type(error).__name__}: {error}"
            with contextlib.suppress(Exception):
                self._set(
                    self.message, render_message("error", f"refresh failed: {self.last_error}")
                )


# ---------------------------------------------------------------- one panel per kernel

_panels: dict[int, GpuPanel] = {}


def _key(shell: Any) -> int:
    return id(shell) if shell is not None else 0


def _forget(instance: GpuPanel) -> None:
    for key, value in list(_panels.items()):
        if value is instance:
            del _panels[key]


def current_panel(shell: Any = None) -> Optional[GpuPanel]:
    """The open panel of `shell` (default: the running one), if any."""
    shell = shell if shell is not None else notebook_refs.running_shell()
    instance = _panels.get(_key(shell))
    if instance is not None and instance.closed:
        _forget(instance)
        return None
    return instance


def _registration_for(shell: Any) -> Any:
    magics = sys.modules.get(f"{__package__}.magics")
    if magics is None or shell is None:
        return None
    return magics.registration_for(shell)


def panel(shell: Any = None, *, new: bool = False, registration: Any = None) -> GpuPanel:
    """The kernel's live GPU panel widget (created on first use; the same one after that).

    Display it (it is the last expression of a cell, or ``display(panel())``); it refreshes
    after every cell while open. ``new=True`` closes the current one and makes a fresh one.
    Outside IPython it is a plain widget that refreshes only on its button or `refresh()`.
    """
    shell = shell if shell is not None else notebook_refs.running_shell()
    registration = registration if registration is not None else _registration_for(shell)
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


def stop_panels(shell: Any = None, reason: str = "colab_gpu_guard was unloaded") -> None:
    """Stop the panel of `shell` (``%unload_ext``): no more refreshes; the view stays."""
    instance = _panels.pop(_key(shell), None)
    if instance is not None:
        instance.stop(reason)


class _CallableModule(types.ModuleType):
    """``colab_gpu_guard.panel`` is both this module and the function: importing the
    submodule rebinds the package attribute to the module, so the module is callable."""

    def __call__(self, *args: Any, **kwargs: Any) -> GpuPanel:
        return panel(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
