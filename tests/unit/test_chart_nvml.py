"""The per-cell chart's middle measure: without torch CUDA figures, what NVML charges this
kernel's PID (CuPy, JAX, TensorFlow, CUDA without torch), read after each cell by the
tracker's NVML thread; else host memory, saying why NVML's figure is missing.

In a real IPython shell with the fake NVML (tests/fake_pynvml.py): cells change the fake
process's used memory by known amounts, and the chart's bars are those amounts."""

from __future__ import annotations

import dataclasses
import os
import re
import types

import pytest

from colab_gpu_guard import nvml
from colab_gpu_guard.cells import tracker
from colab_gpu_guard.status import chart, gpu_status
from colab_gpu_guard.units import format_bytes, signed_bytes
from tests import fake_pynvml
from tests.fake_pynvml import GiB, MiB
from tests.records import cell_memory

OTHER_NAMESPACE_PID = 4_999_999  # what NVML lists for this kernel inside a container


@pytest.fixture(autouse=True)
def no_real_nvml():
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    yield
    nvml.set_pynvml(None)


def mine(fake_world) -> fake_pynvml.FakeProcess:
    return next(p for gpu in fake_world.gpus for p in gpu.processes if p.pid == os.getpid())


def settle(ip) -> tracker.MemoryTracker:
    """Let the NVML thread read after the last cell, as between cells a person runs."""
    active = tracker.active_tracker(ip)
    assert active is not None and active._nvml is not None
    active._nvml.wait_idle()
    return active


def settled_history(ip) -> list:
    """The shell's history once the NVML thread has read after the last cell."""
    return settle(ip).history()


@pytest.fixture
def paced(ip, run_cell):
    """Run a cell, then wait for the NVML thread's reading (a person's pace)."""

    def run(source: str):
        result = run_cell(source)
        settle(ip)
        return result

    return run


def bar_titles(html: str) -> dict[int, str]:
    return {
        int(cell): title
        for title, cell in re.findall(r'class="cgg-cell" title="(cell \[(\d+)\]: [^"]*)"', html)
    }


# ---------------------------------------------------------------- NVML's figure for a PID


def test_used_by_process_sums_this_pid_over_gpus_counting_each_entry_once(world):
    world(fake_pynvml.two_gpus())
    # the H100 lists this process as compute and as graphics: one entry, 6 GiB
    assert nvml.used_by_process(os.getpid()) == 6 * GiB
    assert nvml.used_by_process(fake_pynvml.OTHER_PID) == 8 * GiB  # on a MIG instance
    assert nvml.used_by_process(OTHER_NAMESPACE_PID) == 0  # listed nowhere
    assert nvml.used_by_process(fake_pynvml.OTHER_PID_2) is None  # NVML gives no figure


def test_used_by_process_is_none_where_processes_cannot_be_listed(world):
    fake = world(fake_pynvml.one_gpu())
    for call in ("Compute", "Graphics"):
        fake.gpus[0].fail[f"nvmlDeviceGet{call}RunningProcesses_v3"] = (
            fake_pynvml.NVML_ERROR_NO_PERMISSION
        )
    assert nvml.used_by_process(os.getpid()) is None
    del fake.gpus[0].fail["nvmlDeviceGetGraphicsRunningProcesses_v3"]
    assert nvml.used_by_process(os.getpid()) == 0  # graphics listed: this PID is not there
    world(fake_pynvml.no_library())
    assert nvml.used_by_process(os.getpid()) is None


def test_used_by_process_falls_back_to_older_process_calls(world):
    fake = fake_pynvml.one_gpu()
    fake.driver_lacks |= {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
    }
    world(fake)
    assert nvml.used_by_process(os.getpid()) == 1280 * MiB


def test_the_thread_reads_this_pid_only_after_cells_without_torch_cuda(world, monkeypatch):
    fake = world(fake_pynvml.one_gpu())
    sampled = tracker.MemoryTracker()
    try:
        cell = types.SimpleNamespace(raw_cell="x = 1")
        for number in (1, 2):
            sampled.pre_run_cell(cell)
            sampled.post_run_cell(types.SimpleNamespace(execution_count=number))
            sampled._nvml.wait_idle()
            mine(fake).used += 100 * MiB
        monkeypatch.setattr(tracker, "_cuda_stats", lambda reset=False: (1, ()))
        sampled.pre_run_cell(cell)
        sampled.post_run_cell(types.SimpleNamespace(execution_count=3))
        sampled._nvml.wait_idle()
        first, second, third = sampled.history()
    finally:
        sampled.close()
    assert (first.nvml_process_used, second.nvml_process_used) == (1280 * MiB, 1380 * MiB)
    assert third.devices == 1 and third.nvml_process_used is None  # torch counts its CUDA
    assert third.nvml_used_after is not None  # the device-wide reading goes on


