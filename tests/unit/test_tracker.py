"""Per-cell memory history: recorded by the hooks %load_ext installs, removed on unload,
bounded, rerun leaks flagged on CPU (host memory) and CUDA (allocator figures)."""

from __future__ import annotations

import ctypes
import gc
import threading
import types

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from colab_gpu_guard import host_memory, nvml
from colab_gpu_guard.cells import tracker
from colab_gpu_guard.cells.history_text import START_AFRESH
from colab_gpu_guard.cells.peaks import AT_LEAST, AT_MOST, EXACT, cell_peak, device_peak_bounds
from colab_gpu_guard.cells.tracker import CellMemory, MemoryTracker, format_history, memory_history
from colab_gpu_guard.frameworks import torch as torch_support
from colab_gpu_guard.frameworks.torch import AllocatorStats
from colab_gpu_guard.ipython.magics import history as history_magic
from colab_gpu_guard.leftovers.graphs import FIX as GRAPH_FIX
from colab_gpu_guard.units import format_bytes, signed_bytes
from tests.records import cell_memory


def _ours(shell, event: str) -> list:
    return [
        callback
        for callback in shell.events.callbacks[event]
        if isinstance(getattr(callback, "__self__", None), MemoryTracker)
    ]


def test_load_installs_and_unload_removes_the_hooks(ip):
    assert len(_ours(ip, "pre_run_cell")) == 1 and len(_ours(ip, "post_run_cell")) == 1
    ip.run_line_magic("unload_ext", "colab_gpu_guard")
    try:
        assert _ours(ip, "pre_run_cell") == [] and _ours(ip, "post_run_cell") == []
        assert memory_history(ip) == []
        ip.run_cell("1 + 1", store_history=True)  # no error without the hooks
    finally:
        ip.run_line_magic("load_ext", "colab_gpu_guard")
    assert len(_ours(ip, "pre_run_cell")) == 1


@pytest.mark.cpu_only  # host memory is the measure only while CUDA is not started
def test_numbers_recorded_per_cell(ip, run_cell):
    first = run_cell("a = 1").execution_count
    second = run_cell("b = [0] * 1000").execution_count
    history = memory_history()
    assert [record.cell for record in history[-2:]] == [first, second]
    for record in history[-2:]:
        assert isinstance(record, CellMemory)
        assert record.duration_s >= 0
        assert record.devices == 0 and record.allocated_after == 0 and record.ooms == 0
        assert record.rss_after is None or record.rss_after > 10 * 2**20
        assert not record.rerun_leak
    with pytest.raises(dataclasses_frozen()):
        history[-1].cell = 3


def dataclasses_frozen():
    import dataclasses

    return dataclasses.FrozenInstanceError


@pytest.mark.skipif(host_memory.RssReader().read() is None, reason="needs /proc/self/statm")
@pytest.mark.cpu_only  # host memory is the measure only while CUDA is not started
def test_rerun_leak_flagged_for_a_cell_appending_to_a_global_list(ip, run_cell):
    torch = pytest.importorskip("torch")
    assert torch is not None
    run_cell("import torch\nleaky_list = []")
    leak = "leaky_list.append(torch.ones(4_000_000))"  # 16 MB a run
    _return_free_heap()  # as in a fresh kernel: the first run's keep grows the resident size
    run_cell("pass")  # the reading the next cell starts from
    runs = [run_cell(leak).execution_count for _ in range(3)]
    records = {record.cell: record for record in memory_history()}
    assert not records[runs[0]].rerun_leak
    for previous, current in zip(runs, runs[1:]):
        record = records[current]
        assert record.rerun_leak, format_history(memory_history())
        assert record.rerun_of == previous
        assert record.leak_kind == "cpu"
        assert record.leak_bytes >= 15 * 2**20
    # rebinding a big tensor is not a leak (RSS may keep the freed block resident)
    rebind = [run_cell("not_leaky = torch.ones(4_000_000)").execution_count for _ in range(4)]
    records = {record.cell: record for record in memory_history()}
    assert not any(records[cell].rerun_leak for cell in rebind), format_history(memory_history())
    assert "LEAK" in format_history(memory_history())
    ip.user_ns.pop("leaky_list", None)
    ip.user_ns.pop("not_leaky", None)


@pytest.mark.cpu_only  # host memory is the measure only while CUDA is not started
def test_a_rerun_is_judged_by_what_the_cell_itself_kept(ip, run_cell):
    """Issue 14's examples: memory another cell allocated between two runs is not charged
    to the rerun; a cell that keeps an autograd graph each run is flagged, and the bytes
    named are what one run kept (malloc's own figure, where glibc gives it)."""
    torch = pytest.importorskip("torch")
    assert torch is not None
    hello = "print('hello')"
    first = run_cell(hello).execution_count
    run_cell("import torch\nbig_in_between = torch.ones(25_000_000)")  # 100 MB kept
    again = run_cell(hello).execution_count
    records = {record.cell: record for record in memory_history()}
    assert records[again].rerun_of == first
    assert not records[again].rerun_leak, format_history(memory_history())

    run_cell("model = torch.nn.Linear(1024, 1024)\nlosses = []")
    step = "losses.append(model(torch.randn(4096, 1024)).sum())"  # keeps its 16 MiB input
    # earlier tests' garbage, collected while a run allocates, would lower malloc's net
    # figure of that run (by 420 KiB after the whole suite): collected first
    gc.collect()
    runs = [run_cell(step).execution_count for _ in range(3)]
    records = {record.cell: record for record in memory_history()}
    assert not records[runs[0]].rerun_leak
    saved = 4096 * 1024 * 4
    exact = host_memory.MallocInUse().read() is not None
    for previous, current in zip(runs, runs[1:]):
        record = records[current]
        assert record.rerun_leak and record.rerun_of == previous, format_history(memory_history())
        # malloc's figure is net: the cell may free a few KiB of IPython's own
        assert record.leak_bytes >= saved - 64 * 1024
        if exact:
            assert record.leak_bytes < saved + 2**20  # the graph's input, and little else
    kept = signed_bytes(record.leak_bytes)
    line = f"LEAK: rerun of [{runs[1]}] kept {kept} on cpu again; held by `losses` (grew by 1"
    assert line in format_history(memory_history())
    assert record.held_by == (
        f"`losses` (grew by 1 autograd graph; the previous run's graph keeps 16 MiB; {GRAPH_FIX})"
    )
    # no leftover for the next test
    for name in ("big_in_between", "model", "losses"):
        ip.user_ns.pop(name, None)


