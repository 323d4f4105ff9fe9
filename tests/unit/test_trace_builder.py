"""Constructed CUDA allocator snapshots in torch's own format, for the trace tests on a
machine without a GPU; and the proof that the format is torch's: torch's own snapshot tools
(`torch.cuda._memory_viz`) read every snapshot built here.

The format is torch's ``_snapshot()`` (torch/cuda/memory.py documents it; the keys are
those torch/csrc/cuda/memory_snapshot.cpp writes): ``segments`` (device, address,
total_size, allocated_size, active_size, requested_size, stream, segment_type,
segment_pool_id, is_expandable, frames, blocks of address/size/requested_size/state/
frames) and ``device_traces`` (per device: action, addr (device_free for an oom), size,
stream, frames where a stack was recorded, time_us).

`tests/trace_allocator.py` builds them.
"""

from __future__ import annotations

import copy
import pickle

import pytest

from tests.trace_allocator import Allocator, frames


def sample() -> dict:
    """A small cell: a segment reused, a free, an empty_cache, one allocation kept."""
    a = Allocator()
    here = frames(("/tmp/ipykernel_1/123.py", 3, "<module>"))
    x = a.alloc(3 << 20, here)
    y = a.alloc(1000, here)
    a.free(x, here)
    a.alloc(3 << 20, here)  # the cached segment again, the same address
    a.free(y)
    a.empty_cache()
    a.oom(8 << 30, 1 << 30, here)
    return a.snapshot()


def test_torch_reads_the_constructed_format():
    viz = pytest.importorskip("torch.cuda._memory_viz")
    snapshot = sample()
    summary = viz.segsum(snapshot)  # checks each segment's blocks add up to its size
    assert "Segment size mismatch" not in summary
    assert "segments: 1" in summary
    text = viz.trace(snapshot)
    assert "raise OutOfMemoryError" in text and "cudaMalloc" in text
    assert "123.py:3:<module>" in viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "seg_" in viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    page = viz.trace_plot(copy.deepcopy(snapshot))
    assert "snapshot.pickle" in page  # torch pickles it into its viewer's page
    assert viz.filter_alloc_free_pairs(copy.deepcopy(snapshot))["device_traces"][0]


def test_the_allocator_model_counts_as_torch_does():
    a = Allocator()
    x = a.alloc(1000)
    assert a.allocated() == 1024 and a.reserved() == 1024
    a.free(x)
    assert a.allocated() == 0 and a.reserved() == 1024
    a.empty_cache()
    assert a.reserved() == 0
    assert pickle.loads(pickle.dumps(a.snapshot()))["device_traces"][0][-1]["action"] == (
        "segment_free"
    )
