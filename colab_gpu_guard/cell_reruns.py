"""Rerun leaks: does a cell that ran before end with more memory than its last run did?

With CUDA initialised the measure is torch's allocated bytes (exact; any growth counts).
Without CUDA it is host memory: the resident set size must have grown by more than
``RSS_NOISE_FLOOR`` (8 MiB) since the previous run, and where glibc's ``mallinfo2`` is
available the bytes malloc has in use must have grown by as much too (RSS alone also grows
when a freed block stays resident, e.g. when a big tensor is rebound). ``mallinfo2`` walks
malloc's free lists, so it is read only after a cell whose resident memory grew by more than
the floor. Runs on the per-cell hot path: no object walks, no CUDA calls.
"""

from __future__ import annotations

from typing import Optional

from .host_memory import MallocInUse

RSS_NOISE_FLOOR = 8 * 2**20
CUDA_LEAK_METRIC = "cuda allocated"
HOST_LEAK_METRIC = "host memory"


class RerunLeakCheck:
    """Remembers how each cell source ended its last run and judges the next run of it."""

    def __init__(self, maxlen: int, rss_noise_floor: int = RSS_NOISE_FLOOR) -> None:
        self.maxlen = maxlen
        self.rss_noise_floor = rss_noise_floor
        # source -> (metric, amount, cell, malloc in use)
        self._last_by_source: dict[str, tuple] = {}
        self._malloc = MallocInUse()

    def judge(
        self,
        source: Optional[str],
        devices: int,
        allocated: int,
        rss: Optional[int],
        rss_before: Optional[int],
        cell: Optional[int],
    ) -> tuple[bool, int, str, Optional[int]]:
        """(leaked, leak bytes, which measure grew, the cell this reruns) for a cell that
        ended with `allocated` CUDA bytes on `devices` devices and resident set `rss`."""
        if source is None or not (devices or rss is not None):
            return False, 0, "", None
        previous = self._last_by_source.pop(source, None)
        if devices:
            entry, leak_bytes = self._cuda_leak(previous, allocated, cell)
        else:
            entry, leak_bytes = self._host_leak(previous, rss, rss_before, cell)
        rerun_of = previous[2] if previous is not None and previous[0] == entry[0] else None
        self._last_by_source[source] = entry
        if len(self._last_by_source) > 4 * self.maxlen:
            for stale in list(self._last_by_source)[: 2 * self.maxlen]:
                del self._last_by_source[stale]
        if leak_bytes:
            return True, leak_bytes, entry[0], rerun_of
        return False, 0, "", rerun_of

    @staticmethod
    def _cuda_leak(previous: Optional[tuple], allocated: int, cell) -> tuple[tuple, int]:
        """torch's allocated bytes are exact: any growth over the previous run counts."""
        growth = 0
        if previous is not None and previous[0] == CUDA_LEAK_METRIC:
            growth = max(0, allocated - previous[1])
        return (CUDA_LEAK_METRIC, allocated, cell, None), growth

    def _host_leak(
        self, previous: Optional[tuple], rss: int, rss_before: Optional[int], cell
    ) -> tuple[tuple, int]:
        """Host memory: RSS growth over the previous run beyond the noise floor, confirmed
        by malloc's in-use bytes when both runs have that figure (RSS alone also grows when
        a freed block stays resident, e.g. rebinding a big tensor)."""
        floor = self.rss_noise_floor
        same = previous is not None and previous[0] == HOST_LEAK_METRIC
        grew_in_cell = rss_before is not None and rss - rss_before > floor
        grew_since = same and rss - previous[1] > floor
        in_use = self._malloc.read() if (grew_in_cell or grew_since) else None
        growth = 0
        if grew_since:
            if in_use is not None and previous[3] is not None:
                growth = max(0, in_use - previous[3])
                growth = growth if growth > floor else 0
            else:
                growth = rss - previous[1]
        if in_use is None and same:
            in_use = previous[3]  # unchanged resident memory: carry the last exact figure
        return (HOST_LEAK_METRIC, rss, cell, in_use), growth

    def clear(self) -> None:
        self._last_by_source.clear()
