"""Refreshing the panel: one snapshot per refresh (after a cell, the cheap one when the
last full one was slow and recent), drawn by the view; while a cell runs, which one."""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional, Sequence

import IPython

from colab_gpu_guard import notebook_refs
from colab_gpu_guard.status.panel_html import TOP_LEFTOVERS, render_message
from colab_gpu_guard.status.snapshot import SCANNED_FIELDS

from .view import HISTORY_CELLS, PanelView

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.cells.tracker import CellMemory
    from colab_gpu_guard.status import GpuStatus

__all__ = ["HISTORY_CELLS", "SCAN_SHARE", "Refresher", "Running", "Taken", "running_cell"]

# After a cell, a snapshot that took this long or less is always taken again; a slower one
# (the leftovers scan of a namespace holding 10^5 arrays takes ~0.5 s) is repeated only once
# it would cost at most SCAN_SHARE of the time since the last one, and the shown leftovers
# say how old they are in between. The Refresh button always scans.
ALWAYS_SCAN_S = 0.05
SCAN_SHARE = 0.1
# A cell that changed nothing the scan looks at (no variable added, removed or rebound, no
# builtin container of the namespace grown or shrunk, no new output or traceback, CUDA
# allocated and host memory as they were) keeps the last scan's leftovers if that scan is
# at most UNCHANGED_S old: the panel's cost of a trivial cell is then its cheap snapshot.
UNCHANGED_S = 5.0
HOST_NOISE = 2**20  # a host memory change below this is the interpreter's own noise
# Such a cell ending under QUIET_S after the panel's last snapshot (cells run back to back,
# a loop of `run_cell`) takes none at all: the panel stays as drawn, its GPU lines at most
# that old (the History chart, when open, is drawn after every cell regardless).
QUIET_S = 1.0
_clock = time.monotonic  # tests move it
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


def starting_cell(shell: Optional[InteractiveShell]) -> Optional[int]:
    """The number of the cell about to run, in its pre_run_cell event."""
    count = getattr(shell, "execution_count", None)
    if not isinstance(count, int):
        return None
    return count - 1 if _COUNTS_FIRST else count


def _last_cell(shell: Optional[InteractiveShell]) -> Optional[int]:
    """The last cell that ended, for a panel made now."""
    running = running_cell(shell)
    if running is not None:  # made in a cell: the last one that ended is the one before
        return running - 1 or None
    count = getattr(shell, "execution_count", None)
    if isinstance(count, int):  # between cells: the next one gets `count`
        return count - 1 or None
    return None


class Taken(NamedTuple):
    """A snapshot the panel took, and the notes its leftovers scan made (kept with the
    leftovers when they are shown again after a cell that does not scan)."""

    status: GpuStatus
    scan_notes: tuple[str, ...] = ()


def _take_status(shell: Optional[InteractiveShell], leftovers: bool = True) -> Taken:
    """The panel's snapshot: NVML, torch, the host and the per-cell history, and unless
    `leftovers` is False the leftovers scan, whose notes are kept apart as it makes them."""
    from colab_gpu_guard.status import collect

    started = time.perf_counter()
    status = collect.gpu_status(
        leftovers=False,
        history=True,
        history_limit=HISTORY_CELLS + 1,  # one more: the host reading before the first
    )
    if not leftovers:
        return Taken(status)
    # the same scan gpu_status(leftovers=True) runs, its notes as a record of their own
    found = collect.leftovers_fields(notebook_refs.namespace_to_scan(shell), TOP_LEFTOVERS)
    scan_notes = tuple(found.pop("scan_notes", ()))
    notes = tuple(dict.fromkeys((*status.notes, *scan_notes)))
    found.setdefault("leftovers_note", None)
    status = dataclasses.replace(
        status, notes=notes, duration_ms=(time.perf_counter() - started) * 1000.0, **found
    )
    return Taken(status, scan_notes)


class _Scan(NamedTuple):
    """The last full snapshot: when it was done, how long it took, what it found, and the
    namespace as it was then (`namespace_print`)."""

    done_at: float
    seconds: float
    status: GpuStatus
    namespace: tuple
    scan_notes: tuple[str, ...]


_SIZED = frozenset((list, dict, set, tuple, frozenset, collections.deque))


_INPUTS = frozenset(("In", "_ih", "_dh", "_i", "_ii", "_iii"))


