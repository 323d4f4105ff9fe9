"""Refreshing the panel: one snapshot per refresh, the cheap snapshot after a cell versus
the full one, and the ``post_run_cell`` hook that refreshes after every cell while open.
There are no background threads: widget updates from threads do not render in Colab."""

from __future__ import annotations

import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from colab_gpu_guard import notebook_refs
from colab_gpu_guard.status.chart import render_history
from colab_gpu_guard.status.panel_html import (
    TOP_LEFTOVERS,
    render_details,
    render_header,
    render_message,
    render_now,
    render_processes,
    section_label,
)

from .groups import OPEN, SHUT
from .widget import PanelView

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.status import GpuStatus

    from ..registration import Registration

# After a cell, a snapshot that took this long or less is always taken again; a slower one
# (the leftovers scan of a namespace holding 10^5 arrays takes ~0.5 s) is repeated only once
# it would cost at most SCAN_SHARE of the time since the last one, and the shown leftovers
# say how old they are in between. The Refresh button always scans.
ALWAYS_SCAN_S = 0.05
SCAN_SHARE = 0.1
_clock = time.monotonic  # tests move it
HISTORY_CELLS = 30
QUEUED = "a click now is queued: runs when the cell ends"  # the cells the history chart shows


def _take_status(shell: Optional[InteractiveShell], leftovers: bool = True) -> GpuStatus:
    from colab_gpu_guard.status import gpu_status

    return gpu_status(
        leftovers=leftovers,
        history=True,
        namespace=notebook_refs.namespace_to_scan(shell),
        top=TOP_LEFTOVERS,  # the snapshot carries the totals; only the shown ones as entries
        history_limit=HISTORY_CELLS + 1,  # one more: the host reading before the first
    )


class _Scan(NamedTuple):
    """The last full snapshot: when it was done, how long it took, what it found."""

    done_at: float
    seconds: float
    status: GpuStatus


class _Hook(NamedTuple):
    """Where the post_run_cell callback is registered: through the extension's
    registration (so `%unload_ext` stops it), or else on the shell's events directly."""

    shell: InteractiveShell
    registration: Optional[Registration]


