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
    render_footer,
    render_header,
    render_leftovers,
    render_message,
    render_notes,
)

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
HISTORY_CELLS = 30  # the cells the history chart shows


def _take_status(shell: Optional[InteractiveShell], leftovers: bool = True) -> GpuStatus:
    from colab_gpu_guard.status import gpu_status

    return gpu_status(
        leftovers=leftovers,
        history=True,
        namespace=notebook_refs.namespace_to_scan(shell),
        top=TOP_LEFTOVERS,  # the snapshot carries the totals; only the shown ones as entries
        history_limit=HISTORY_CELLS,
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
        super().__init__(**kwargs)

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
            leftovers_note=note,
        )

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
        if registration is not None:
            registration.register_event("post_run_cell", self._post_run_cell)
            self._hook = _Hook(self.shell, registration)
        else:
            self.shell.events.register("post_run_cell", self._post_run_cell)
            self._hook = _Hook(self.shell, None)
        for button in self.buttons:
            button.disabled = False

    def detach(self) -> None:
        """Stop refreshing after cells."""
        hook, self._hook = self._hook, None
        if hook is None:
            return
        if hook.registration is not None:
            hook.registration.unregister_event("post_run_cell", self._post_run_cell)
        else:
            with contextlib.suppress(ValueError):  # already removed by someone else
                hook.shell.events.unregister("post_run_cell", self._post_run_cell)

    @property
    def registration(self) -> Optional[Registration]:
        return self._hook.registration if self._hook is not None else None
