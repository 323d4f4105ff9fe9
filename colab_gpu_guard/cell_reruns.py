"""Rerun leaks: does a cell that ran before keep memory again, run after run?

A cell's effect is what it kept: memory after it minus memory before *it*, so what other
cells allocated in between is never charged to it. It is measured per device: torch's
allocated bytes on each CUDA device (exact: any growth counts), and host memory ("cpu"),
always, CUDA or not. A rerun is flagged on a device when this run kept a significant amount
there and the previous run of the same source did too: its earlier objects are still held
somewhere (``losses.append(loss)``), where a cell that rebinds its names
(``big = torch.ones(...)``) keeps nothing on a rerun.

Host memory: the resident set size after minus before the cell, and around a rerun of a
cell that kept host memory last time, malloc's in-use bytes (glibc ``mallinfo2``), which
are exact where RSS is not (a freed block often stays resident). Significant means above a
noise floor *measured* in this process (``host_noise``) the first time a rerun is judged:
malloc's floor where its figure exists, else the resident set's. ``mallinfo2`` walks
malloc's free lists, so it is read only around such reruns. Runs on the per-cell hot path:
no object walks, no CUDA calls.
"""

from __future__ import annotations

from typing import Optional

from . import host_noise
from .host_memory import MallocInUse, RssReader

HOST = "cpu"
_CUDA_NAMES: dict[int, str] = {}

# what one run of a cell kept: ((device, bytes), ...) in a fixed order, CUDA devices first
Kept = tuple


def cuda_name(index: int) -> str:
    name = _CUDA_NAMES.get(index)
    if name is None:
        name = _CUDA_NAMES[index] = f"cuda:{index}"
    return name


def cuda_kept(stats_before: tuple, stats_after: tuple) -> list:
    """[(device name, allocated bytes it kept), ...] from per-device allocator stats."""
    started = {stats.device: stats.allocated for stats in stats_before}
    return [
        (cuda_name(after.device), max(0, after.allocated - started.get(after.device, 0)))
        for after in stats_after
    ]


class RerunLeakCheck:
    """Remembers what each cell source kept on its last run and judges the next run of it."""

    def __init__(self, maxlen: int, rss: Optional[RssReader] = None) -> None:
        self.maxlen = maxlen
        # source -> (Kept of its last run, its cell)
        self._last_by_source: dict[str, tuple] = {}
        self._malloc = MallocInUse()
        self._rss = rss if rss is not None else RssReader()
        self._floor: Optional[host_noise.NoiseFloor] = None

    @property
    def noise_floor(self) -> host_noise.NoiseFloor:
        """The host noise floors, measured on first use (see ``host_noise``)."""
        if self._floor is None:
            self._floor = host_noise.measure(self._rss, self._malloc)
        return self._floor

    def host_floor(self, exact: bool) -> int:
        floor = self.noise_floor
        return floor.malloc if exact else floor.rss

    def malloc_before(self, source: Optional[str]) -> Optional[int]:
        """malloc's in-use bytes before a cell, read only when the cell is a rerun of one
        that kept host memory (so that what this run keeps can be confirmed exactly)."""
        previous = self._last_by_source.get(source) if source is not None else None
        if previous is None:
            return None
        host = _host_of(previous[0])
        if not host or host <= self.noise_floor.malloc:
            return None
        return self._malloc.read()

    def judge(
        self,
        source: Optional[str],
        cuda: list,
        rss_before: Optional[int],
        rss: Optional[int],
        malloc_before: Optional[int],
        cell: Optional[int],
    ) -> tuple[Kept, Optional[int], bool]:
        """(what this run kept again on each device where the run before kept memory too,
        the cell this reruns, whether this run kept anything above the smallest floor) for
        a cell that kept `cuda` ([(device, bytes)], a list this call owns) and went from
        `rss_before` to `rss` resident bytes."""
        if source is None:
            return (), None, False
        kept = cuda
        kept_any = False
        for _, amount in cuda:
            if amount:
                kept_any = True
        exact = False
        host = self._host_kept(rss_before, rss, malloc_before)
        if host is not None:
            kept.append((HOST, host[0]))
            exact = host[1]
            if host[0] > host_noise.MINIMUM:
                kept_any = True
        last = self._last_by_source
        previous = last.pop(source, None)
        last[source] = (kept, cell)
        if len(last) > 4 * self.maxlen:
            for stale in list(last)[: 2 * self.maxlen]:
                del last[stale]
        if previous is None:
            return (), None, kept_any
        if not kept_any:  # nothing above the smallest floor: nothing kept again
            return (), previous[1], False
        before = dict(previous[0])
        again = []
        for device, amount in kept:
            if device == HOST:
                if not before.get(HOST):
                    continue
                floor = self.host_floor(exact)
            else:
                floor = 0
            if amount > floor and before.get(device, 0) > floor:
                again.append((device, amount))
        return tuple(again), previous[1], True

    def _host_kept(
        self, rss_before: Optional[int], rss: Optional[int], malloc_before: Optional[int]
    ) -> Optional[tuple[int, bool]]:
        """(host bytes the cell kept, exact?): malloc's in-use growth where it was read
        before the cell, else the resident bytes it added; None when neither is known."""
        if malloc_before is not None:
            in_use = self._malloc.read()
            if in_use is not None:
                return max(0, in_use - malloc_before), True
        if rss is None or rss_before is None:
            return None
        return max(0, rss - rss_before), False

    def clear(self) -> None:
        self._last_by_source.clear()


def _host_of(kept: Kept) -> int:
    for device, amount in kept:
        if device == HOST:
            return amount
    return 0
