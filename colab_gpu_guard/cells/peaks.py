"""A cell's peak CUDA memory, derived from torch's allocator counters without resetting them:
exact, or a bound (see docs/cells.md, "A cell's peak")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..frameworks.torch import AllocatorStats

EXACT = ""
AT_MOST = "<="
AT_LEAST = ">="


def device_peak_bounds(
    before: Optional[AllocatorStats], after: AllocatorStats, reset_before: bool = False
) -> tuple[int, Optional[int]]:
    """(lowest, highest) the cell's peak on one device can have been; highest None where
    nothing bounds it. `before` None: the device was not in use when the cell started
    (all its counters were 0). `reset_before`: the peak was reset just after `before` was
    read, so the peak after the cell is the cell's own."""
    peak = after.peak_allocated
    if before is None:
        return peak, peak  # every counter started at 0: the peak is the cell's own
    if reset_before or peak > before.peak_allocated:
        return peak, peak
    low = max(before.allocated, after.allocated)
    grown = after.allocated_total - before.allocated_total
    high: Optional[int] = before.allocated + grown if grown >= 0 else None
    if peak == before.peak_allocated:
        high = peak if high is None else min(high, peak)
    else:  # the peak went down: the cell reset it; what came after is a lower bound
        low = max(low, peak)
    if high is not None and high < low:
        high = low  # counters read a moment apart; never a bound below what was held
    return low, high


def cell_peak(
    before: Sequence[AllocatorStats], after: Sequence[AllocatorStats], reset_before: bool = False
) -> tuple[int, str]:
    """The cell's peak allocated bytes summed over devices, and what the figure is: EXACT,
    AT_MOST (an upper bound) or AT_LEAST (a lower bound)."""
    started = {stats.device: stats for stats in before}
    low = 0
    high: Optional[int] = 0
    for stats in after:
        device_low, device_high = device_peak_bounds(started.get(stats.device), stats, reset_before)
        low += device_low
        high = None if high is None or device_high is None else high + device_high
    if high is None:
        return low, AT_LEAST
    if high == low:
        return low, EXACT
    return high, AT_MOST
