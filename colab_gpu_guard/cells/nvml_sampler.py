"""NVML used memory after each cell, read in a daemon thread so the cell hooks never wait
for NVML (a call can take milliseconds); the tracker's history shows it a moment later.
After a cell in which torch held no CUDA memory it also reads what NVML charges this
kernel's PID (CuPy, JAX, TensorFlow, or CUDA without torch): the per-cell chart's
"NVML: this process on the GPU"."""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, Callable, Optional


class NvmlSampler:
    """Reads NVML used memory after a cell in a daemon thread, off the hot path. `call` is
    the NVML memory call the readings came from ("v2" or "v1"; one per process).
    `sink[seq]`: every GPU's used bytes; `process_sink[seq]`, for the cells asked for it:
    the bytes NVML charges this PID (0: not listed; None: NVML cannot say, or the next cell
    started before it was read - `current(seq)` says whether none has - so a cell's figure
    is never another cell's)."""

    def __init__(
        self,
        sink: dict,
        process_sink: Optional[dict] = None,
        current: Optional[Callable[[int], bool]] = None,
    ) -> None:
        self.sink = sink
        self.process_sink = process_sink
        self.current = current or (lambda seq: True)
        self.available: Optional[bool] = None  # None: not known yet
        self.call: Optional[str] = None
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: Optional[threading.Thread] = None
        self._asked = self._answered = 0  # readings requested / stored (wait_idle)

    def request(self, seq: int, process: bool = False) -> None:
        """Read after cell `seq`; `process`: also what NVML charges this PID."""
        if self._thread is None:
            from .. import nvml  # once: %load_ext does not pay for NVML

            if nvml.known_unavailable():
                # A thread woken after every cell only to find no NVML would take the GIL
                # from the cells it is meant to stay out of the way of.
                self.available = False
                return
            self._thread = threading.Thread(
                target=self._run, name="colab_gpu_guard-nvml", daemon=True
            )
            self._thread.start()
        self._asked += 1
        self._queue.put((seq, process))

    def _run(self) -> None:
        from .. import nvml

        pid = os.getpid()
        while True:
            item = self._queue.get()
            if item is None:
                return
            seq, process = item
            used = nvml.used_memory()
            if used is None:
                self.available = False
                return
            self.available = True
            self.call = used.call
            if process and self.process_sink is not None:
                self.process_sink[seq] = self._process_used(nvml, pid, seq)
            self.sink[seq] = used.total
            self._answered += 1

    def _process_used(self, nvml: Any, pid: int, seq: int) -> Optional[int]:
        """NVML's figure for `pid` after cell `seq`; None if another cell began meanwhile."""
        if not self.current(seq):
            return None
        try:
            used = nvml.used_by_process(pid)
        except Exception:  # an answer of a shape we did not expect: never a thread traceback
            return None
        return used if self.current(seq) else None

    def wait_idle(self, timeout: float = 2.0) -> None:
        """For tests and readers: let requested readings land (bounded)."""
        deadline = time.monotonic() + timeout
        thread = self._thread
        while (
            self._answered < self._asked
            and thread is not None
            and thread.is_alive()
            and time.monotonic() < deadline
        ):
            time.sleep(0.001)

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread = None