def test_a_reading_taken_once_the_next_cell_began_is_not_that_cells(world, monkeypatch):
    """Cells run back to back (Run all) can start before the thread reads NVML: that
    reading would be the next cell's memory, so it is dropped (None), never misattributed."""
    world(fake_pynvml.one_gpu())
    sampled = tracker.MemoryTracker()
    cell = types.SimpleNamespace(raw_cell="x = 1")
    real = nvml.used_by_process

    def read_while_the_next_cell_starts(pid):
        sampled.pre_run_cell(cell)
        return real(pid)

    try:
        sampled.pre_run_cell(cell)
        sampled.post_run_cell(types.SimpleNamespace(execution_count=1))
        sampled._nvml.wait_idle()
        monkeypatch.setattr(nvml, "used_by_process", read_while_the_next_cell_starts)
        sampled.pre_run_cell(cell)
        sampled.post_run_cell(types.SimpleNamespace(execution_count=2))
        sampled._nvml.wait_idle()
        first, second = sampled.history()
    finally:
        sampled.close()
    assert first.nvml_process_used == 1280 * MiB
    assert second.nvml_process_used is None and second.nvml_used_after is not None


def test_a_failing_process_reading_is_unknown_and_the_thread_goes_on(world, monkeypatch):
    world(fake_pynvml.one_gpu())
    sampled = tracker.MemoryTracker()
    cell = types.SimpleNamespace(raw_cell="x = 1")
    real = nvml.used_by_process

    def unexpected(pid):
        raise TypeError("an answer of a shape nobody expected")

    try:
        monkeypatch.setattr(nvml, "used_by_process", unexpected)
        sampled.pre_run_cell(cell)
        sampled.post_run_cell(types.SimpleNamespace(execution_count=1))
        sampled._nvml.wait_idle()
        monkeypatch.setattr(nvml, "used_by_process", real)
        sampled.pre_run_cell(cell)
        sampled.post_run_cell(types.SimpleNamespace(execution_count=2))
        sampled._nvml.wait_idle()
        first, second = sampled.history()
        assert sampled._nvml._thread.is_alive()
    finally:
        sampled.close()
    assert first.nvml_process_used is None and first.nvml_used_after is not None
    assert second.nvml_process_used == 1280 * MiB


# ---------------------------------------------------------------- the chart in a real shell


def test_chart_bars_are_the_changes_of_this_pids_nvml_memory(ip, paced, world):
    fake = world(fake_pynvml.one_gpu())
    ip.user_ns["fake_gpu_process"] = mine(fake)
    paced("settle = 1")
    grew = paced("fake_gpu_process.used += 300 * 2**20").execution_count
    shrank = paced("fake_gpu_process.used -= 120 * 2**20").execution_count
    same = paced("still = 2").execution_count
    records = settled_history(ip)
    assert all(record.devices == 0 for record in records)  # no torch CUDA figures
    status = dataclasses.replace(gpu_status(leftovers=False), history=tuple(records))
    html = chart.render_history(status)
    assert "<b>What each cell kept</b> (NVML: this process on the GPU, the last" in html
    titles = bar_titles(html)
    after = 1280 * MiB + 300 * MiB
    assert titles[grew] == (
        f"cell [{grew}]: NVML: this process on the GPU +300 MiB, after {format_bytes(after)}"
    )
    assert titles[shrank].startswith(f"cell [{shrank}]: NVML: this process on the GPU -120 MiB")
    assert titles[same].startswith(f"cell [{same}]: NVML: this process on the GPU 0 B")
    assert f"last [{same}] 0 B" in html and f"most &#9650; [{grew}] +300 MiB" in html
    # bars: +300 MiB up, -120 MiB down, on a scale from -200 MiB to +500 MiB
    assert ">+500 MiB</div>" in html and ">-200 MiB</div>" in html
    span = 700 * MiB
    heights = re.findall(r'class="cgg-cell-bar" style="[^"]*height:([0-9.]+)px', html)
    assert f"{chart.PLOT_H * 300 * MiB / span:.1f}" in heights
    assert f"{chart.PLOT_H * 120 * MiB / span:.1f}" in heights
    assert "cgg-chart-why" not in html


def test_the_panels_chart_shows_the_last_cell_at_once(ip, run_cell, paced, world):
    """The panel refreshes right after a cell, maybe before the NVML thread has read: the
    last cell's reading then comes from the panel's own snapshot, and is the same."""
    pytest.importorskip("ipywidgets")
    from colab_gpu_guard.ipython import panel as panel_module

    fake = world(fake_pynvml.one_gpu())
    ip.user_ns["fake_gpu_process"] = mine(fake)
    run_cell("%gpu_panel")
    instance = panel_module.current_panel(ip)
    try:
        instance.toggles["History"].value = True
        paced("settle = 1")
        cell = run_cell("fake_gpu_process.used += 2 * 2**30").execution_count
        assert f"last [{cell}] +2 GiB" in instance.history.value
        assert "(NVML: this process on the GPU, the last" in instance.history.value
        records = settled_history(ip)
        assert records[-1].nvml_process_used == 1280 * MiB + 2 * GiB
    finally:
        instance.close()