def _input_name(name: object) -> bool:
    """IPython's names for the cells' source text (In, _ih, _i, _ii, _iii, _i12) and the
    directory history (_dh): they grow every cell and hold no arrays."""
    return isinstance(name, str) and (
        name in _INPUTS or (name.startswith("_i") and name[2:].isdigit())
    )


# IPython's input names found so far and the other names found so far: IPython adds an
# `_iN` every cell, so a long session's namespace is mostly those (1,000 cells: 1,000
# names), and one set difference on the keys leaves them out at C speed
_INPUT_NAMES: set = set()
_OTHER_NAMES: set = set()
_NAMES_KEPT = 100_000  # forgotten past this many names (a namespace that churns)


def namespace_print(shell: Optional[InteractiveShell]) -> tuple:
    """What a leftovers scan starts from, cheaply: each variable's name, object and, for a
    builtin container, its length (``len`` of a builtin type calls no user code), and the
    last exception. Equal prints: the cell added, removed or rebound nothing there."""
    namespace = getattr(shell, "user_ns", None)
    if not isinstance(namespace, dict):
        return ()
    inputs, others = _INPUT_NAMES, _OTHER_NAMES
    if len(inputs) + len(others) > _NAMES_KEPT:
        inputs.clear()
        others.clear()
    sized, value_of = _SIZED, namespace.get
    items = []
    for name in namespace.keys() - inputs:
        if name not in others:  # a name not seen before
            if _input_name(name):
                inputs.add(name)
                continue
            others.add(name)
        value = value_of(name)
        items.append((name, id(value), len(value) if type(value) in sized else -1))
    # a set: the order of a set difference is no fact about the namespace
    return (
        frozenset(items),
        id(getattr(sys, "last_value", None)),
        id(getattr(sys, "last_traceback", None)),
    )


class Running(NamedTuple):
    """The cell running now: its number, since when (HH:MM:SS), the thread running it."""

    cell: Optional[int]
    since: str
    thread: int

    def text(self, live_at: str = "") -> str:
        """What the header says while it runs."""
        live = f" · GPU lines live, {live_at}" if live_at else ""
        cell = "a cell" if self.cell is None else f"cell [{self.cell}]"
        return f"{cell} running since {self.since}{live} · {QUEUED}"


