"""A cell's peak CUDA memory, derived from torch's allocator counters without resetting them.

torch's caching allocator keeps, per device, for its allocated bytes (c10 ``Stat``):
``current``; ``peak``, the most ever held (``reset_peak_memory_stats`` sets it to
``current``); and ``allocated``, every byte ever handed out (only
``reset_accumulated_memory_stats`` zeroes it). From those figures read before and after a
cell, with the peak left alone (the user's ``torch.cuda.max_memory_allocated()`` keeps
covering the whole process):

- the cell set a new peak (peak after > peak before): the cell's peak is that new peak,
  exactly;
- otherwise the cell stayed at or below the earlier peak, and also at or below what it
  started with plus every byte it allocated: the smaller of the two is an upper bound, and
  the larger of the allocated bytes before and after is a lower bound. When they meet (a
  cell that only allocated, or that touched nothing), the peak is exact; else the upper
  bound is shown as such ("<= 1.2 GiB");
- the peak went down (the cell reset it itself): what came after the reset gives a lower
  bound, the bytes allocated still give an upper bound.

A cell that resets the counters itself and then climbs above the earlier peak, or that
resets the accumulated counters, can make these figures wrong; with the tracker's opt-in
(``%gpu_history --reset-peaks on``) the peak is reset before every cell, and then the
allocator's peak after the cell is the cell's own, exactly.
"""

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
