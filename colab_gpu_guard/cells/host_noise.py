"""How much host memory moves in this process without anything being kept: the floor below
which a cell's host growth is noise, measured once, not guessed (see docs/cells.md, "The
host noise floor")."""

from __future__ import annotations

from typing import NamedTuple, Optional

from ..host_memory import MallocInUse, RssReader

MiB = 2**20
MINIMUM = 1 * MiB
# sizes rebound by the calibration: below and above glibc's default mmap threshold (128
# KiB; it rises to the size of each large block freed, up to 32 MiB on 64-bit, so the
# largest size is kept moderate: the calibration should not itself make the heap keep
# bigger blocks resident)
SIZES = (64 * 1024, 1 * MiB, 8 * MiB)


class NoiseFloor(NamedTuple):
    """What each host measure grew by with nothing kept, and the floors derived from it.

    rss_grown / malloc_grown: the most the resident set size / malloc's in-use bytes grew
    over one innocent step of the calibration (malloc None where glibc's figure is missing).
    """

    rss: int
    malloc: int
    rss_grown: int
    malloc_grown: Optional[int]


def _touched(size: int) -> bytearray:
    return bytearray(b"\x01") * size  # written, so resident (bytearray(n) is calloc'd)


def measure(rss: RssReader, malloc: MallocInUse) -> NoiseFloor:
    """Measure the floors by rebinding buffers and dropping a temporary (see the module)."""
    rss_grown = 0
    malloc_grown: Optional[int] = None
    for size in SIZES:
        held = _touched(size)
        rss_before, malloc_before = rss.read(), malloc.read()
        held = _touched(size)  # the old buffer is freed once the new one is bound
        temporary = [float(number) for number in range(100_000)]
        del temporary
        rss_after, malloc_after = rss.read(), malloc.read()
        del held
        if rss_before is not None and rss_after is not None:
            rss_grown = max(rss_grown, rss_after - rss_before)
        if malloc_before is not None and malloc_after is not None:
            malloc_grown = max(malloc_grown or 0, malloc_after - malloc_before)
    return NoiseFloor(
        rss=max(MINIMUM, 2 * rss_grown),
        malloc=max(MINIMUM, 2 * (malloc_grown or 0)),
        rss_grown=rss_grown,
        malloc_grown=malloc_grown,
    )