def test_history_is_bounded():
    history_tracker = MemoryTracker(maxlen=5, nvml=False)
    for number in range(8):
        history_tracker.pre_run_cell(types.SimpleNamespace(raw_cell=f"x = {number}"))
        history_tracker.post_run_cell(types.SimpleNamespace(execution_count=number))
    assert [record.cell for record in history_tracker.history()] == [3, 4, 5, 6, 7]
    history_tracker.close()


def test_post_without_pre_records_nothing_and_hooks_never_raise():
    quiet = MemoryTracker(nvml=False)
    quiet.post_run_cell(None)
    quiet.pre_run_cell(None)  # info without raw_cell
    quiet.post_run_cell(object())  # result without execution_count
    (record,) = quiet.history()
    assert record.cell is None and not record.rerun_leak
    quiet.close()


GiB = 2**30
MiB = 2**20


def stats(allocated, peak, total, device=0, ooms=0, reserved=None) -> AllocatorStats:
    """One device's allocator counters as torch reports them (c10 ``Stat``: current, peak,
    accumulated allocated), in bytes."""
    reserved = allocated + 2 * MiB if reserved is None else reserved
    return AllocatorStats(device, allocated, reserved, peak, ooms, total)


# (before, after) counters of one device -> the cell's peak and what the figure is
PEAK_CASES = {
    "set a new process peak: exact": (
        stats(1 * GiB, 2 * GiB, 10 * GiB),
        stats(1 * GiB, 3 * GiB, 12 * GiB),
        (3 * GiB, EXACT),
    ),
    "only allocated, below an earlier peak: exact": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(2 * GiB, 5 * GiB, 11 * GiB),
        (2 * GiB, EXACT),
    ),
    "touched nothing: exact": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        (1 * GiB, EXACT),
    ),
    "allocated and freed 1 GiB below an earlier 5 GiB peak: at most start + 1 GiB": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(1 * GiB, 5 * GiB, 11 * GiB),
        (2 * GiB, AT_MOST),
    ),
    "allocated much more than it held: at most the earlier peak": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(1 * GiB, 5 * GiB, 30 * GiB),
        (5 * GiB, AT_MOST),
    ),
    "the cell reset the peak itself: the bytes it allocated still bound it": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(1 * GiB, GiB + GiB // 2, 12 * GiB),
        (3 * GiB, AT_MOST),
    ),
    "the cell reset the peak and the accumulated counters: only a lower bound": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(1 * GiB, GiB + GiB // 2, 2 * GiB),
        (GiB + GiB // 2, AT_LEAST),
    ),
    "accumulated counters reset, peak unchanged: at most the earlier peak": (
        stats(1 * GiB, 5 * GiB, 10 * GiB),
        stats(2 * GiB, 5 * GiB, 1 * GiB),
        (5 * GiB, AT_MOST),
    ),
}


@pytest.mark.parametrize("case", sorted(PEAK_CASES))
def test_cell_peak_from_counters_left_alone(case):
    before, after, expected = PEAK_CASES[case]
    assert cell_peak([before], [after]) == expected
    low, high = device_peak_bounds(before, after)
    value, bound = expected
    if bound == EXACT:
        assert low == high == value
    elif bound == AT_MOST:
        assert high == value and low < high
    else:
        assert high is None and low == value


def test_cell_peak_with_the_opt_in_reset_is_the_allocators_peak():
    # the tracker reset the peak right after reading `before`: peak after is the cell's own
    before = stats(1 * GiB, 5 * GiB, 10 * GiB)
    after = stats(1 * GiB, GiB + 300 * MiB, 11 * GiB)
    assert cell_peak([before], [after], reset_before=True) == (GiB + 300 * MiB, EXACT)


def test_cell_peak_device_first_used_in_the_cell_and_several_devices():
    # CUDA started during the cell: nothing before, every counter started at 0
    assert cell_peak([], [stats(GiB, 2 * GiB, 3 * GiB)]) == (2 * GiB, EXACT)
    exact = (stats(GiB, GiB, GiB, device=0), stats(GiB, 2 * GiB, 2 * GiB, device=0))
    at_most = (stats(GiB, 5 * GiB, 9 * GiB, device=1), stats(GiB, 5 * GiB, 10 * GiB, device=1))
    at_least = (stats(GiB, 5 * GiB, 9 * GiB, device=1), stats(GiB, 2 * GiB, 0, device=1))
    pair = list(zip(exact, at_most))
    assert cell_peak(pair[0], pair[1]) == (2 * GiB + 2 * GiB, AT_MOST)
    pair = list(zip(exact, at_least))
    assert cell_peak(pair[0], pair[1]) == (2 * GiB + 2 * GiB, AT_LEAST)


class _Readings:
    """Replays recorded allocator counters (one device) to the tracker's hooks: each
    ``allocator_stats`` call returns the next reading. No CUDA here, so the numbers stand in
    for torch's; the GPU tests check the same flow against a real device."""

    def __init__(self) -> None:
        self.readings: list[AllocatorStats] = []
        self.resets = 0

    def allocator_stats(self, torch=None, count=None):
        return [self.readings.pop(0)]

    def reset(self, torch, count):
        self.resets += 1


