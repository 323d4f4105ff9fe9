"""Refreshing the panel: one snapshot per refresh, the cheap snapshot after a cell versus
the full one, and the ``pre_run_cell`` / ``post_run_cell`` hooks: while a cell runs the
header says so, and after it the panel refreshes. Every write to the panel's widgets holds
its write lock (`_writing`): the live thread (live.py) and a click handled in another thread
(a front end that sends comms to a kernel subshell) write too."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

import IPython

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
HISTORY_CELLS = 30  # the cells the history chart shows
QUEUED = "a click now is queued: runs when the cell ends"


# IPython 9.8 counts a cell before its pre_run_cell event (ipython/ipython#15088): from
# then on execution_count is, while a cell runs, the number the next cell will get.
_COUNTS_FIRST = IPython.version_info >= (9, 8)


def running_cell(shell: Optional[InteractiveShell]) -> Optional[int]:
    """The number of the cell whose code runs now in `shell`; None between cells (and for
    a cell not stored in the history). Its result is the display hook's while it runs."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    count = getattr(result, "execution_count", None)
    return count if isinstance(count, int) else None


def _starting_cell(shell: Optional[InteractiveShell]) -> Optional[int]:
    """The number of the cell about to run, in its pre_run_cell event."""
    count = getattr(shell, "execution_count", None)
    if not isinstance(count, int):
        return None
    return count - 1 if _COUNTS_FIRST else count


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


class Running(NamedTuple):
    """The cell running now: its number, since when (HH:MM:SS), the thread running it."""

    cell: Optional[int]
    since: str
    thread: int


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
        self._writing = threading.RLock()
        self._running: Optional[Running] = None  # the cell running now, if any
        super().__init__(**kwargs)
        running = running_cell(shell)
        count = getattr(shell, "execution_count", None)
        if running is not None:  # made in a cell: the last one that ended is the one before
            self._cell = running - 1 or None
        elif isinstance(count, int):  # between cells: the next one gets `count`
            self._cell = count - 1 or None
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
        with self._writing:
            self._toggle(name)

    def _toggle(self, name: str) -> None:
        shown = self.is_open(name)
        toggle = self.toggles[name]
        words = section_label(name, self.last_status)
        self._set(toggle, (OPEN if shown else SHUT) + words, "description")
        if shown and self.last_status is not None:
            self._render_section(name, self.last_status)
        self._show(self.sections[name], shown)

    def show_message(self, html: str) -> None:
        """Show an action's outcome in place of the line of what matters now."""
        with self._writing:
            self._set(self.message, html)
            self._show(self.message, True)
            self._show(self.now, False)

    def hide_message(self) -> None:
        with self._writing:
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
        with self._writing:
            self.last_status = status
            self.refreshes += 1
            running = self._running
            self._set(
                self.header,
                render_header(status, self._cell, self._running_text(running) if running else ""),
            )
            self._render_devices(status)
            self._set(self.now, render_now(status))
            for name, toggle in self.toggles.items():
                shown = self.is_open(name)
                words = (OPEN if shown else SHUT) + section_label(name, status)
                self._set(toggle, words, "description")
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
        fresh = _take_status(self.shell, leftovers=False)
        # what the reused scan said of its leftovers (incomplete, graphs not measured)
        kept = [note for note in scanned.notes if note.startswith("leftovers")]
        return dataclasses.replace(
            fresh,
            notes=tuple(fresh.notes) + tuple(note for note in kept if note not in fresh.notes),
            leftovers=scanned.leftovers,
            leftovers_count=scanned.leftovers_count,
            leftovers_bytes=scanned.leftovers_bytes,
            leftovers_freeable_bytes=scanned.leftovers_freeable_bytes,
            leftover_groups=scanned.leftover_groups,
            leftover_groups_count=scanned.leftover_groups_count,
            leftovers_note=note,
        )

    def _pre_run_cell(self, info: Any = None) -> None:
        with contextlib.suppress(Exception):  # a callback must never raise into IPython
            stored = getattr(info, "store_history", True)
            self._cell_began(_starting_cell(self.shell) if stored else None)

    def _cell_began(self, cell: Optional[int]) -> None:
        """Say which cell runs, and that a click now waits for it: the kernel reads a
        button's click once the running cell ends, or, read in another thread while it
        runs, the panel keeps it until then (actions.py)."""
        running = Running(cell, time.strftime("%H:%M:%S"), threading.get_ident())
        self._running = running
        if self.closed or self.last_status is None:
            return
        with self._writing:
            text = self._running_text(running)
            self._set(self.header, render_header(self.last_status, self._cell, text))

    def _running_text(self, running: Running, live_at: str = "") -> str:
        live = f" · GPU lines live, {live_at}" if live_at else ""
        cell = "a cell" if running.cell is None else f"cell [{running.cell}]"
        return f"{cell} running since {running.since}{live} · {QUEUED}"

    def _post_run_cell(self, result: Any = None) -> None:
        self._running = None
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
        finally:
            self._rebase_tracker()

    def _rebase_tracker(self) -> None:
        """What the refresh allocated is the panel's, not the next cell's."""
        from colab_gpu_guard.cells import tracker

        with contextlib.suppress(Exception):
            recorder = tracker.active_tracker(self.shell)
            if recorder is not None:
                recorder.rebase()

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
