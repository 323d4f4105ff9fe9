"""What several views of one memory use of it together (a view note's figure): where each
lies (`frameworks.base.Extent`), read at the end of a walk for the storages several arrays
reach, and the bytes of their union."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable
from typing import NamedTuple, Optional

from ..frameworks import numpy as numpy_support
from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo, Extent
from .rows import ROW_FRAMEWORK

_NBYTES, _SIZE, _KEY = map(ArrayInfo._fields.index, ("nbytes", "storage_nbytes", "storage_key"))


class Layout(NamedTuple):
    """Where the arrays reaching one storage lie, by their rows: the contiguous ones'
    start and end addresses (`rows`, `starts`, `ends`), and each other one's `Extent`
    (`strided_rows`, `strided`; None: not read)."""

    rows: list[int]
    starts: list[int]
    ends: list[int]
    strided_rows: list[int]
    strided: list[Optional[Extent]]

    def used(self) -> Optional[int]:
        """The bytes they use together, each once (`bytes_used`); None: not known."""
        if None in self.strided:
            return None  # an array whose layout could not be read
        return bytes_used(self.starts, self.ends, self.strided)  # type: ignore[arg-type]

    def subset(self, kept: list[bool], renumbered: list[int]) -> Layout:
        """The rows ``kept`` (`Found.subset`), numbered as ``renumbered`` says."""
        dense = list(map(kept.__getitem__, self.rows))
        strided = list(map(kept.__getitem__, self.strided_rows))
        return Layout(
            list(map(renumbered.__getitem__, itertools.compress(self.rows, dense))),
            list(itertools.compress(self.starts, dense)),
            list(itertools.compress(self.ends, dense)),
            list(map(renumbered.__getitem__, itertools.compress(self.strided_rows, strided))),
            list(itertools.compress(self.strided, strided)),
        )

    def __add__(self, other: Layout) -> Layout:  # type: ignore[override]
        return Layout(*map(operator.add, self, other))


def shared_views(
    arrays: list, rows: list[tuple], frameworks: set[str], columns: list[list], start: int
) -> dict[Hashable, Layout]:
    """The `Layout` of each storage that two or more of `arrays` reach and one of them
    spans only in part (``a = big[:10]; b = big[5:20]``), by its key, its rows numbered
    from ``start``: read for torch's and NumPy's arrays. ``columns`` (in `ArrayInfo`'s
    field order) and ``rows`` describe `arrays`, ``frameworks`` are theirs (where only
    torch's: ``rows`` may be runs). Only what views of a shared storage need is read: a
    walk of 10^6 tensors with none pays one comparison each."""
    nbytes, storage_nbytes, keys = columns[_NBYTES], columns[_SIZE], columns[_KEY]
    if not any(map(operator.lt, nbytes, storage_nbytes)):
        return {}
    viewed = set(itertools.compress(keys, map(operator.lt, nbytes, storage_nbytes)))
    reached = list(itertools.compress(itertools.count(), map(viewed.__contains__, keys)))
    if len(viewed) == 1:  # one storage's views (`list(tensor)`: 10^5 rows), without a loop
        by_key = {next(iter(viewed)): reached}
    else:
        by_key = {}
        for index in reached:
            by_key.setdefault(keys[index], []).append(index)
    of_row = None if frameworks == {"torch"} else list(map(ROW_FRAMEWORK, rows))
    return {
        key: _layout(arrays, indices, nbytes, of_row, start)
        for key, indices in by_key.items()
        if len(indices) > 1
    }


def _layout(
    arrays: list, indices: list[int], nbytes: list[int], of_row: Optional[list], start: int
) -> Layout:
    """Where arrays `indices` lie (their rows: `start` + their index)."""
    tensors = indices if of_row is None else [i for i in indices if of_row[i] == "torch"]
    dense, starts, ends, strided = torch_support.array_spans(
        list(map(arrays.__getitem__, tensors)), list(map(nbytes.__getitem__, tensors))
    )
    rows = list(map(start.__add__, tensors))
    strided_rows = list(itertools.compress(rows, map(operator.not_, dense)))
    if of_row is not None and len(tensors) < len(indices):
        for index in indices:
            if of_row[index] != "torch":
                numpy = of_row[index] == "numpy"
                strided.append(_numpy_extent(arrays[index]) if numpy else None)
                strided_rows.append(start + index)
    return Layout(list(itertools.compress(rows, dense)), starts, ends, strided_rows, strided)


UNREAD = Layout([], [], [], [], [None])  # a storage some of whose arrays were not read


def _numpy_extent(array) -> Optional[Extent]:
    try:
        return numpy_support.array_extent(array)
    except Exception:  # NumPy's getters on a user's array
        return None


MAX_RUNS = 100_000  # contiguous runs of strided arrays listed to measure them exactly


def bytes_used(starts: list[int], ends: list[int], extents: list[Extent]) -> Optional[int]:
    """The bytes that arrays over one memory use together, each byte once: the union of
    the contiguous ones' spans (from `starts` to `ends`) and of the others' (`extents`),
    a strided one's (a column slice; it and its transpose count once) as the contiguous
    runs it is made of where it meets another's span. None where that would take more
    than `MAX_RUNS` runs (10^6 one-element rows of a column slice)."""
    starts, ends = list(starts), list(ends)  # the caller's are left as they are
    starts += [made.low for made in extents if not made.steps]
    ends += [made.high for made in extents if not made.steps]
    strided = list({(made.low, made.steps): made for made in extents if made.steps}.values())
    # one whose elements may overlap each other (made by as_strided) is measured by its runs
    met = list(map(operator.or_, _meeting(starts, ends, strided), map(_may_overlap, strided)))
    alone = sum(made.nbytes for made, meets in zip(strided, met) if not meets)
    runs = 0
    for made in itertools.compress(strided, met):
        runs += made.nbytes // _run_length(made)[0]
        if runs > MAX_RUNS:
            return None
        made_starts, made_ends = _runs(made)
        starts += made_starts
        ends += made_ends
    return alone + _union(starts, ends)


def _meeting(starts: list[int], ends: list[int], strided: list[Extent]) -> list[bool]:
    """Whether each strided array's span meets another array's (a contiguous one's, from
    `starts` to `ends`, or another strided one's): in order of their starts, a span meets
    another where one before reaches past its start or the next starts before its end
    (sorted once: 10^4 blocks of a matrix are not compared pair by pair)."""
    if not strided:
        return []
    spans = sorted(
        itertools.chain(
            zip(starts, ends, itertools.repeat(-1)),
            ((made.low, made.high, index) for index, made in enumerate(strided)),
        )
    )
    met = [False] * len(strided)
    furthest = None  # the furthest end of the spans before
    for at, (low, high, index) in enumerate(spans):
        if index >= 0:
            after = at + 1 < len(spans) and spans[at + 1][0] < high
            met[index] = after or (furthest is not None and furthest > low)
        furthest = high if furthest is None else max(furthest, high)
    return met


def _may_overlap(made: Extent) -> bool:
    """Whether a strided array's elements may overlap each other: some dimension's stride,
    in order, does not step past all the elements the smaller ones span (never so for what
    slicing, transposing or broadcasting make)."""
    spanned = made.itemsize
    for size, stride in made.steps:
        if stride < spanned:
            return True
        spanned = stride * (size - 1) + spanned
    return False


def _run_length(made: Extent) -> tuple[int, tuple[tuple[int, int], ...]]:
    """The bytes of a strided array's contiguous runs (its innermost dimensions that are
    dense; one element where none is), and the dimensions that step between runs."""
    length = made.itemsize
    for at, (size, stride) in enumerate(made.steps):
        if stride != length:
            return length, made.steps[at:]
        length *= size
    return length, ()


def _runs(made: Extent) -> tuple[list[int], list[int]]:
    """A strided array's contiguous runs: their start and end addresses."""
    length, outer = _run_length(made)
    starts = [made.low]
    for size, stride in outer:
        starts = [begin + step for step in range(0, size * stride, stride) for begin in starts]
    return starts, [begin + length for begin in starts]


def _union(starts: list[int], ends: list[int]) -> int:
    """The bytes the spans from `starts` to `ends` cover together: in order of their
    starts, each adds what reaches past the furthest end before it (spans in order and
    apart, as 10^5 rows of a tensor are: their sizes' sum, in C)."""
    if not all(map(operator.le, starts, itertools.islice(starts, 1, None))):
        order = sorted(range(len(starts)), key=starts.__getitem__)
        starts, ends = list(map(starts.__getitem__, order)), list(map(ends.__getitem__, order))
    if all(map(operator.le, ends, itertools.islice(starts, 1, None))):
        return sum(ends) - sum(starts)
    total, furthest = 0, starts[0]
    for low, high in zip(starts, ends):
        if high > furthest:
            total += high - max(low, furthest)
            furthest = high
    return total