def test_cuda_figures_peak_ooms_and_leak(monkeypatch):
    torch = pytest.importorskip("torch")
    readings = _Readings()
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch=None: True)
    monkeypatch.setattr(torch_support, "cuda_device_count", lambda torch=None: 1)
    monkeypatch.setattr(torch_support, "allocator_stats", readings.allocator_stats)
    monkeypatch.setattr(torch_support, "reset_peaks", readings.reset)
    assert torch is not None
    cuda_tracker = MemoryTracker(nvml=False)
    counters = {"allocated": 0, "peak": 0, "total": 0, "ooms": 0}

    def run(source: str, number: int, grow: int, transient: int = 0, ooms: int = 0) -> None:
        """A cell that allocates `transient` bytes and frees them, and keeps `grow` more.
        Only the first cell's figures before it are read: later cells start from the last
        cell's end (one read of torch's statistics per cell)."""
        if number == 1:
            readings.readings.append(
                stats(
                    counters["allocated"],
                    counters["peak"],
                    counters["total"],
                    ooms=counters["ooms"],
                )
            )
        cuda_tracker.pre_run_cell(types.SimpleNamespace(raw_cell=source))
        counters["peak"] = max(counters["peak"], counters["allocated"] + grow + transient)
        counters["allocated"] += grow
        counters["total"] += grow + transient
        counters["ooms"] += ooms
        readings.readings.append(
            stats(counters["allocated"], counters["peak"], counters["total"], ooms=counters["ooms"])
        )
        cuda_tracker.post_run_cell(types.SimpleNamespace(execution_count=number))

    run("model = build()", 1, grow=100 * MiB, transient=50 * MiB)
    run("outputs.append(model(x))", 2, grow=10 * MiB)
    run("outputs.append(model(x))", 3, grow=10 * MiB, transient=5 * MiB, ooms=1)
    run("y = 1", 4, grow=0)
    run("y = 1", 5, grow=0)
    first, second, third, fourth, fifth = cuda_tracker.history()
    assert readings.readings == []
    assert first.devices == 1 and first.allocated_before == 0
    assert first.allocated_after == 100 * MiB and first.peak == 150 * MiB
    assert first.peak_bound == EXACT and first.peak_text == "150 MiB"
    assert second.peak == 110 * MiB and second.peak_bound == EXACT  # only allocated
    assert third.peak == 125 * MiB and third.peak_bound == AT_MOST  # below the 150 MiB peak
    assert third.peak_text == "<= 125 MiB" and third.exact_peak is None
    assert first.reserved_after == first.allocated_after + 2 * MiB
    assert third.ooms == 1 and second.ooms == 0
    assert third.rerun_leak and third.leak_bytes == 10 * MiB and third.rerun_of == 2
    assert third.leak_kind == "cuda:0" and third.leaks == (("cuda:0", 10 * MiB),)
    assert not second.rerun_leak and not fifth.rerun_leak and fifth.rerun_of == 4
    assert fourth.delta == 0 and fourth.peak_bound == EXACT
    assert readings.resets == 0  # the user's peak counters are left alone
    text = format_history(cuda_tracker.history())
    assert "1 OOM!" in text and "LEAK" in text and "kept memory again on rerun: [3]" in text
    assert "<= 125 MiB" in text and tracker.PEAK_BOUND_NOTE in text
    assert tracker.PEAK_BOUND_NOTE not in format_history(cuda_tracker.history()[:2])

    cuda_tracker.reset_peaks = True  # the opt-in: reset before every cell, exact peaks
    readings.readings += [
        stats(110 * MiB, 150 * MiB, 200 * MiB),
        stats(110 * MiB, 111 * MiB, 201 * MiB),
    ]
    cuda_tracker.pre_run_cell(types.SimpleNamespace(raw_cell="z = f(x)"))
    cuda_tracker.post_run_cell(types.SimpleNamespace(execution_count=6))
    assert readings.resets == 1
    last = cuda_tracker.history()[-1]
    assert (last.peak, last.peak_bound) == (111 * MiB, EXACT)
    cuda_tracker.close()


def test_the_allocator_is_read_once_per_cell_and_anew_after_a_rebase(monkeypatch):
    """A cell's figures before it are the last cell's after it (nothing of the user's runs
    in between), as the resident size is: one read of torch's statistics per cell. Where
    something of ours ran in between (the panel's refresh: `rebase`), they are read anew,
    so what it allocated is charged to no cell."""
    pytest.importorskip("torch")
    readings = _Readings()
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch=None: True)
    monkeypatch.setattr(torch_support, "cuda_device_count", lambda torch=None: 1)
    monkeypatch.setattr(torch_support, "allocator_stats", readings.allocator_stats)
    cells = MemoryTracker(nvml=False)
    readings.readings += [stats(0, 0, 0), stats(10 * MiB, 10 * MiB, 10 * MiB)]
    cells.pre_run_cell(types.SimpleNamespace(raw_cell="a = f()"))
    cells.post_run_cell(types.SimpleNamespace(execution_count=1))
    readings.readings += [stats(12 * MiB, 12 * MiB, 12 * MiB)]  # the second cell's end only
    cells.pre_run_cell(types.SimpleNamespace(raw_cell="b = g()"))
    cells.post_run_cell(types.SimpleNamespace(execution_count=2))
    assert readings.readings == []
    cells.rebase()  # 5 MiB allocated between the cells by something of ours
    readings.readings += [stats(17 * MiB, 17 * MiB, 17 * MiB), stats(17 * MiB, 17 * MiB, 17 * MiB)]
    cells.pre_run_cell(types.SimpleNamespace(raw_cell="c = 1"))
    cells.post_run_cell(types.SimpleNamespace(execution_count=3))
    assert readings.readings == []
    first, second, third = cells.history()
    assert (second.allocated_before, second.allocated_after) == (10 * MiB, 12 * MiB)
    assert (third.allocated_before, third.delta) == (17 * MiB, 0)
    cells.close()


def test_broken_context_is_not_queried(monkeypatch):
    from colab_gpu_guard import cuda_health

    calls = []
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch=None: True)
    monkeypatch.setattr(torch_support, "allocator_stats", lambda *args: calls.append(args) or [])
    cuda_health.mark_broken("device-side assert triggered")
    try:
        broken = MemoryTracker(nvml=False)
        broken.pre_run_cell(types.SimpleNamespace(raw_cell="x"))
        broken.post_run_cell(types.SimpleNamespace(execution_count=1))
    finally:
        cuda_health.clear()
    assert calls == []
    assert broken.history()[0].devices == 0


