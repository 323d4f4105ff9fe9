"""NVML used memory after each cell, read in a daemon thread so the cell hooks never wait
for NVML (a call can take milliseconds); the tracker's history shows it a moment later."""

from __future__ import annotations

import queue
import threading
import time
from typing import Optional


class NvmlSampler:
    """Reads NVML used memory after a cell in a daemon thread, off the hot path. `call` is
    the NVML memory call the readings came from ("v2" or "v1"; one per process)."""

    def __init__(self, sink: dict) -> None:
        self.sink = sink
        self.available: Optional[bool] = None  # None: not known yet
        self.call: Optional[str] = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None

    def request(self, seq: int) -> None:
        if self._thread is None:
            from . import nvml  # once: %load_ext does not pay for NVML

            if nvml.known_unavailable():
                # A thread woken after every cell only to find no NVML would take the GIL
                # from the cells it is meant to stay out of the way of.
                self.available = False
                return
            self._thread = threading.Thread(
                target=self._run, name="colab_gpu_guard-nvml", daemon=True
            )
            self._thread.start()
        self._queue.put(seq)

    def _run(self) -> None:
        from . import nvml

        while True:
            seq = self._queue.get()
            if seq is None:
                return
            used = nvml.used_memory()
            if used is None:
                self.available = False
                return
            self.available = True
            self.call = used.call
            self.sink[seq] = used.total

    def wait_idle(self, timeout: float = 2.0) -> None:
        """For tests and readers: let queued readings land (bounded)."""
        deadline = time.monotonic() + timeout
        while not self._queue.empty() and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.002)

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread = None