class Refresher:
    """Takes the panel's snapshots and has the view draw them. ``snapshot(shell)`` takes
    a full one; ``refreshes`` counts refreshes, ``last_error`` is the last failure,
    ``cell`` the last cell that ended, ``running`` the cell running now."""

    def __init__(
        self,
        view: PanelView,
        shell: Optional[InteractiveShell],
        closed: Callable[[], bool],
        snapshot: Optional[Callable[..., Taken]] = None,
    ) -> None:
        self.view = view
        self.shell = shell
        self.closed = closed
        self.snapshot = snapshot or _take_status
        self.refreshes = 0
        self.last_error: Optional[str] = None
        self.cell = _last_cell(shell)
        self.running: Optional[Running] = None
        self._scan: Optional[_Scan] = None
        self.drawn_at = -float("inf")  # when a snapshot was last drawn (`_clock`)
        self.quiet = 0  # cells after which nothing was taken or drawn (`_quiet`)

    def refresh(self, status: Optional[GpuStatus] = None) -> int:
        """Take one snapshot (unless given one) and write the sections that changed.
        Returns how many widget values were written."""
        view = self.view
        if self.closed():
            return 0
        started = view.updates
        if status is None:
            try:
                status = self._full_snapshot()
            except Exception as error:  # boundary: NVML, frameworks, the user's objects
                self._say_failed("snapshot", error)
                return view.updates - started
        with view.lock:
            self.refreshes += 1
            self.drawn_at = _clock()
            running = self.running
            view.draw(status, self.cell, running.text() if running else "")
        return view.updates - started

    def _say_failed(self, what: str, error: Exception) -> None:
        self.last_error = f"{type(error).__name__}: {error}"
        self.view.show_message(render_message("error", f"{what} failed: {self.last_error}"))

    def _full_snapshot(self) -> GpuStatus:
        namespace = namespace_print(self.shell)
        status, scan_notes = self.snapshot(self.shell)
        self._scan = _Scan(_clock(), status.duration_ms / 1000.0, status, namespace, scan_notes)
        return status

    def _unchanged(self, scan: _Scan, history: Sequence[CellMemory]) -> bool:
        """The cell that just ended (the last of `history`) changed nothing the last scan
        looked at, and that scan is recent (`UNCHANGED_S`)."""
        if _clock() - scan.done_at > UNCHANGED_S or namespace_print(self.shell) != scan.namespace:
            return False
        last = history[-1] if history else None
        if last is None or last.cell != self.cell or last.delta != 0:
            return False
        if last.rss_after is None or last.rss_before is None:
            return False
        return abs(last.rss_after - last.rss_before) < HOST_NOISE

    def _quiet(self) -> bool:
        """After a cell that changed nothing, under `QUIET_S` after the last snapshot, with
        the History chart closed: nothing to take or draw."""
        from colab_gpu_guard.cells import tracker

        scan = self._scan
        if scan is None or self.snapshot is not _take_status or self.view.status is None:
            return False
        if _clock() - self.drawn_at > QUIET_S or self.view.is_open("History"):
            return False
        last, _count = tracker.history_tail(1, self.shell)
        return self._unchanged(scan, last)

    def cell_snapshot(self) -> GpuStatus:
        """The snapshot after a cell: a full one, unless the cell changed nothing the last
        scan looked at, or the last full one was slow and recent; then everything but the
        leftovers is new (a slow scan's say how old they are). Whether the cell changed
        anything is asked first, of the tracker's record of it and the namespace: a cell
        that did takes the full snapshot alone."""
        from colab_gpu_guard.cells import tracker

        scan = self._scan
        if scan is None or self.snapshot is not _take_status or scan.status.leftovers is None:
            return self._full_snapshot()
        slow = scan.seconds > ALWAYS_SCAN_S and _clock() - scan.done_at < scan.seconds / SCAN_SHARE
        note = scan.status.leftovers_note
        if slow:
            taken = time.strftime("%H:%M:%S", time.localtime(scan.status.taken_at))
            note = (
                f"as of {taken}: finding them took {scan.seconds * 1000:.0f} ms, so after a "
                f"cell it runs at most every {scan.seconds / SCAN_SHARE:.0f} s; Refresh finds "
                "them now"
            )
        elif not self._unchanged(scan, tracker.history_tail(1, self.shell)[0]):
            return self._full_snapshot()
        fresh = _take_status(self.shell, leftovers=False).status
        scanned = {name: getattr(scan.status, name) for name in SCANNED_FIELDS}
        # what the reused scan said of its leftovers (incomplete, graphs not measured)
        kept = tuple(note for note in scan.scan_notes if note not in fresh.notes)
        return dataclasses.replace(
            fresh, notes=tuple(fresh.notes) + kept, leftovers_note=note, **scanned
        )

    def cell_began(self, cell: Optional[int], say: bool = True) -> None:
        """Note which cell runs and, where `say` (the GPU lines are live), say so in the
        header, and that a click now waits for it: the kernel reads a button's click once
        the running cell ends, or, read in another thread while it runs, the panel keeps
        it until then (actions.py, which says so when it happens). Not live, a cell's start
        writes nothing: a short cell costs no widget message."""
        running = Running(cell, time.strftime("%H:%M:%S"), threading.get_ident())
        self.running = running
        status = self.view.status
        if not say or self.closed() or status is None:
            return
        with self.view.lock:
            self.view.draw_header(status, self.cell, running.text())

    def cell_ended(self, result: Any = None) -> None:
        """The refresh after a cell (`result` is IPython's ExecutionResult)."""
        self.running = None
        try:
            count = getattr(result, "execution_count", None)
            if count is not None:
                self.cell = count
            self.view.hide_message()
            if self._quiet():
                self.quiet += 1
                return
            try:
                status = self.cell_snapshot()
            except Exception as error:  # boundary: NVML, frameworks, the user's objects
                self._say_failed("snapshot", error)
                return
            self.refresh(status)
        except Exception as error:  # boundary: a callback must never raise into IPython
            with contextlib.suppress(Exception):  # the front end's widgets, as above
                self._say_failed("refresh", error)
        finally:
            self._rebase_tracker()

    def _rebase_tracker(self) -> None:
        """What the refresh allocated is the panel's, not the next cell's."""
        from colab_gpu_guard.cells import tracker

        recorder = tracker.active_tracker(self.shell)
        if recorder is not None:
            recorder.rebase()
