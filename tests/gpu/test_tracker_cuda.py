"""The tracker and the leftovers scan against a real CUDA device: per-cell figures equal
torch's, peaks leave the user's counters alone, a caught OOM is counted, a real rerun leak
is flagged and a clean rerun is not, and the named tensors add up to what the caching
allocator says is allocated. Skipped without a CUDA device."""

from __future__ import annotations

from pathlib import Path

import pytest

from colab_gpu_guard.cells import tracker
from colab_gpu_guard.cells.history_text import START_AFRESH
from tests.child import run_python

pytestmark = pytest.mark.gpu

ROOT = str(Path(__file__).resolve().parents[2])
MiB = 2**20
GiB = 2**30


@pytest.fixture
def cuda(ip, run_cell):
    """The shell with CUDA started in it (the tracker reads figures once CUDA is up), the
    names the tests make removed after."""
    torch = pytest.importorskip("torch")
    cell(run_cell, "import torch\ntorch.cuda.init()")
    yield torch
    for name in ("keep", "keep2", "tmp", "x", "big", "caught", "user_peak", "inside"):
        ip.user_ns.pop(name, None)
    ip.run_line_magic("gpu_reset", "")


def cell(run_cell, source: str) -> tracker.CellMemory:
    """Run a cell; return its record (the tracker's last)."""
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec
    record = tracker.memory_history()[-1]
    assert record.cell == result.execution_count
    return record


def allocated(torch) -> int:
    return sum(torch.cuda.memory_allocated(i) for i in range(torch.cuda.device_count()))


def test_per_cell_figures_are_torchs(cuda, run_cell):
    torch = cuda
    record = cell(run_cell, "x = torch.ones(16 * 2**20 // 4, device='cuda')")  # 16 MiB
    assert record.devices == torch.cuda.device_count()
    assert record.allocated_after == allocated(torch)
    assert record.reserved_after == sum(
        torch.cuda.memory_reserved(i) for i in range(torch.cuda.device_count())
    )
    assert record.delta == 16 * MiB
    again = cell(run_cell, "del x")
    assert again.allocated_before == record.allocated_after
    assert again.delta == -16 * MiB and again.allocated_after == allocated(torch)


def test_peaks_leave_the_users_counters_alone(cuda, run_cell, ip):
    torch = cuda
    one_gib = cell(run_cell, "big = torch.empty(2**30, dtype=torch.uint8, device='cuda')\ndel big")
    assert one_gib.peak >= one_gib.allocated_before + GiB
    assert one_gib.peak_bound in ("", "<="), one_gib
    user_peak = torch.cuda.max_memory_allocated()
    assert user_peak >= one_gib.allocated_before + GiB

    # a later, smaller cell: the user's peak is not reset, the cell's peak is bounded by
    # what it allocated (256 MiB over where it started), below the earlier 1 GiB peak
    small = cell(
        run_cell, "tmp = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\ndel tmp"
    )
    assert torch.cuda.max_memory_allocated() == user_peak
    assert small.peak_bound == "<=", small
    assert small.allocated_before + 256 * MiB <= small.peak <= small.allocated_before + 257 * MiB
    assert "<= " in tracker.format_history([small]) and tracker.PEAK_BOUND_NOTE in (
        tracker.format_history([small])
    )

    # the opt-in: reset before every cell, exact peaks, max_memory_allocated per cell
    ip.run_line_magic("gpu_history", "--reset-peaks on")
    try:
        exact = cell(
            run_cell,
            "tmp = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\ndel tmp\n"
            "inside = sum(map(torch.cuda.max_memory_allocated, range(torch.cuda.device_count())))",
        )
        assert exact.peak_bound == "" and exact.peak == ip.user_ns["inside"]
        assert exact.peak < user_peak
    finally:
        ip.run_line_magic("gpu_history", "--reset-peaks off")


def test_a_caught_oom_is_counted(cuda, run_cell):
    record = cell(
        run_cell,
        "total = torch.cuda.get_device_properties(0).total_memory\n"
        "try:\n"
        "    torch.empty(4 * total, dtype=torch.uint8, device='cuda')\n"
        "except torch.OutOfMemoryError:\n"
        "    caught = True",
    )
    assert record.ooms == 1
    assert "1 OOM!" in tracker.format_history([record])
    assert cell(run_cell, "caught").ooms == 0


