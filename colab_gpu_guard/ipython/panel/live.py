"""Live GPU lines: ``%gpu_panel --live SECONDS`` keeps the panel's header and GPU lines
current while a long cell runs, where the front end renders widget updates sent from a
thread (JupyterLab, Notebook, VS Code; not Colab).

One daemon thread per panel (`LiveTicker`). Between cells it sleeps on a condition (the
``post_run_cell`` refresh covers that time); while a cell runs it wakes every SECONDS, takes
the cheap snapshot (NVML, the allocator's counters, host RAM: no leftovers scan, no gc walk,
no CUDA synchronisation) and writes the header and the GPU lines whose HTML changed. Its
writes and the main thread's refreshes hold the panel's one write lock, so they never
interleave, and a tick that finds the cell ended writes nothing.

ipykernel (6 and 7) hands a message sent from any thread to its IOPub thread's queue
(``IOPubThread.schedule``), and the comm's parent stays the running cell's request, so the
updates leave the kernel while the cell runs; ipykernel 7.0.x lost them (fixed in 7.1,
ipython/ipykernel#1451).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, Optional

from colab_gpu_guard.status.panel_html import render_header, render_message

from .refresh import PanelRefresh

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.status import GpuStatus

MIN_SECONDS, MAX_SECONDS = 0.5, 60.0
FORM = "--live SECONDS (a number from 0.5 to 60), or --live off"
OFF_WORDS = ("off", "0")
FAILURES_TO_STOP = 3  # ticks failing in a row stop the live updates (said after the cell)
JOIN_S = 2.0  # a tick blocked in NVML longer than this is left behind (a daemon thread)

# Colab's front end draws a widget update sent from a thread only once another cell syncs
# that widget (googlecolab/colabtools#3373, open); a Colab front end on a local runtime
# cannot be told apart from here.
COLAB = (
    "Colab does not show widget updates sent while a cell runs, so the panel refreshes "
    "after each cell (no live updates started)"
)
NO_KERNEL = (
    "no notebook front end here (IPython without a kernel), so nothing would show live "
    "updates: the panel refreshes after each cell (no live updates started)"
)
BROKEN_KERNEL = (
    "ipykernel {version} drops widget updates sent from a thread (fixed in 7.1), so the "
    "panel refreshes after each cell (no live updates started)"
)


def parse_seconds(text: str) -> Optional[float]:
    """The ``--live`` value: seconds between updates, or None for off. Raises ValueError
    naming the valid form."""
    word = text.strip().lower()
    if word in OFF_WORDS:
        return None
    try:
        seconds = float(word)
    except ValueError:
        raise ValueError(f"--live takes seconds or off, not {text!r}: {FORM}") from None
    if seconds == 0:
        return None
    if not math.isfinite(seconds) or not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise ValueError(f"--live {text} is out of range: {FORM}")
    return seconds


def why_not_live(shell: Optional[InteractiveShell]) -> Optional[str]:
    """Why live updates would not reach the screen here, or None when they would."""
    from colab_gpu_guard.status.collect import detect_runtime

    if detect_runtime() == "Colab":
        return COLAB
    if getattr(shell, "kernel", None) is None:  # a terminal: only a kernel shell has one
        return NO_KERNEL
    ipykernel = sys.modules.get("ipykernel")
    version = str(getattr(ipykernel, "__version__", ""))
    if version.startswith("7.0."):
        return BROKEN_KERNEL.format(version=version)
    return None


def live_status() -> GpuStatus:
    """The cheap snapshot a tick takes: NVML's devices and processes (for this kernel's
    share), the allocator's counters and host RAM; no leftovers, no history, no probe."""
    from colab_gpu_guard.status import gpu_status

    return gpu_status(leftovers=False, history=False)


class TickStats(NamedTuple):
    """What the live thread did: ticks run, the thread CPU seconds they used, failures."""

    ticks: int
    cpu_seconds: float
    failures: int
    last_error: Optional[str]