def test_inside_a_container_the_chart_falls_back_to_host_memory_and_says_why(ip, paced, world):
    """NVML lists host PIDs; inside a PID namespace no entry is this kernel's."""
    fake = world(fake_pynvml.one_gpu(this_pid=OTHER_NAMESPACE_PID))
    ip.user_ns["fake_gpu_process"] = fake.gpus[0].processes[1]
    paced("settle = 1")
    paced("fake_gpu_process.used += 300 * 2**20")
    records = settled_history(ip)
    assert records[-1].nvml_process_used == 0
    status = dataclasses.replace(gpu_status(leftovers=False), history=tuple(records))
    html = chart.render_history(status)
    assert "(host resident memory, the last" in html and "NVML: this" not in html
    assert (
        f"host memory: NVML lists no GPU memory for this kernel&#x27;s PID {os.getpid()} "
        "(no GPU use yet, or a container, where NVML lists host PIDs)"
    ) in html


def test_without_a_process_list_the_chart_says_nvml_cannot_list_them(ip, paced, world):
    fake = world(fake_pynvml.one_gpu())
    for call in ("Compute", "Graphics"):
        fake.gpus[0].fail[f"nvmlDeviceGet{call}RunningProcesses_v3"] = (
            fake_pynvml.NVML_ERROR_NO_PERMISSION
        )
    paced("settle = 1")
    paced("still = 2")
    records = settled_history(ip)
    assert all(record.nvml_process_used is None for record in records)
    status = dataclasses.replace(gpu_status(leftovers=False), history=tuple(records))
    html = chart.render_history(status)
    assert "(host resident memory, the last" in html
    assert "host memory: NVML does not list the GPU&#x27;s processes here (no permission)" in html


def test_without_nvml_the_chart_is_host_memory_with_nothing_to_explain(ip, paced):
    paced("settle = 1")
    paced("still = 2")
    records = settled_history(ip)
    status = dataclasses.replace(gpu_status(leftovers=False), history=tuple(records))
    html = chart.render_history(status)
    assert "(host resident memory, the last" in html and "cgg-chart-why" not in html


# ---------------------------------------------------------------- which measure


def test_torch_cuda_figures_come_first_then_nvml_then_host():
    cuda = [
        cell_memory(cell=1, devices=1, allocated_after=10 * MiB, nvml_process_used=None),
        cell_memory(cell=2, nvml_process_used=900 * MiB, rss_after=100 * MiB),
    ]
    assert chart.cell_changes(cuda)[0] == chart.CUDA_MEASURE
    nvml_cells = [
        cell_memory(cell=1, nvml_process_used=0, rss_after=100 * MiB),
        cell_memory(cell=2, nvml_process_used=512 * MiB, rss_after=90 * MiB),
        cell_memory(cell=3, nvml_process_used=None, rss_after=95 * MiB),
    ]
    measure, changes = chart.cell_changes(nvml_cells)
    assert measure == chart.NVML_MEASURE
    # the first has nothing before it; [3]'s reading is not in yet
    assert [c.change for c in changes] == [None, 512 * MiB, None]
    # the snapshot's reading stands in for the last cell's
    _, changes = chart.cell_changes(nvml_cells, process_now=600 * MiB)
    assert [c.change for c in changes] == [None, 512 * MiB, 88 * MiB]
    assert changes[-1].after == 600 * MiB
    # only the snapshot's reading, nothing before it: no change to show, so host memory
    unread = [cell_memory(cell=n, rss_after=(100 + n) * MiB) for n in (1, 2)]
    assert chart.cell_changes(unread, process_now=6 * GiB)[0] == chart.HOST_MEASURE
    host = [cell_memory(cell=n, nvml_process_used=0, rss_after=(100 + n) * MiB) for n in (1, 2)]
    measure, changes = chart.cell_changes(host)
    assert measure == chart.HOST_MEASURE and changes[-1].change == MiB
    assert signed_bytes(changes[-1].change) == "+1 MiB"
    # NVML's figure for this PID never moved (a constant context): host memory says more
    still = [
        cell_memory(cell=n, nvml_process_used=6 * GiB, rss_after=(100 + n) * MiB) for n in (1, 2)
    ]
    measure, changes = chart.cell_changes(still)
    assert measure == chart.HOST_MEASURE and changes[-1].change == MiB
    # without host figures, the flat NVML chart is all there is
    flat = [cell_memory(cell=n, nvml_process_used=6 * GiB) for n in (1, 2)]
    assert chart.cell_changes(flat)[0] == chart.NVML_MEASURE