def test_nvml_used_is_read_off_the_hot_path(monkeypatch):
    monkeypatch.setattr(nvml, "known_unavailable", lambda: False)
    monkeypatch.setattr(nvml, "used_memory", lambda: nvml.UsedMemory((2**30, 2**29), "v1"))
    sampled = MemoryTracker()
    sampled.pre_run_cell(types.SimpleNamespace(raw_cell="x"))
    sampled.post_run_cell(types.SimpleNamespace(execution_count=1))
    sampled._nvml.wait_idle()
    assert sampled.history()[0].nvml_used_after == 2**30 + 2**29
    assert sampled.history()[0].nvml_used_call == "v1"
    assert "NVML used (including driver-reserved memory)" in format_history(sampled.history())
    sampled.close()


def test_history_kept_between_reads_shows_nvml_once_it_answered(monkeypatch):
    """`history` keeps the records it made (the panel reads the last 30 after every cell)
    and makes one again when NVML's reading after its cell came in since."""
    answer = threading.Event()

    def used_memory():
        answer.wait(10)
        return nvml.UsedMemory((2**30,), "v2")

    monkeypatch.setattr(nvml, "known_unavailable", lambda: False)
    monkeypatch.setattr(nvml, "used_memory", used_memory)
    sampled = MemoryTracker()
    try:
        sampled.pre_run_cell(types.SimpleNamespace(raw_cell="x"))
        sampled.post_run_cell(types.SimpleNamespace(execution_count=1))
        first = sampled.history()
        assert first[0].nvml_used_after is None and first[0].nvml_used_call is None
        assert sampled.history()[0] is first[0]  # nothing new: the same record
        answer.set()
        sampled._nvml.wait_idle()
        later = sampled.history()[0]
        assert (later.nvml_used_after, later.nvml_used_call) == (2**30, "v2")
        kept = ("cell", "duration_s", "rss_before", "rss_after", "allocated_after")
        assert [getattr(later, name) for name in kept] == [getattr(first[0], name) for name in kept]
        sampled.clear()
        assert sampled.history() == []
    finally:
        answer.set()
        sampled.close()


def test_history_made_once_per_record_matches_a_fresh_tracker_over_many_cells():
    """Past `maxlen` cells the kept records are dropped with theirs: the last cells read
    the same as they are recorded, in order."""
    cells = MemoryTracker(maxlen=5, nvml=False)
    for number in range(1, 40):
        cells.pre_run_cell(types.SimpleNamespace(raw_cell=f"x{number} = {number}"))
        cells.post_run_cell(types.SimpleNamespace(execution_count=number))
        assert [record.cell for record in cells.history(last=3)] == list(
            range(max(1, number - 2), number + 1)
        )
    assert [record.cell for record in cells.history()] == [35, 36, 37, 38, 39]
    assert len(cells._made) <= 2 * cells.maxlen + 1
    cells.close()


def test_no_nvml_known_at_start_means_no_reader_thread():
    """Once NVML failed to start in this process, a new tracker (a %reload_ext) starts no
    thread: one woken after every cell would take the GIL from the cells themselves."""
    from colab_gpu_guard import nvml
    from tests import fake_pynvml

    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    try:
        assert not nvml.known_unavailable()  # not tried yet
        nvml.initialised()  # fails; the failure is cached
        assert nvml.known_unavailable()
        sampled = MemoryTracker()
        for number in range(3):
            sampled.pre_run_cell(types.SimpleNamespace(raw_cell="x"))
            sampled.post_run_cell(types.SimpleNamespace(execution_count=number))
        assert sampled._nvml._thread is None and sampled._nvml.available is False
        sampled.close()
    finally:
        nvml.set_pynvml(None)


def test_no_nvml_means_none_and_sampling_stops(monkeypatch):
    monkeypatch.setattr(nvml, "known_unavailable", lambda: False)
    monkeypatch.setattr(nvml, "used_memory", lambda: None)
    sampled = MemoryTracker()
    for number in range(3):
        sampled.pre_run_cell(types.SimpleNamespace(raw_cell="x"))
        sampled.post_run_cell(types.SimpleNamespace(execution_count=number))
        sampled._nvml.wait_idle()
    assert all(record.nvml_used_after is None for record in sampled.history())
    assert sampled._nvml.available is False
    text = format_history(sampled.history())
    assert "NVML" not in text  # no column of dashes for a figure nobody has
    assert text.startswith(
        "memory history: 3 cells (no GPU figures: host RSS is the whole kernel process's memory)"
    )
    sampled.close()


def test_history_tail_is_the_end_of_the_history(ip, run_cell):
    for number in range(12):
        run_cell(f"tail_value = {number}")
    everything = tracker.memory_history()
    tail, total = tracker.history_tail(5)
    assert total == len(everything) >= 12
    assert tail == everything[-5:]
    assert tracker.history_tail(0) == ([], total)
    from colab_gpu_guard.status import gpu_status

    snap = gpu_status(leftovers=False, history=True, history_limit=5, processes=False)
    assert [record.cell for record in snap.history] == [cell.cell for cell in everything[-5:]]
    assert snap.history_note == f"last 5 of {total} cells"


def test_format_history_and_limit():
    assert "no cells recorded" in format_history([])
    records = [cell_memory(cell=n, duration_s=0.5, rss_after=2**30) for n in range(1, 6)]
    text = format_history(records, limit=2)
    assert "[4]" in text and "[5]" in text and "[3]" not in text
    assert text.startswith("memory history: the last 2 of 5 cells (")
    assert format_history(records, limit=5).startswith("memory history: 5 cells (")
    assert "1 GiB" in text
    with pytest.raises(ValueError):
        format_history(records, limit=-1)
    # cells are recorded: --limit 0 does not say there are none
    assert format_history(records, limit=0) == (
        "memory history: 5 cells recorded; --limit 0 shows none"
    )