class PanelRefresh(PanelView):
    """The panel's refreshes: ``refreshes`` counts them; ``last_status`` is the snapshot
    shown, ``last_error`` the last failure."""

    def __init__(
        self,
        shell: Optional[InteractiveShell] = None,
        *,
        snapshot: Optional[Callable[..., GpuStatus]] = None,
        **kwargs: Any,
    ) -> None:
        self.shell = shell
        self._snapshot = snapshot or _take_status
        self._hook: Optional[_Hook] = None
        self._stopped = False
        self.refreshes = 0
        self.last_status: Optional[GpuStatus] = None
        self.last_error: Optional[str] = None
        self._scan: Optional[_Scan] = None
        self._cell: Optional[int] = None  # the last cell that ended
        self._last_action = ""  # the last action's full report, for Details
        super().__init__(**kwargs)
        if shell is not None and getattr(shell, "execution_count", None):
            self._cell = shell.execution_count - 1 or None
        for name, toggle in self.toggles.items():
            toggle.observe(lambda change, name=name: self._on_toggle(name), names="value")

    def _render_section(self, name: str, status: GpuStatus) -> None:
        if name == "Leftovers":
            self.leftovers.render(status)
        elif name == "Processes":
            self._set(self.processes, render_processes(status))
        elif name == "History":
            self._set(self.history, render_history(status, HISTORY_CELLS))
        else:
            self._set(self.details, render_details(status, self._last_action))

    def _on_toggle(self, name: str) -> None:
        """Open or close a section; an opened one is drawn from the snapshot shown."""
        shown = self.is_open(name)
        toggle = self.toggles[name]
        words = section_label(name, self.last_status)
        self._set(toggle, (OPEN if shown else SHUT) + words, "description")
        if shown and self.last_status is not None:
            self._render_section(name, self.last_status)
        self._show(self.sections[name], shown)

    def show_message(self, html: str) -> None:
        """Show an action's outcome in place of the line of what matters now."""
        self._set(self.message, html)
        self._show(self.message, True)
        self._show(self.now, False)

    def hide_message(self) -> None:
        self._show(self.message, False)
        self._show(self.now, True)

    @property
    def live(self) -> bool:
        """Open and refreshing after every cell."""
        return not self.closed and not self._stopped and self._hook is not None

    def refresh(self, status: Optional[GpuStatus] = None) -> int:
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
            self.show_message(render_message("error", f"snapshot failed: {self.last_error}"))
            return self.updates - started
        self.last_status = status
        self.refreshes += 1
        self._set(self.header, render_header(status, self._cell))
        self._render_devices(status)
        self._set(self.now, render_now(status))
        for name, toggle in self.toggles.items():
            shown = self.is_open(name)
            self._set(
                toggle, (OPEN if shown else SHUT) + section_label(name, status), "description"
            )
            if shown:  # a closed section is drawn when it opens
                self._render_section(name, status)
        return self.updates - started

    def _full_snapshot(self) -> GpuStatus:
        status = self._snapshot(self.shell)
        seconds = float(getattr(status, "duration_ms", 0.0) or 0.0) / 1000.0
        self._scan = _Scan(_clock(), seconds, status)
        return status

    def _cell_snapshot(self) -> GpuStatus:
        """The snapshot after a cell: a full one, unless the last full one was slow and
        recent; then everything but the leftovers is new, and they say how old they are."""
        scan = self._scan
        if (
            scan is None
            or self._snapshot is not _take_status
            or scan.status.leftovers is None
            or scan.seconds <= ALWAYS_SCAN_S
            or _clock() - scan.done_at >= scan.seconds / SCAN_SHARE
        ):
            return self._full_snapshot()
        seconds, scanned = scan.seconds, scan.status
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
            leftover_groups=scanned.leftover_groups,
            leftover_groups_count=scanned.leftover_groups_count,
            leftovers_note=note,
        )

    def _pre_run_cell(self, info: Any = None) -> None:
        """Say which cell runs, and that a click now waits for it: the kernel reads a
        button's click only once the running cell ends."""
        if self.closed or self.last_status is None:
            return
        with contextlib.suppress(Exception):  # a callback must never raise into IPython
            cell = getattr(self.shell, "execution_count", None)
            since = time.strftime("%H:%M:%S")
            running = f"cell [{cell}] running since {since} · {QUEUED}"
            self._set(self.header, render_header(self.last_status, self._cell, running))

    def _post_run_cell(self, result: Any = None) -> None:
        if self.closed:
            self.detach()
            return
        try:
            count = getattr(result, "execution_count", None)
            if count is not None:
                self._cell = count
            self.hide_message()
            try:
                status = self._cell_snapshot()
            except Exception as error:
                self.last_error = f"{type(error).__name__}: {error}"
                self.show_message(render_message("error", f"snapshot failed: {self.last_error}"))
                return
            self.refresh(status)
        except Exception as error:  # a callback must never raise into IPython
            self.last_error = f"{type(error).__name__}: {error}"
            with contextlib.suppress(Exception):
                self.show_message(render_message("error", f"refresh failed: {self.last_error}"))

    def attach(
        self, shell: Optional[InteractiveShell] = None, registration: Optional[Registration] = None
    ) -> None:
        """Refresh after every cell of `shell`: through the extension's `registration`
        when given (so `%unload_ext` stops it), else directly on the shell's events."""
        self.detach()
        if shell is not None:
            self.shell = shell
        if self.shell is None or self.closed:
            return
        self._stopped = False
        for event, callback in self._callbacks():
            if registration is not None:
                registration.register_event(event, callback)
            else:
                self.shell.events.register(event, callback)
        self._hook = _Hook(self.shell, registration)
        for button in self.buttons:
            button.disabled = False

    def detach(self) -> None:
        """Stop refreshing after cells."""
        hook, self._hook = self._hook, None
        if hook is None:
            return
        for event, callback in self._callbacks():
            if hook.registration is not None:
                hook.registration.unregister_event(event, callback)
            else:
                with contextlib.suppress(ValueError):  # already removed by someone else
                    hook.shell.events.unregister(event, callback)

    def _callbacks(self) -> tuple[tuple[str, Callable[..., None]], ...]:
        return (("pre_run_cell", self._pre_run_cell), ("post_run_cell", self._post_run_cell))

    @property
    def registration(self) -> Optional[Registration]:
        return self._hook.registration if self._hook is not None else None
