"""Live GPU lines: ``%gpu_panel --live SECONDS`` keeps the panel's header and GPU lines
current while a long cell runs, where the front end shows widget updates sent from a
thread (JupyterLab, Notebook, VS Code; not Colab)."""

from __future__ import annotations

import collections
import math
import sys
import threading
import time
from typing import TYPE_CHECKING, Optional

from colab_gpu_guard.status.chart import SPARK_POINTS, LiveReading, render_sparklines
from colab_gpu_guard.status.panel_html import render_message

from .ticker import LiveTicker, TickStats

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.status import GpuStatus

    from .refresh import Refresher
    from .view import PanelView

MIN_SECONDS, MAX_SECONDS = 0.5, 60.0
FORM = "--live SECONDS (a number from 0.5 to 60), or --live off"
OFF_WORDS = ("off", "0")
THREAD_NAME = "colab_gpu_guard panel live"

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
# ipykernel (6 and 7) hands a message sent from any thread to its IOPub thread's queue
# (``IOPubThread.schedule``), and the comm's parent stays the running cell's request, so
# the updates leave the kernel while the cell runs; 7.0.x lost them (fixed in 7.1,
# ipython/ipykernel#1451).
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
    share), the allocator's counters and host RAM; no leftovers scan, no history, no gc
    walk, no CUDA synchronisation."""
    from colab_gpu_guard.status import gpu_status

    return gpu_status(leftovers=False, history=False)


class LiveLines:
    """The panel's live GPU lines: `start(seconds)` starts (or retimes) its thread,
    `stop()` ends it. ``snapshot()`` is the cheap snapshot a tick takes."""

    def __init__(self, view: PanelView, refresher: Refresher) -> None:
        self.view = view
        self.refresher = refresher
        self.snapshot = live_status
        self._ticker: Optional[LiveTicker] = None
        # each GPU's readings while live (by NVML index), for its sparklines
        self.readings: dict[int, collections.deque[LiveReading]] = {}

    @property
    def seconds(self) -> Optional[float]:
        """Seconds between updates; None when off."""
        ticker = self._ticker
        return ticker.seconds if ticker is not None and ticker.alive else None

    @property
    def thread(self) -> Optional[threading.Thread]:
        return self._ticker.thread if self._ticker is not None else None

    def stats(self) -> Optional[TickStats]:
        return self._ticker.stats() if self._ticker is not None else None

    def every(self, seconds: Optional[float], this_cell: Optional[int], following: bool) -> None:
        """Update every `seconds` while a cell runs (None: stop), if the panel is
        `following` cells; `this_cell`: the cell calling this, when the panel may not have
        seen it begin (it was opened in it)."""
        if seconds is None:
            self.stop()
            return
        if not MIN_SECONDS <= seconds <= MAX_SECONDS:
            raise ValueError(f"live updates every {seconds!r} s: {FORM}")
        if not following:  # stopped or closed: no cells to follow
            return
        ticker = self._ticker
        if ticker is not None and ticker.alive:
            ticker.seconds = seconds
            return
        self.stop()
        self.readings = {}
        refresher = self.refresher
        if refresher.running is None and this_cell is not None:
            refresher.cell_began(this_cell)
        self._ticker = LiveTicker(self.tick, seconds, THREAD_NAME)
        if refresher.running is not None:  # started inside a cell: live from now on
            self._ticker.cell_started()

    def stop(self) -> None:
        """Stop the live thread and wait for it (a tick stuck in NVML is left behind)."""
        ticker, self._ticker = self._ticker, None
        if ticker is not None:
            ticker.stop()

    def cell_started(self) -> None:
        if self._ticker is not None:
            self._ticker.cell_started()

    def cell_ended(self) -> None:
        if self._ticker is not None:
            self._ticker.cell_ended()

    def say_if_stopped(self) -> None:
        """After a cell: a thread that stopped itself (its ticks kept failing) says why."""
        ticker = self._ticker
        if ticker is not None and not ticker.alive:
            self._ticker = None
            error = render_message("error", f"live updates stopped: {ticker.last_error}")
            self.view.show_message(error)

    def tick(self) -> None:
        """One update while a cell runs: the cheap snapshot, then the header and the GPU
        lines that changed. It holds the view's lock as the refreshes do, and writes
        nothing once the cell has ended or the panel closed."""
        refresher = self.refresher
        running = refresher.running
        if running is None or refresher.closed():
            return
        status = self.snapshot()
        at = time.strftime("%H:%M:%S", time.localtime(status.taken_at))
        seconds = self.seconds or MIN_SECONDS
        extras = {}
        for device in status.nvml.devices:
            readings = self.readings.setdefault(
                device.index, collections.deque(maxlen=SPARK_POINTS)
            )
            readings.append(
                LiveReading(device.memory_used, device.memory_total, device.utilization_gpu)
            )
            extras[device.index] = render_sparklines(list(readings), seconds)
        with self.view.lock:
            if refresher.running is not running or refresher.closed():
                return
            self.view.line_extras = extras
            self.view.draw_lines(status, refresher.cell, running.text(at))