def test_gpu_history_magic(ip, run_cell):
    run_cell("z = 1")
    with capture_output() as captured:
        ip.run_line_magic("gpu_history", "--limit 1")
    assert "memory history: 1 cell" in captured.stdout
    for bad in ("--limit -1", "--limit many", "--bogus"):
        with pytest.raises(UsageError):
            ip.run_line_magic("gpu_history", bad)
    assert "Example: %gpu_history" in ip.find_line_magic("gpu_history").__doc__


def test_gpu_history_reset_peaks_is_opt_in_and_says_what_it_changes(ip, run_cell):
    history_tracker = tracker.active_tracker(ip)
    assert history_tracker.reset_peaks is False  # the user's peak counters are left alone
    doc = ip.find_line_magic("gpu_history").__doc__ + history_magic.REFERENCE
    assert "max_memory_allocated()" in doc and "--reset-peaks on" in doc and "<= X" in doc
    try:
        with capture_output() as captured:
            ip.run_line_magic("gpu_history", "--reset-peaks ON")
        assert history_tracker.reset_peaks is True
        assert "reset before every cell" in captured.stdout
        assert "covers the current cell only" in captured.stdout
        torch = torch_support.loaded()
        no_gpu = torch is not None and not torch_support.has_accelerator(torch)
        assert ("torch sees no GPU in this kernel" in captured.stdout) is no_gpu
        with capture_output() as captured:
            ip.run_line_magic("gpu_history", "--reset-peaks off")
        assert history_tracker.reset_peaks is False
        assert "left alone" in captured.stdout and "whole process" in captured.stdout
        with pytest.raises(UsageError, match="Usage: %gpu_history"):
            ip.run_line_magic("gpu_history", "--reset-peaks maybe")
        assert history_tracker.reset_peaks is False
    finally:
        history_tracker.reset_peaks = False


# ---------------------------------------------------------------- issue 14: the rest


def test_host_noise_floor_is_measured_in_this_process():
    """The floor is what host memory grew by while an innocent step only rebound buffers
    and dropped a temporary: twice that, at least one arena; measured once, on first use."""
    from colab_gpu_guard.cells import host_noise
    from colab_gpu_guard.cells.reruns import RerunLeakCheck

    check = RerunLeakCheck(10)
    assert check._floor is None  # not measured on creation (nor on the per-cell path)
    floor = check.noise_floor
    assert check.noise_floor is floor  # measured once
    assert floor.rss == max(host_noise.MINIMUM, 2 * floor.rss_grown)
    if floor.malloc_grown is not None:
        assert floor.malloc == max(host_noise.MINIMUM, 2 * floor.malloc_grown)
        # malloc's figure is exact: rebinding a buffer keeps nothing (a few KiB of
        # bookkeeping), so a 20 MiB keep stands far above the floor
        assert floor.malloc_grown < host_noise.MINIMUM and floor.malloc < 20 * MiB


def test_a_costly_malloc_read_is_not_taken_around_quick_cells(ip, run_cell, monkeypatch):
    """Where a read costs more than `CHEAP_READ_S` (a fragmented heap), quick cells get no
    malloc read but a probe once every `PROBE_EVERY` cells: one reading taken once must
    not chain into a read after every cell. A rerun of a cell whose previous run kept host
    memory still gets its two readings."""
    check = tracker.active_tracker(ip)._reruns
    assert check.noise_floor is not None  # measured once, with reads of its own
    readings = check.malloc
    reads = []
    real_read = readings.reader.read

    def counted() -> object:
        reads.append(1)
        return real_read()

    monkeypatch.setattr(readings.reader, "read", counted)
    monkeypatch.setattr(readings, "cheap_read_s", -1.0)  # every read is costly
    monkeypatch.setattr(readings, "read_share", 1e-12)  # and no cell is long enough
    run_cell("warm_up = 1")  # whatever the chain held is spent here
    reads.clear()
    for n in range(readings.PROBE_EVERY):
        run_cell(f"quick_{n} = {n}")
    assert len(reads) == 1  # the probe that times a read again, once per 64 cells
    readings._unread = 0
    reads.clear()

    if real_read() is not None:  # glibc: the rerun is judged on malloc's exact figure
        # The first run takes no reading: it is judged by its resident size's growth. That
        # grows by 64 MiB only if the block gets fresh pages: once glibc's mmap threshold
        # has risen to 32 MiB its trim threshold is 64 MiB, so a heap that earlier tests
        # grew keeps up to that much free and resident, and the block may come from it.
        # malloc_trim(0) hands what the heap has free back first.
        source = "kept_host.append(bytearray(b'1') * (64 * 2**20))"
        ctypes.CDLL(None).malloc_trim(0)
        run_cell("kept_host = []")
        first = run_cell(source).execution_count  # no reading: its resident size grew
        assert reads == []
        previous = check._last_by_source[source]
        assert previous.kept[-1][1] > 60 * MiB, (previous, check.noise_floor)
        second = run_cell(source).execution_count
        assert len(reads) == 2, (reads, previous, check.noise_floor)  # before and after
        record = {record.cell: record for record in memory_history()}[second]
        assert record.rerun_leak and record.rerun_of == first, format_history(memory_history())
        assert record.leaks == (("cpu", record.leak_bytes),)
        assert 64 * MiB <= record.leak_bytes < 65 * MiB  # exact: malloc's growth
        reads.clear()
        third = run_cell(source).execution_count
        assert len(reads) == 1, reads  # the reading the rerun before left, and one after
        record = {record.cell: record for record in memory_history()}[third]
        assert record.rerun_leak and 64 * MiB <= record.leak_bytes < 65 * MiB
    for name in ["warm_up", "kept_host"] + [f"quick_{n}" for n in range(readings.PROBE_EVERY)]:
        ip.user_ns.pop(name, None)


