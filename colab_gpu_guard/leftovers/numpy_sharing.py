"""Tensors over a NumPy array's memory (``torch.from_numpy``), counted once with it.
See docs/leftovers.md."""

from __future__ import annotations

import bisect
import itertools
import sys
from typing import Optional

from ..frameworks.base import ArrayInfo
from .found import Found
from .graphs import Graphs
from .rows import ROW_FRAMEWORK


class NumpyBuffers:
    """The CPU buffers of the NumPy arrays a scan found: (start, size, key) by start."""

    def __init__(self, spans: list[tuple]) -> None:
        self.spans = spans
        self.starts = [start for start, _size, _key in spans]

    def info(self, info: ArrayInfo) -> ArrayInfo:
        """One CPU tensor's metadata (`join`'s rule; a graph's saved tensors)."""
        key, size = info.storage_key, info.storage_nbytes
        if info.device != "cpu" or type(key) is not int:  # host memory's key: its address
            return info
        at = bisect.bisect_right(self.starts, key) - 1
        if at < 0:
            return info
        start, span, owner = self.spans[at]
        if key + size > start + span:
            return info
        return info._replace(storage_key=owner, storage_nbytes=span, storage_id=start)

    def join(self, found: Found) -> None:
        """Give each CPU tensor of `found` lying inside one of the buffers that buffer's
        key, size and id (in place)."""
        numpy = sys.modules["numpy"]
        keys, sizes, ids = found.keys, found.storage_nbytes, found.storage_ids
        # the torch rows on the CPU, keyed by their storage's address
        chosen = [
            framework == "torch" and device == "cpu" and type(key) is int
            for framework, device, key in zip(map(ROW_FRAMEWORK, found.rows), found.devices, keys)
        ]
        rows = list(itertools.compress(range(len(keys)), chosen))
        if not rows:
            return
        spans = self.spans
        starts = numpy.array(self.starts, dtype=numpy.uint64)
        ends = numpy.array([start + size for start, size, _key in spans], dtype=numpy.uint64)
        pointers = numpy.fromiter(
            itertools.compress(keys, chosen), dtype=numpy.uint64, count=len(rows)
        )
        lengths = numpy.fromiter(
            itertools.compress(sizes, chosen), dtype=numpy.uint64, count=len(rows)
        )
        at = numpy.searchsorted(starts, pointers, side="right").astype(numpy.int64) - 1
        inside = at >= 0
        inside[inside] &= pointers[inside] + lengths[inside] <= ends[at[inside]]
        for row, span in zip(numpy.flatnonzero(inside).tolist(), at[inside].tolist()):
            start, size, key = spans[span]
            index = rows[row]
            keys[index], sizes[index], ids[index] = key, size, start


def numpy_buffers(found: Found) -> Optional[NumpyBuffers]:
    """The buffers of the NumPy arrays `found` holds; None where it holds none, or no
    torch tensor to share them."""
    if sys.modules.get("numpy") is None or "torch" not in map(ROW_FRAMEWORK, found.rows):
        return None
    buffers = {
        key: size
        for key, size, framework in zip(
            found.keys, found.storage_nbytes, map(ROW_FRAMEWORK, found.rows)
        )
        if framework == "numpy" and type(key) is int and size
    }
    if not buffers:
        return None
    return NumpyBuffers(sorted((key, size, key) for key, size in buffers.items()))


def join_numpy_buffers(found: Found, graphs: Graphs) -> Optional[NumpyBuffers]:
    """`NumpyBuffers.join` on `found`, and the same rule for what `graphs` will measure;
    the buffers (None: nothing to join)."""
    buffers = numpy_buffers(found)
    if buffers is not None:
        buffers.join(found)
        graphs.join = buffers.info
    return buffers