class LiveTicker:
    """The live thread of one panel: `tick()` every `seconds` while a cell runs."""

    def __init__(self, tick: Callable[[], Any], seconds: float, name: str) -> None:
        self._tick = tick
        self._seconds = seconds
        self._changed = threading.Condition()
        self._cell = False
        self._stopped = False
        self.ticks = 0
        self.cpu_seconds = 0.0
        self.failures = 0  # in a row
        self.last_error: Optional[str] = None
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    @property
    def seconds(self) -> float:
        return self._seconds

    @seconds.setter
    def seconds(self, value: float) -> None:
        with self._changed:
            self._seconds = value
            self._changed.notify_all()

    @property
    def alive(self) -> bool:
        return self.thread.is_alive() and not self._stopped

    def stats(self) -> TickStats:
        return TickStats(self.ticks, self.cpu_seconds, self.failures, self.last_error)

    def cell_started(self) -> None:
        with self._changed:
            self._cell = True
            self._changed.notify_all()

    def cell_ended(self) -> None:
        with self._changed:
            self._cell = False
            self._changed.notify_all()

    def stop(self, timeout: float = JOIN_S) -> bool:
        """Stop the thread and wait for it; True once it has ended."""
        with self._changed:
            self._stopped = True
            self._changed.notify_all()
        if self.thread is not threading.current_thread():
            self.thread.join(timeout)
        return not self.thread.is_alive()

    def _run(self) -> None:
        while self._wait_for_tick():
            started = time.thread_time()
            try:
                self._tick()
            except Exception as error:  # never a traceback from our thread
                self.failures += 1
                self.last_error = f"{type(error).__name__}: {error}"
                if self.failures >= FAILURES_TO_STOP:
                    with self._changed:
                        self._stopped = True
            else:
                self.failures = 0
            self.ticks += 1
            self.cpu_seconds += time.thread_time() - started

    def _wait_for_tick(self) -> bool:
        """Sleep until a cell has run `seconds` since the last tick (or since it started);
        False once stopped."""
        with self._changed:
            while True:
                while not self._stopped and not self._cell:
                    self._changed.wait()
                if self._stopped:
                    return False
                since = time.monotonic()
                while not self._stopped and self._cell:
                    left = since + self._seconds - time.monotonic()
                    if left <= 0:
                        return True
                    self._changed.wait(left)
                if self._stopped:
                    return False


class PanelLive(PanelRefresh):
    """The panel's live GPU lines: `live_every(seconds)` starts (or retimes) its thread,
    `live_every(None)` stops it; `live_seconds` says which (None: off)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._ticker: Optional[LiveTicker] = None
        self._live_snapshot: Callable[[], GpuStatus] = live_status
        super().__init__(*args, **kwargs)

    @property
    def live_seconds(self) -> Optional[float]:
        ticker = self._ticker
        return ticker.seconds if ticker is not None and ticker.alive else None

    @property
    def live_thread(self) -> Optional[threading.Thread]:
        return self._ticker.thread if self._ticker is not None else None

    def live_stats(self) -> Optional[TickStats]:
        return self._ticker.stats() if self._ticker is not None else None

    def live_every(self, seconds: Optional[float], this_cell: Optional[int] = None) -> None:
        """Update the header and GPU lines every `seconds` while a cell runs (between
        MIN_SECONDS and MAX_SECONDS); None stops that. The caller checks `why_not_live`.
        `this_cell`: the cell calling this, when the panel may not have seen it begin (it
        was opened in it): the rest of that cell runs live too."""
        if seconds is None:
            self.stop_live()
            return
        if not MIN_SECONDS <= seconds <= MAX_SECONDS:
            raise ValueError(f"live updates every {seconds!r} s: {FORM}")
        if self.closed or self._stopped:  # no cells seen any more: nothing to follow
            return
        ticker = self._ticker
        if ticker is not None and ticker.alive:
            ticker.seconds = seconds
            return
        self.stop_live()
        if self._running is None and this_cell is not None:
            self._cell_began(this_cell)
        self._ticker = LiveTicker(self._live_tick, seconds, "colab_gpu_guard panel live")
        if self._running is not None:  # started inside a cell: live from now on
            self._ticker.cell_started()

    def stop_live(self) -> None:
        """Stop the live thread and wait for it (a tick stuck in NVML is left behind)."""
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.stop()

    def _cell_began(self, cell: Optional[int]) -> None:
        super()._cell_began(cell)
        if self._ticker is not None:
            self._ticker.cell_started()

    def _post_run_cell(self, result: Any = None) -> None:
        ticker = self._ticker
        if ticker is not None:
            ticker.cell_ended()
        super()._post_run_cell(result)
        if ticker is not None and not ticker.alive and ticker is self._ticker:
            self._ticker = None  # it stopped itself: its ticks kept failing
            self.show_message(render_message("error", f"live updates stopped: {ticker.last_error}"))

    def _live_tick(self) -> None:
        """One update while a cell runs: the cheap snapshot, then the header and the GPU
        lines that changed; nothing once the cell has ended or the panel closed."""
        running = self._running
        if running is None or self.closed:
            return
        status = self._live_snapshot()
        at = time.strftime("%H:%M:%S", time.localtime(status.taken_at))
        with self._writing:
            if self._running is not running or self.closed:
                return
            header = render_header(status, self._cell, self._running_text(running, at))
            self._set(self.header, header)
            self._render_devices(status)