@pytest.mark.skipif(host_memory.RssReader().read() is None, reason="needs /proc/self/statm")
def test_innocent_reruns_pass_and_a_20_mib_keep_per_run_is_flagged(ip, run_cell):
    torch = pytest.importorskip("torch")
    assert torch is not None
    run_cell("import torch\nkeep20 = []")
    innocent = [
        "transient = float(torch.ones(12_000_000).sum())",  # 48 MB freed in the cell
        "rebound = torch.ones(4_000_000)",  # the previous 16 MB is freed
        "print('hello')",
    ]
    cells = []
    for _ in range(3):
        for source in innocent:
            cells.append(run_cell(source).execution_count)
        run_cell("between = torch.ones(5_000_000)")  # another cell allocating in between
    records = {record.cell: record for record in memory_history()}
    assert not any(records[cell].rerun_leak for cell in cells), format_history(memory_history())

    keep = "keep20.append(bytearray(b'1') * (20 * 2**20))"
    runs = [run_cell(keep).execution_count for _ in range(4)]
    records = {record.cell: record for record in memory_history()}
    assert not records[runs[0]].rerun_leak
    # flagged from the second run on, even when the first run's 20 MiB came from memory the
    # heap already had (its resident size did not grow): see tests/kernel/test_rerun_host.py
    exact = host_memory.MallocInUse().read() is not None
    for previous, current in zip(runs, runs[1:]):
        record = records[current]
        assert record.rerun_leak and record.rerun_of == previous, format_history(memory_history())
        assert record.leaks[0][0] == "cpu" and record.leak_bytes >= 20 * MiB
        if exact:
            assert record.leak_bytes < 21 * MiB
        assert record.held_by == f"`keep20` (grew by 1 item; {START_AFRESH})"
    text = format_history(memory_history())
    assert f"; held by `keep20` (grew by 1 item; {START_AFRESH})" in text
    for name in ("keep20", "transient", "rebound", "between"):
        ip.user_ns.pop(name, None)


@pytest.mark.skipif(host_memory.RssReader().read() is None, reason="needs /proc/self/statm")
def test_an_output_kept_each_run_is_named_as_the_holder(ip, run_cell):
    torch = pytest.importorskip("torch")
    assert torch is not None
    run_cell("import torch")
    _return_free_heap()
    run_cell("pass")
    with capture_output():
        runs = [run_cell("torch.ones(6_000_000)").execution_count for _ in range(3)]
    records = {record.cell: record for record in memory_history()}
    for previous, current in zip(runs, runs[1:]):
        record = records[current]
        assert record.rerun_leak, format_history(memory_history())
        assert record.held_by == f"`Out[{previous}]` (output history: %gpu_reset releases it)"
        # the tensor Out[previous] holds, less what the cell's own garbage collection gave
        # back of earlier tests' garbage (seen: 23.8 MB of 24 MB in one order of the files)
        assert record.leak_bytes >= 0.95 * 6_000_000 * 4
    from colab_gpu_guard.reset.apply import gpu_reset

    note = f"[{runs[-1]}] `Out[{runs[-2]}]` (output history: %gpu_reset releases it)"
    dry = gpu_reset(dry_run=True)
    assert any("held by: " in line and note in line for line in dry.notes), dry.notes
    report = gpu_reset()  # it drops the output history: the note names no holder then
    cells = ", ".join(f"[{cell}]" for cell in runs[1:])
    assert any(f"again when rerun: {cells} (see" in line for line in report.notes), report.notes
    assert not any("held by" in line for line in report.notes), report.notes


def _return_free_heap() -> None:
    """glibc's malloc_trim(0): earlier tests' freed memory goes back to the system, as in a
    fresh kernel (a keep that fits in free resident heap does not grow the resident size,
    and malloc's exact figure is read only around reruns of cells that grew it)."""
    import ctypes

    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):
        pytest.skip("needs glibc's malloc_trim")


def test_host_memory_is_judged_while_cuda_is_up(monkeypatch):
    """With CUDA initialised, host memory is still measured: a cell keeping 20 MiB of host
    memory each run is flagged on "cpu"; one keeping CUDA memory on "cuda:0"."""
    pytest.importorskip("torch")
    readings = _Readings()
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch=None: True)
    monkeypatch.setattr(torch_support, "cuda_device_count", lambda torch=None: 1)
    monkeypatch.setattr(torch_support, "allocator_stats", readings.allocator_stats)
    if host_memory.RssReader().read() is None:
        pytest.skip("needs /proc/self/statm")
    _return_free_heap()  # so that the first run's growth shows in its resident size
    namespace = {"host_list": []}
    engine = MemoryTracker(nvml=False, namespace=namespace)
    source = "host_list.append(bytearray(b'1') * (20 * 2**20))"
    for number in range(1, 4):
        readings.readings += [stats(GiB, GiB, GiB), stats(GiB, GiB, GiB)]  # CUDA untouched
        engine.pre_run_cell(types.SimpleNamespace(raw_cell=source))
        namespace["host_list"].append(bytearray(b"1") * (20 * MiB))
        engine.post_run_cell(types.SimpleNamespace(execution_count=number))
    first, second, third = engine.history()
    assert first.devices == 1 and not first.rerun_leak
    for record in (second, third):
        assert record.rerun_leak and record.leak_kind == "cpu", format_history(engine.history())
        assert record.leak_bytes >= 20 * MiB
        assert record.held_by == f"`host_list` (grew by 1 item; {START_AFRESH})"
    engine.close()


# ---------------------------------------------------------------- the output warning


def _output_warning(ip):
    return ip.magics_manager.registry["HistoryMagics"].output_warning


def test_parse_threshold_sizes_and_bad_input():
    from colab_gpu_guard.cells.output_warning import parse_threshold

    assert parse_threshold("256MiB") == 256 * MiB
    assert parse_threshold(" 1.5 GiB ") == GiB + GiB // 2
    assert parse_threshold("500mb") == 500 * MiB  # binary, as torch prints sizes
    assert parse_threshold("OFF") is None
    for bad in ("", "256", "-5MiB", "abc", "5 MiB extra", "1e3MiB"):
        with pytest.raises(ValueError, match="e.g. 256MiB"):
            parse_threshold(bad)