def test_a_real_rerun_leak_is_flagged_and_a_clean_rerun_is_not(cuda, run_cell):
    cell(run_cell, "keep = []")
    leak = "keep.append(torch.ones(64 * 2**20 // 4, device='cuda'))"  # 64 MiB a run
    first = cell(run_cell, leak)
    second = cell(run_cell, leak)
    assert not first.rerun_leak
    assert second.rerun_leak and second.rerun_of == first.cell
    assert ("cuda:0", 64 * MiB) in second.leaks and "cuda:0" in second.leak_kind
    assert f"`keep` (grew by 1 item; {START_AFRESH})" in second.held_by
    clean = "tmp = torch.ones(64 * 2**20 // 4, device='cuda')\ndel tmp"
    runs = [cell(run_cell, clean) for _ in range(2)]
    assert not any(record.rerun_leak for record in runs) and runs[1].rerun_of == runs[0].cell
    rebind = [cell(run_cell, "x = torch.ones(64 * 2**20 // 4, device='cuda')") for _ in range(3)]
    assert not any(record.rerun_leak for record in rebind)


def test_a_rerun_after_keep_clear_is_not_flagged_and_the_next_one_is(cuda, run_cell):
    """The list cleared between two runs frees the first run's 64 MiB (torch's allocated
    bytes fall): the second run keeps 64 MiB again but nothing holds the first run's
    tensor, so it is no leak; the third, with nothing freed since, is one."""
    cell(run_cell, "keep2 = []")
    leak = "keep2.append(torch.ones(64 * 2**20 // 4, device='cuda'))"
    first = cell(run_cell, leak)
    cleared = cell(run_cell, "keep2.clear()")
    assert cleared.allocated_after == cleared.allocated_before - 64 * MiB
    second = cell(run_cell, leak)
    third = cell(run_cell, leak)
    assert not second.rerun_leak and second.rerun_of == first.cell
    assert third.rerun_leak and ("cuda:0", 64 * MiB) in third.leaks
    assert f"`keep2` (grew by 1 item; {START_AFRESH})" in third.held_by


LEFTOVERS_SCRIPT = """
import json
import IPython
from IPython.testing.globalipapp import start_ipython
ip = start_ipython() or IPython.get_ipython()
ip.run_line_magic("load_ext", "colab_gpu_guard")
ip.run_cell(
    "import torch\\n"
    "a = torch.empty(1000, device='cuda')\\n"              # 4000 B -> a 4096 B block
    "view = a[10:]\\n"                                      # the same block
    "b = torch.empty(3, dtype=torch.uint8, device='cuda')\\n"  # 3 B -> 512 B
    "c = torch.empty(2**20 + 1, dtype=torch.uint8, device='cuda')\\n"  # large pool, 512-rounded
    "d = torch.empty(64 * 2**20, dtype=torch.uint8, device='cuda')\\n"
    "e = torch.empty(0, device='cuda')\\n"                 # no block at all
    "out = [torch.ones(5, device='cuda')]\\n"
    "out[0]\\n",                                           # also in Out
    store_history=True,
)
import torch
from colab_gpu_guard import find_leftovers
items = find_leftovers(device="cuda")
print("RESULT" + json.dumps({
    "allocated": torch.cuda.memory_allocated(),
    "sizes": [item.nbytes for item in items],
    "names": [item.name for item in items],
}))
"""


def _round_to_block(size: int) -> int:
    """The caching allocator's block size for a request (CUDACachingAllocator
    round_size: at least kMinBlockSize = 512 bytes, then a multiple of it)."""
    return 0 if size == 0 else max(512, -(-size // 512) * 512)


def test_leftovers_add_up_to_what_the_allocator_has_allocated():
    result = run_python(LEFTOVERS_SCRIPT, marker="RESULT")
    sizes, names = result["sizes"], result["names"]
    assert sorted(size for size in sizes if size) == sorted([3, 20, 4000, 2**20 + 1, 64 * MiB])
    assert "view" not in names and "a" in names  # one entry per block
    found = sum(sizes)
    assert found <= result["allocated"] < found + 512 * len(sizes), result
    assert sum(_round_to_block(size) for size in sizes) == result["allocated"], result
