"""The live thread of one panel (``%gpu_panel --live``): it sleeps between cells and, while a
cell runs, calls its tick every SECONDS; ticks failing in a row stop it."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, NamedTuple, Optional

FAILURES_TO_STOP = 3  # ticks failing in a row stop the live updates (said after the cell)
JOIN_S = 2.0  # a tick blocked in NVML longer than this is left behind (a daemon thread)


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
            # boundary: a tick reads NVML and writes the front end's widgets; whatever it
            # raises is counted and said after the cell, never a traceback from our thread
            try:
                self._tick()
            except Exception as error:
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