def test_warning_line_under_a_result_that_keeps_arrays(ip, run_cell):
    """CPU tensors stand in for accelerator memory through the engine's `include_cpu`
    (by default only accelerator memory counts: see the GPU test for cuda:0)."""
    torch = pytest.importorskip("torch")
    warning = _output_warning(ip)
    assert warning.threshold == 256 * MiB and warning.include_cpu is False
    run_cell("import torch\nbig_out = torch.ones(4_000_000)")
    nbytes = ip.user_ns["big_out"].untyped_storage().nbytes()
    with capture_output() as captured:
        ip.run_line_magic("gpu_history", "--warn-output 8MiB")
    assert "8 MiB or more" in captured.stdout and warning.threshold == 8 * MiB
    # a CPU-only torch: the line says the warning has nothing to act on here
    no_gpu = "torch sees no GPU in this kernel, so there is nothing to show until one is used"
    assert (no_gpu in captured.stdout) is (not torch_support.has_accelerator(torch))
    try:
        with capture_output() as captured:
            cell = run_cell("big_out").execution_count  # CPU memory: no line by default
        assert "keeps" not in captured.stdout
        warning.include_cpu = True
        with capture_output() as captured:
            cell = run_cell("big_out").execution_count
        line = (
            f"Out[{cell}] keeps {format_bytes(nbytes)} on cpu alive (output history): "
            "end the line with ';' or run %gpu_reset"
        )
        assert captured.stdout.count(line) == 1, captured.stdout
        lines = captured.stdout.splitlines()
        assert lines[-1] == line and any(f"Out[{cell}]" in text for text in lines[:-1])
        with capture_output() as captured:  # views of one storage count once
            cell = run_cell("(big_out, big_out[:10], {'a': big_out})").execution_count
        assert f"Out[{cell}] keeps {format_bytes(nbytes)} on cpu" in captured.stdout
        for quiet in ("big_out;", "torch.ones(10)", "[1, 2, 3]", "'text'", "x_small = 1"):
            with capture_output() as captured:
                run_cell(quiet)
            assert "keeps" not in captured.stdout, quiet
        with capture_output():
            ip.run_line_magic("gpu_history", "--warn-output off")
        with capture_output() as captured:
            run_cell("big_out")
        assert "keeps" not in captured.stdout and warning.threshold is None
    finally:
        warning.threshold, warning.include_cpu = 256 * MiB, False
        ip.user_ns.pop("big_out", None)
    assert torch is not None


def test_warn_output_rejects_bad_sizes_and_changes_nothing(ip):
    warning = _output_warning(ip)
    for bad in ("256", "lots", "-1GiB"):
        with pytest.raises(UsageError, match="Usage: %gpu_history") as raised:
            ip.run_line_magic("gpu_history", f"--warn-output {bad}")
        # "-1GiB" too: argparse would take it for an option ("expected one argument")
        assert "e.g. 256MiB" in str(raised.value) and repr(bad) in str(raised.value)
        assert warning.threshold == 256 * MiB
    doc = ip.find_line_magic("gpu_history").__doc__ + history_magic.REFERENCE
    assert "--warn-output 1GiB" in doc and "256 MiB" in doc


@pytest.mark.gpu
def test_warning_line_for_a_cuda_result(ip, run_cell):
    torch = pytest.importorskip("torch")
    run_cell("import torch\ncuda_out = torch.ones(80_000_000, device='cuda')")  # 305 MiB
    nbytes = ip.user_ns["cuda_out"].untyped_storage().nbytes()
    try:
        with capture_output() as captured:
            cell = run_cell("cuda_out").execution_count
        line = f"Out[{cell}] keeps {format_bytes(nbytes)} on cuda:0 alive (output history)"
        assert captured.stdout.count(line) == 1, captured.stdout
        with capture_output() as captured:
            run_cell("cuda_out;")
        assert "keeps" not in captured.stdout
        # host memory is judged beside CUDA: a host keep per run is flagged on "cpu"
        run_cell("host_keep = []")
        keep = "host_keep.append(bytearray(b'1') * (40 * 2**20))"
        runs = [run_cell(keep).execution_count for _ in range(4)]
        records = {record.cell: record for record in memory_history()}
        assert records[runs[-1]].rerun_leak and "cpu" in records[runs[-1]].leak_kind
    finally:
        for name in ("cuda_out", "host_keep"):
            ip.user_ns.pop(name, None)
        ip.run_line_magic("gpu_reset", "")
    assert torch is not None


