"""Rerun leaks: does a cell that ran before keep memory again, run after run?

A cell's effect is what it kept: memory after it minus memory before *it*, so what other
cells allocated in between is never charged to it. A rerun is flagged only when this run
kept a significant amount and the previous run of the same source did too: its earlier
objects are still held somewhere (``losses.append(loss)``), where a cell that rebinds its
names (``big = torch.ones(...)``) keeps nothing on a rerun.

With CUDA initialised the measure is torch's allocated bytes (exact: any growth counts).
Without CUDA it is host memory: the resident set size must have grown by more than
``RSS_NOISE_FLOOR`` (8 MiB) during the cell, and where glibc's ``mallinfo2`` is available
the bytes malloc has in use must have grown during the cell by as much too (RSS alone also
grows when a freed block stays resident). ``mallinfo2`` walks malloc's free lists, so it is
read only around a rerun of a cell that kept memory last time. Runs on the per-cell hot
path: no object walks, no CUDA calls.
"""

from __future__ import annotations

from typing import Optional

from .host_memory import MallocInUse

RSS_NOISE_FLOOR = 8 * 2**20
CUDA_LEAK_METRIC = "cuda allocated"
HOST_LEAK_METRIC = "host memory"


class RerunLeakCheck:
    """Remembers what each cell source kept on its last run and judges the next run of it."""

    def __init__(self, maxlen: int, rss_noise_floor: int = RSS_NOISE_FLOOR) -> None:
        self.maxlen = maxlen
        self.rss_noise_floor = rss_noise_floor
        # source -> (metric, bytes its last run kept, its cell)
        self._last_by_source: dict[str, tuple] = {}
        self._malloc = MallocInUse()

    def malloc_before(self, source: Optional[str]) -> Optional[int]:
        """malloc's in-use bytes before a cell, read only when the cell is a rerun of one
        that kept host memory (so that what this run keeps can be confirmed exactly)."""
        previous = self._last_by_source.get(source) if source is not None else None
        if previous is None or previous[0] != HOST_LEAK_METRIC:
            return None
        return self._malloc.read() if previous[1] > self.rss_noise_floor else None

    def judge(
        self,
        source: Optional[str],
        devices: int,
        allocated_before: int,
        allocated: int,
        rss_before: Optional[int],
        rss: Optional[int],
        malloc_before: Optional[int],
        cell: Optional[int],
    ) -> tuple[bool, int, str, Optional[int]]:
        """(leaked, bytes this run kept, which measure, the cell this reruns) for a cell that
        went from `allocated_before` to `allocated` CUDA bytes on `devices` devices, and
        from `rss_before` to `rss` resident bytes."""
        if source is None or not (devices or rss is not None):
            return False, 0, "", None
        previous = self._last_by_source.pop(source, None)
        if devices:
            metric, kept, floor = CUDA_LEAK_METRIC, max(0, allocated - allocated_before), 0
        else:
            metric, floor = HOST_LEAK_METRIC, self.rss_noise_floor
            kept = self._host_kept(rss_before, rss, malloc_before)
        same = previous is not None and previous[0] == metric
        rerun_of = previous[2] if same else None
        self._last_by_source[source] = (metric, kept, cell)
        if len(self._last_by_source) > 4 * self.maxlen:
            for stale in list(self._last_by_source)[: 2 * self.maxlen]:
                del self._last_by_source[stale]
        if same and kept > floor and previous[1] > floor:
            return True, kept, metric, rerun_of
        return False, 0, "", rerun_of

    def _host_kept(
        self, rss_before: Optional[int], rss: Optional[int], malloc_before: Optional[int]
    ) -> int:
        """Resident bytes the cell added; where malloc's in-use bytes were read before it,
        what malloc kept (a freed block that stays resident is not kept)."""
        if rss is None or rss_before is None:
            return 0
        kept = max(0, rss - rss_before)
        if malloc_before is not None and kept > self.rss_noise_floor:
            in_use = self._malloc.read()
            if in_use is not None:
                kept = max(0, in_use - malloc_before)
        return kept

    def clear(self) -> None:
        self._last_by_source.clear()