@pytest.mark.skipif(host_memory.RssReader().read() is None, reason="needs /proc/self/statm")
def test_the_resident_size_read_in_a_forked_child_is_the_childs():
    """The reader keeps /proc/self/statm open, resolved to the parent at open: a forked
    child (a DataLoader worker, multiprocessing) must read its own figure, not the
    parent's. The child touches 64 MiB its parent never has."""
    import os
    import warnings

    reader = host_memory.RssReader()
    parent_before = reader.read()
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():  # Python >= 3.12 warns of forking with threads alive
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report, then leave without running the parent's cleanup
        try:
            block = bytearray(b"1") * (64 * MiB)
            mine = reader.read()
            with open("/proc/self/statm", "rb") as statm:
                own = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            os.write(write_end, f"{mine} {own} {len(block)}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as pipe:
        mine, own, _ = map(int, pipe.read().split())
    os.waitpid(pid, 0)
    assert abs(mine - own) < 4 * MiB  # the child's own figure
    assert reader.read() < parent_before + 32 * MiB  # the parent's reader still the parent's
    assert mine > own - 4 * MiB >= 64 * MiB


def grew_by_one(name: str):
    """A list `name` that grew by one item during a rerun, holding what it kept (bytes not
    measured)."""
    from colab_gpu_guard.cells.rerun_holders import ITEMS, VARIABLE, Growth, Holder

    return Holder(VARIABLE, name, None, Growth(1, ITEMS, 0, None))


def test_a_cuda_keep_freed_by_a_cell_in_between_flags_the_rerun_only_if_found_held():
    """The judgement on per-device changes (what torch's allocator counters give on a
    GPU): a cell keeps 1 MiB on cuda:0; another cell frees 1 MiB there; the rerun keeps 1
    MiB again. The first run's keep may be what was freed, so the rerun is flagged only
    where its objects are found held; a rerun with nothing freed since is flagged on the
    figures."""
    from colab_gpu_guard.cells.rerun_holders import NOTHING, Holding
    from colab_gpu_guard.cells.reruns import CellRun, RerunLeakCheck

    found: list = []

    def holding(_lengths, _result, _previous) -> Holding:
        return found[0]

    check = RerunLeakCheck(maxlen=10, holding=holding)
    check.malloc.enabled = False  # no host figures: only the CUDA changes are judged
    result = types.SimpleNamespace(result=None, error_in_exec=None)

    def run(source: str, change: int, held: Holding = NOTHING) -> tuple:
        found[:] = [held]
        cuda = [("cuda:0", change)]
        return check.judge(CellRun(source, cuda, None, None, None, {"x": 0}, 1, 0.1, result))

    cell = "outs.append(torch.ones(2**18, device='cuda'))"
    run(cell, MiB)
    run("outs.clear()", -MiB)
    assert run(cell, MiB).leaks == ()  # nothing found holding the first run's tensor
    assert run(cell, MiB).leaks == (("cuda:0", MiB),)  # nothing freed since: flagged
    run("del something_else", -MiB)
    held = Holding(0, 0, (grew_by_one("outs"),), (("cuda:0", MiB),))
    verdict = run(cell, MiB, held)
    assert verdict.leaks == (("cuda:0", MiB),) and verdict.named == (held.holders, True, ("outs",))
    assert check.freed == (("cuda:0", 2 * MiB),)


def test_a_host_keep_a_cell_in_between_may_have_freed_unseen_flags_only_if_found_held():
    """Host figures on a heap where malloc reads are costly: a cell keeps 20 MiB (exact
    figures around it), a quick cell in between gets no malloc read and its resident
    size does not fall (glibc keeps the freed block), the rerun keeps 20 MiB again
    (exact). That cell may have freed the first run's keep unseen, so the rerun is flagged
    only where the first run's objects are found held; with an exact figure for every
    cell since, it is flagged on the figures."""
    from colab_gpu_guard.cells import host_noise
    from colab_gpu_guard.cells.rerun_holders import Holding
    from colab_gpu_guard.cells.reruns import CellRun, RerunLeakCheck

    found: list = []

    def holding(_lengths, _result, _previous) -> Holding:
        return found[0]

    check = RerunLeakCheck(maxlen=10, holding=holding)
    check._floor = host_noise.NoiseFloor(2 * MiB, 2 * MiB, MiB, MiB)
    heap = [100 * MiB]
    check.malloc.reader.read = lambda: heap[0]
    check.malloc.cheap_read_s = -1.0  # every read is costly: only reruns that need one
    check.malloc.read_share = 1e-12
    result = types.SimpleNamespace(result=None, error_in_exec=None)

    def run(source: str, change: int, held: Holding) -> tuple:
        found[:] = [held]
        before, _ = check.before_run(source)
        heap[0] += change
        return check.judge(CellRun(source, [], 500 * MiB, 500 * MiB, before, {}, 1, 0.1, result))

    cell = "outs.append(bytearray(20 * 2**20))"
    nothing = Holding(0, 0)
    run(cell, 20 * MiB, nothing)  # the first read is taken: its cost is not known yet
    assert check._last_by_source[cell].kept == (("cpu", 20 * MiB),)
    run("outs.clear()", -20 * MiB, nothing)  # no read: its free unseen
    assert check.blind == 1
    assert run(cell, 20 * MiB, nothing).leaks == ()  # nothing found holding the first run's
    held = Holding(20 * MiB, 20 * MiB, (grew_by_one("outs"),))
    run("outs.clear()", 0, nothing)  # unseen again; this time it freed nothing
    verdict = run(cell, 20 * MiB, held)
    assert verdict.leaks == (("cpu", 20 * MiB),) and verdict.named.holders == held.holders
    assert run(cell, 20 * MiB, nothing).leaks == (("cpu", 20 * MiB),)  # nothing unseen since


@pytest.mark.skipif(host_memory.RssReader().read() is None, reason="needs /proc/self/statm")
def test_the_resident_size_read_keeping_the_gil_is_the_kernels_figure():
    """The per-cell read goes through libc's pread with the GIL kept (os.pread gives it to
    IPython's history thread after every stored cell): the figure is still the kernel's,
    as /proc/self/statm read by Python's own file object says, and where the kernel counts
    64 MiB touched, so does the reader."""
    import mmap
    import os

    page = os.sysconf("SC_PAGE_SIZE")

    def own() -> int:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * page

    def bracketed(reader) -> bool:
        # other threads of this process (a panel's ticker, NVML's sampler) may allocate
        # between two reads: the reader's figure must lie between Python's own before and
        # after it, give or take a page table's worth
        for _ in range(5):
            first, read, last = own(), reader.read(), own()
            if min(first, last) - MiB <= read <= max(first, last) + MiB:
                return True
        return False

    reader = host_memory.RssReader()
    reader.read()  # the first read loads ctypes
    assert bracketed(reader)

    def touched_block() -> list[tuple[int, int]]:
        """(what the reader saw grow, what Python's own reads saw) around 64 MiB touched,
        five tries. The block is a fresh anonymous mapping with every page written."""
        tries = []
        for _ in range(5):
            first, before = own(), reader.read()
            block = mmap.mmap(-1, 64 * MiB)
            block[::page] = b"\x01" * (64 * MiB // page)
            after, last = reader.read(), own()
            block.close()
            tries.append((after - before, last - first))
        return tries

    # The reader's figure is the kernel's: in one try at least the two agree. Where the
    # kernel counts the touched pages (Python's own reads grow), the reader sees them too.
    # How much a kernel counts is its own: CI's container once counted 4 MiB of the first
    # 64 MiB and none of the next four, in both figures alike (memory pressure may also
    # drop mapped file pages meanwhile).
    tries = touched_block()
    agree = [(read, kernel) for read, kernel in tries if abs(read - kernel) <= 2 * MiB]
    assert agree, tries
    if any(kernel >= 16 * MiB for _read, kernel in tries):
        assert any(read >= 16 * MiB for read, _kernel in agree), tries
    assert bracketed(reader)
    reader.close()
    assert reader.read() is None
