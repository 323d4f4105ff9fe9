"""gpu_status(): the combined snapshot, its text / HTML / JSON views, and %gpu_status."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colab_gpu_guard import cuda_health, nvml, status
from colab_gpu_guard.cells.tracker import CellMemory
from colab_gpu_guard.frameworks import torch as torch_support
from colab_gpu_guard.leftovers import Leftover, LeftoverList
from colab_gpu_guard.serialize import from_data, to_data
from colab_gpu_guard.status import GpuStatus, gpu_status
from colab_gpu_guard.units import format_bytes
from tests import fake_pynvml
from tests.child import run_python
from tests.fake_cuda import fake_torches
from tests.fake_pynvml import GiB, MiB
from tests.shared_shell import flush_output_history

T4_UUID = "11111111-2222-3333-4444-555555555555"  # as CUDA prints it: no GPU- prefix
SCRIPT = '<script>alert("x")</script>'


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    for key in ("COLAB_RELEASE_TAG", "COLAB_GPU", "COLAB_BACKEND_VERSION", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    yield
    nvml.set_pynvml(None)
    cuda_health.clear()


@pytest.fixture
def fake():
    def use(world):
        nvml.set_pynvml(fake_pynvml.install(world))
        return world

    return use


class StubCuda:
    """torch.cuda as far as status asks: an initialised CUDA with given devices."""

    def __init__(self, devices):
        self.devices = devices  # list of (properties, memory_stats dict)

    def is_initialized(self):
        return True

    def device_count(self):
        return len(self.devices)

    def memory_stats(self, index):
        return self.devices[index][1]

    def get_device_properties(self, index):
        properties = self.devices[index][0]
        if properties is None:
            raise RuntimeError("no properties")
        return properties


def stats(allocated, reserved, peak=None, ooms=0):
    return {
        "allocated_bytes.all.current": allocated,
        "reserved_bytes.all.current": reserved,
        "allocated_bytes.all.peak": peak if peak is not None else allocated,
        "num_ooms": ooms,
    }


@pytest.fixture
def cuda_torch(monkeypatch):
    """use(devices) installs a stub torch whose CUDA is initialised with `devices`."""

    def use(devices):
        stub = types.SimpleNamespace(
            __version__="2.3.0+cu121",
            version=types.SimpleNamespace(cuda="12.1"),
            cuda=StubCuda(devices),
        )
        monkeypatch.setattr(torch_support, "loaded", lambda: stub)
        return stub

    return use


@pytest.fixture
def leftovers_module(monkeypatch):
    """use(items or an exception): what the status's leftovers scan returns."""
    calls = []

    from colab_gpu_guard.cells import notebook_leftovers

    def use(result):
        def find_leftovers(device=None, namespace=None, deep=False, budget_s=None):
            calls.append(
                {"device": device, "namespace": namespace, "deep": deep, "budget_s": budget_s}
            )
            if isinstance(result, Exception):
                raise result
            return LeftoverList(result)  # one entry per block, biggest first, as the scan's

        monkeypatch.setattr(notebook_leftovers, "find_leftovers", find_leftovers)
        return calls

    return use


@pytest.fixture
def tracker_module(monkeypatch):
    """use(cells): the tracker's history is `cells`."""
    from colab_gpu_guard.cells import tracker

    def use(cells):
        monkeypatch.setattr(tracker, "history_tail", lambda last: (list(cells)[-last:], len(cells)))

    return use


# ---------------------------------------------------------------- the real no-GPU path


def test_real_no_gpu_snapshot_reports_cleanly():
    nvml.set_pynvml(None)
    snap = gpu_status()
    if snap.nvml.available:
        pytest.skip("this machine has an NVIDIA driver")
    assert snap.schema_version == status.SCHEMA_VERSION
    assert not snap.has_gpu and snap.gpu_count == 0
    text = snap.to_text()
    assert "No GPU: no NVIDIA driver on this machine" in text
    assert "host RAM" in text and f"PID {os.getpid()}" in text
    html = snap.to_html()
    assert "No GPU: no NVIDIA driver" in html
    assert GpuStatus.from_json(snap.to_json()) == snap
    assert snap.host.ram_total and snap.host.ram_total > 0
    assert snap.memory == ()


def test_colab_without_gpu_says_how_to_get_one(monkeypatch, fake):
    fake(fake_pynvml.no_library())
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20240101")
    snap = gpu_status(leftovers=False)
    assert snap.host.runtime == "Colab"
    assert status.COLAB_NO_GPU in snap.notes
    assert "Change runtime type" in snap.to_text()


def test_kaggle_is_detected(monkeypatch):
    monkeypatch.setenv("KAGGLE_KERNEL_RUN_TYPE", "Interactive")
    assert status.detect_runtime() == "Kaggle"


def test_torch_versions_as_imported(fake):
    fake(fake_pynvml.zero_gpus())
    torch = pytest.importorskip("torch")
    snap = gpu_status(leftovers=False)
    assert snap.torch.version == torch.__version__
    assert snap.torch.cuda_runtime == torch.version.cuda
    if torch.version.cuda is None:  # said once, on the torch line: no GPU to use anyway
        assert snap.torch.cpu_only and not any("CPU-only build" in note for note in snap.notes)
        fake(fake_pynvml.one_gpu())  # a GPU it cannot use: then a note says so
        with_gpu = gpu_status(leftovers=False)
        assert any("is a CPU-only build: it cannot use a GPU" in n for n in with_gpu.notes)
    assert snap.torch.health == cuda_health.health().state


def test_the_torch_build_line_says_what_the_build_can_use(fake, monkeypatch):
    """A CPU build is said to be one (no 'CUDA context: not initialised' for the normal
    state of a CPU machine); a ROCm build, which drives AMD GPUs through torch.cuda, is not
    called CPU-only."""
    torch = pytest.importorskip("torch")
    fake(fake_pynvml.no_library())
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    text = gpu_status(leftovers=False).to_text()
    assert f"torch {torch.__version__} | CPU-only build: no CUDA\n" in text
    assert "CUDA context" not in text and text.count("CPU-only") == 1  # no GPU: said once
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")
    snap = gpu_status(leftovers=False)
    assert not snap.torch.cpu_only and snap.torch.hip_runtime == "6.2.41133"
    text = snap.to_text()
    assert "ROCm (HIP) 6.2.41133 | CUDA context: not initialised" in text
    assert "CPU-only" not in text


def test_broken_cuda_context_is_reported(fake):
    fake(fake_pynvml.one_gpu())
    cuda_health.mark_broken("device-side assert triggered")
    snap = gpu_status(leftovers=False)
    assert snap.torch.health == "broken"
    assert cuda_health.RESTART_ADVICE in snap.notes
    assert "device-side assert triggered" in snap.to_text()


@pytest.fixture
def fake_torch(monkeypatch):
    """A torch stand-in whose CUDA has started (see tests/fake_cuda.py)."""
    with fake_torches(monkeypatch) as use:
        yield use


def test_busy_gpu_is_reported_busy_not_broken(fake, fake_torch):
    fake(fake_pynvml.one_gpu())
    stub = fake_torch()
    stub.cuda.release.clear()  # a long kernel still running
    assert cuda_health.health(probe=True, timeout=0.05).busy
    snap = gpu_status(leftovers=False)
    assert snap.torch.health == "busy"
    assert snap.torch.health_detail.startswith(
        "torch.cuda.synchronize() on cuda:0 has not returned after "
    )
    assert cuda_health.RESTART_ADVICE not in snap.notes
    assert (
        "the GPU is still running queued CUDA work: busy, not broken (%gpu_reset waits for it "
        "before emptying the cache)" in snap.notes
    )
    text = snap.to_text()
    assert "CUDA context: busy (torch.cuda.synchronize() on cuda:0 has not returned" in text
    assert "restart" not in text.lower()
    from colab_gpu_guard.status.panel_html import render_header

    header = render_header(snap)
    assert "cgg-health-busy" in header and "GPU busy: queued CUDA work still running" in header
    stub.cuda.release.set()
    assert cuda_health._running.done.wait(5)
    assert gpu_status(leftovers=False, probe=True).torch.health == "ok"


def test_forked_child_is_reported_as_forked(fake, fake_torch):
    fake(fake_pynvml.one_gpu())
    fake_torch(bad_fork=True)
    snap = gpu_status(leftovers=False, probe=True)
    assert snap.torch.health == "forked" and not snap.torch.cuda_initialized
    assert cuda_health.FORKED_DETAIL in snap.notes
    assert not any("not initialised" in note for note in snap.notes)
    assert "CUDA context: forked (this process was forked" in snap.to_text()


# ---------------------------------------------------------------- allocator beside NVML


def test_allocator_beside_nvml_matched_by_uuid(fake, cuda_torch):
    fake(fake_pynvml.one_gpu())
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(1 * GiB, 1100 * MiB, 2 * GiB, 1))])
    snap = gpu_status(leftovers=False)
    assert snap.torch.cuda_initialized and snap.torch.device_count == 1
    (memory,) = snap.memory
    assert memory.matched_by == "uuid" and memory.nvml_index == 0
    assert (memory.allocated, memory.reserved) == (1 * GiB, 1100 * MiB)
    assert memory.peak_allocated == 2 * GiB and memory.num_ooms == 1
    assert memory.nvml_used_by_this_process == 1280 * MiB
    assert memory.context_and_other == 180 * MiB
    text = snap.to_text()
    assert "CUDA context + other libraries 180 MiB" in text
    assert "cuda:0" in text and "1 OOM" in text
    assert snap.memory_for(0) == (memory,)


def test_allocator_matched_by_pci_bus_id(fake, cuda_torch):
    fake(fake_pynvml.one_gpu())
    properties = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0, pci_device_id=4)
    cuda_torch([(properties, stats(0, 0))])
    assert gpu_status(leftovers=False).memory[0].matched_by == "pci bus id"


def test_allocator_matched_by_index_only_when_nothing_remaps(fake, cuda_torch, monkeypatch):
    fake(fake_pynvml.one_gpu())
    cuda_torch([(None, stats(0, 2 * MiB))])
    assert gpu_status(leftovers=False).memory[0].matched_by == "index (assumed)"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    snap = gpu_status(leftovers=False)
    assert snap.memory[0].matched_by == "none" and snap.memory[0].nvml_index is None
    assert "cuda:0 could not be matched to an NVML GPU" in snap.notes
    assert "this kernel  cuda:0" in snap.to_text()


def test_allocator_on_a_mig_instance(fake, cuda_torch):
    fake(fake_pynvml.two_gpus())
    mig_uuid = "MIG-aaaaaaaa-2222-2222-2222-222222222222"
    cuda_torch([(types.SimpleNamespace(uuid=mig_uuid), stats(0, 0))])
    (memory,) = gpu_status(leftovers=False).memory
    assert (memory.nvml_index, memory.mig_index, memory.uuid) == (0, 2, mig_uuid)


# ---------------------------------------------------------------- this kernel, by PID or memory


def in_a_container(other_used=5 * GiB):
    """one_gpu() seen from a container: NVML lists this kernel under a host PID, beside
    another process using `other_used`."""
    world = fake_pynvml.one_gpu(this_pid=fake_pynvml.OTHER_PID_2)
    world.gpus[0].processes[0].used = other_used
    world.gpus[0].used = other_used + 1280 * MiB
    return world


def test_kernel_matched_by_pid_says_so(fake, cuda_torch):
    fake(fake_pynvml.one_gpu())
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(GiB, GiB))])
    snap = gpu_status(leftovers=False)
    assert snap.memory[0].nvml_identified_by == "pid"
    assert "matched by memory" not in snap.to_text() + snap.to_html()


def test_kernel_matched_by_memory_in_a_container(fake, cuda_torch):
    fake(in_a_container())
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(GiB, GiB))])
    snap = gpu_status(leftovers=False)
    (memory,) = snap.memory
    assert memory.nvml_identified_by == "memory"
    # its 1.25 GiB fits torch's 1 GiB reserved + a context; the other's 5 GiB does not
    assert memory.nvml_used_by_this_process == 1280 * MiB
    assert memory.context_and_other == 256 * MiB
    mine = snap.nvml.devices[0].this_process()
    assert mine.pid == fake_pynvml.OTHER_PID_2 and mine.matched_by_memory
    assert snap.nvml.devices[0].other_processes()[0].pid == fake_pynvml.OTHER_PID
    names_note, note = snap.notes
    # host PIDs name other processes (or none) here: no name is shown rather than a wrong one
    assert names_note.startswith("process names are not shown: NVML's PIDs are the host's")
    assert all(p.name is None for p in snap.nvml.devices[0].processes)
    assert f"no process with this kernel's PID {os.getpid()}" in note
    assert f"matched by memory: PID {fake_pynvml.OTHER_PID_2}, the one process using" in note
    assert "1.25 GiB, between torch's 1 GiB reserved and that + 1.5 GiB for the CUDA" in note
    text = snap.to_text()
    assert "NVML 1.25 GiB (matched by memory) -> CUDA context + other libraries 256 MiB" in text
    assert f"{fake_pynvml.OTHER_PID_2}    1.25 GiB  (name n/a)  <- this kernel (matched by" in text
    html = snap.to_html()
    assert "this kernel (matched by memory)" in html and 'class="cgg-me"' in html
    data = json.loads(snap.to_json())
    assert data["memory"][0]["nvml_identified_by"] == "memory"
    flagged = [p for p in data["nvml"]["devices"][0]["processes"] if p["matched_by_memory"]]
    assert [p["pid"] for p in flagged] == [fake_pynvml.OTHER_PID_2]
    assert GpuStatus.from_json(snap.to_json()) == snap
    # the panel: the match is this kernel's context, not "other processes"
    from colab_gpu_guard.status import panel_html

    segments = dict(panel_html.device_segments(snap, snap.nvml.devices[0]))
    assert segments["context"] == 256 * MiB and segments["others"] == 5 * GiB
    processes = panel_html.render_processes(snap)
    assert "other_trainer" not in processes and "PID 5000001" in processes
    assert "(name n/a) (this kernel, matched by memory)" in processes


@pytest.mark.parametrize(
    "other_used, reserved, why",
    [
        (2560 * MiB, GiB, "both fit: 1.25 GiB and 2.5 GiB lie in 1 GiB .. 1 GiB + 1.5 GiB"),
        (5 * GiB, 3 * GiB, "neither fits: nobody uses 3 GiB or more but 5 GiB, over the margin"),
    ],
)
def test_kernel_not_identified_when_the_fit_is_not_unique(
    fake, cuda_torch, other_used, reserved, why
):
    fake(in_a_container(other_used))
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(reserved, reserved))])
    snap = gpu_status(leftovers=False)
    (memory,) = snap.memory
    assert memory.nvml_identified_by == "not identified", why
    assert memory.nvml_used_by_this_process is None
    assert snap.nvml.devices[0].this_process() is None
    names_note, note = snap.notes
    assert names_note.startswith("process names are not shown")
    assert "could not be identified by memory either (exactly one process must use" in note
    assert "NVML reports host PIDs" in note
    text = snap.to_text()
    assert "processes    2, " in text and "(this kernel is among them, not identified" in text
    assert "NVML figure n/a: this kernel not identified among NVML's processes" in text
    assert "this kernel is among them, not identified" in snap.to_html()
    from colab_gpu_guard.status import panel_html

    processes = panel_html.render_processes(snap)
    assert "2 processes (this kernel is among them, not identified" in processes
    device = panel_html.render_device(snap, snap.nvml.devices[0])
    assert "other processes + this kernel&#x27;s CUDA context" in device


def test_a_process_of_unknown_size_could_be_this_kernel(fake, cuda_torch):
    world = fake(in_a_container())
    world.gpus[0].processes[0].used = None  # NVML does not say how much it uses
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(GiB, GiB))])
    assert gpu_status(leftovers=False).memory[0].nvml_identified_by == "not identified"


def test_only_compute_processes_can_be_this_kernel(fake, cuda_torch):
    world = fake(in_a_container())
    world.gpus[0].processes[1].compute = False  # a graphics-only process (a display server)
    world.gpus[0].processes[1].graphics = True
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(GiB, GiB))])
    assert gpu_status(leftovers=False).memory[0].nvml_identified_by == "not identified"


def two_t4s_in_a_container():
    """GPU 0: two processes fit this kernel's figures; GPU 1: one of them, under the same
    host PID (a process has one PID on every GPU), and a big one."""
    a, b, c = 5_000_010, 5_000_011, 5_000_012
    first = fake_pynvml.FakeGpu(
        used=2500 * MiB,
        processes=[fake_pynvml.FakeProcess(a, 1200 * MiB), fake_pynvml.FakeProcess(b, 1300 * MiB)],
    )
    second = fake_pynvml.FakeGpu(
        uuid="GPU-22222222-2222-3333-4444-555555555555",
        bus_id="00000000:00:05.0",
        used=5 * GiB,
        processes=[fake_pynvml.FakeProcess(b, 1100 * MiB), fake_pynvml.FakeProcess(c, 4 * GiB)],
    )
    return fake_pynvml.FakeWorld(gpus=[first, second]), b


def test_the_same_host_pid_must_fit_on_every_gpu_with_a_context(fake, cuda_torch):
    world, kernel = two_t4s_in_a_container()
    fake(world)
    second = "22222222-2222-3333-4444-555555555555"
    cuda_torch(
        [
            (types.SimpleNamespace(uuid=T4_UUID), stats(GiB, GiB)),
            (types.SimpleNamespace(uuid=second), stats(GiB, GiB)),
        ]
    )
    snap = gpu_status(leftovers=False)
    assert [m.nvml_identified_by for m in snap.memory] == ["memory", "memory"]
    assert [d.this_process().pid for d in snap.nvml.devices] == [kernel, kernel]
    assert [m.context_and_other for m in snap.memory] == [276 * MiB, 76 * MiB]


def test_gpus_without_a_context_are_not_searched(fake, cuda_torch):
    world, kernel = two_t4s_in_a_container()
    world.gpus[0].processes.pop()  # GPU 0 runs another job only: this kernel is not there
    world.gpus[0].used = 1200 * MiB
    fake(world)
    second = "22222222-2222-3333-4444-555555555555"
    stub = cuda_torch(
        [
            (types.SimpleNamespace(uuid=T4_UUID), stats(0, 0)),
            (types.SimpleNamespace(uuid=second), stats(GiB, GiB)),
        ]
    )
    # the driver says this process has a context on cuda:1 only (it creates none asking)
    stub._C = types.SimpleNamespace(_cuda_hasPrimaryContext=lambda index: index == 1)
    snap = gpu_status(leftovers=False)
    assert [m.nvml_identified_by for m in snap.memory] == ["", "memory"]
    assert snap.nvml.devices[1].this_process().pid == kernel
    assert snap.nvml.devices[0].this_process() is None
    # were GPU 0 searched, its job (1.17 GiB, within 0 B + a context) would have to be this
    # kernel too, under another PID: no one process fits both, so nothing is matched
    stub._C = types.SimpleNamespace(_cuda_hasPrimaryContext=lambda index: True)
    snap = gpu_status(leftovers=False)
    assert [m.nvml_identified_by for m in snap.memory] == ["not identified", "not identified"]


def test_kernel_on_a_mig_instance_is_matched_among_that_instances_processes(fake, cuda_torch):
    fake(fake_pynvml.two_gpus(this_pid=fake_pynvml.OTHER_PID_2 + 1))  # a container
    mig_uuid = "MIG-aaaaaaaa-1111-1111-1111-111111111111"  # slot 0: mig_job_a uses 8 GiB
    cuda_torch([(types.SimpleNamespace(uuid=mig_uuid), stats(7 * GiB, 7 * GiB))])
    snap = gpu_status(leftovers=False)
    (memory,) = snap.memory
    # mig_job_b (its size unknown) runs on the other instance: it cannot be this kernel
    assert memory.mig_index == 0 and memory.nvml_identified_by == "memory"
    assert memory.nvml_used_by_this_process == 8 * GiB
    assert snap.nvml.devices[0].this_process().pid == fake_pynvml.OTHER_PID


def test_a_gpu_where_nvml_lists_no_process_at_all_says_so(fake, cuda_torch):
    from colab_gpu_guard.status import panel_html

    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].processes = []  # NVML lists none, though this kernel has a context there
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(GiB, GiB))])
    snap = gpu_status(leftovers=False)
    assert snap.memory[0].nvml_identified_by == "not listed"
    (note,) = snap.notes
    assert note.startswith("NVML lists no process on GPU 0, not even this kernel")
    text = snap.to_text()
    assert "processes    none (NVML lists not even this kernel" in text
    assert "NVML figure n/a: NVML lists no process on this GPU" in text
    assert "processes: none (NVML lists not even this kernel" in snap.to_html()
    assert "NVML lists not even this kernel" in panel_html.render_processes(snap)


@pytest.mark.cpu_only
def test_real_cpu_torch_has_nothing_to_identify(fake):
    pytest.importorskip("torch")
    fake(in_a_container())
    snap = gpu_status(leftovers=False)
    assert snap.memory == () and not any("PID" in note for note in snap.notes)
    assert snap.nvml.devices[0].this_process() is None


def test_broken_context_is_not_asked_for_properties(fake, cuda_torch):
    fake(fake_pynvml.one_gpu())
    stub = cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(0, 0))])

    def no_calls(index):
        raise AssertionError("get_device_properties called on a broken context")

    stub.cuda.get_device_properties = no_calls
    cuda_health.mark_broken("illegal memory access")
    snap = gpu_status(leftovers=False)
    assert snap.memory[0].matched_by == "index (assumed)"


# ---------------------------------------------------------------- leftovers and history


def test_leftovers_plug_in(fake, leftovers_module):
    fake(fake_pynvml.zero_gpus())
    items = [
        Leftover(f"t{i}", "user namespace", (i, 4), "float32", "cuda:0", i * MiB, i)
        for i in range(12, 0, -1)
    ]
    calls = leftovers_module(items)
    namespace = {"x": 1}
    snap = gpu_status(namespace=namespace, top=3)
    assert calls[0]["namespace"] is namespace
    assert calls[0]["budget_s"] == 2.0  # a snapshot bounds its leftovers scan
    assert [e.name for e in snap.leftovers][:1] == ["t12"]
    assert len(snap.leftovers) == 3 and snap.leftovers_count == 12
    assert snap.leftovers_bytes == sum(range(1, 13)) * MiB
    assert snap.leftovers_freeable_bytes == snap.leftovers_bytes  # no "user variable" holder
    assert snap.leftovers[0] == Leftover(
        "t12", "user namespace", (12, 4), "float32", "cuda:0", 12 * MiB, 12, ()
    )
    text = snap.to_text()
    assert "leftovers: 78 MiB in 12 arrays, by what holds them" in text
    assert "12 MiB  t12  float32 [12x4] cuda:0  (user namespace)" in text
    assert "... 9 more holders, 45 MiB" in text
    assert snap.leftovers[0].framework == ""


def test_leftovers_from_the_real_scan_top_count_and_total(fake, monkeypatch):
    """Only the entries shown are made: the totals come from the scan's columns."""
    torch = pytest.importorskip("torch")
    from colab_gpu_guard import leftovers

    made = []
    make_all = leftovers.LeftoverList._make_all
    monkeypatch.setattr(
        leftovers.LeftoverList, "_make_all", lambda self: made.append(len(self)) or make_all(self)
    )
    fake(fake_pynvml.zero_gpus())
    big = torch.zeros(1000)
    namespace = {"big": big, "view": big[10:20], "small": [torch.zeros(10) for _ in range(30)]}
    snap = gpu_status(namespace=namespace, top=2, processes=False)
    assert made == []
    assert [e.name for e in snap.leftovers] == ["big", "small[0]"]
    assert "view" in snap.leftovers[0].shared_with
    assert snap.leftovers_count == 31
    assert snap.leftovers_bytes == 1000 * 4 + 30 * 10 * 4  # the view counted once
    assert snap.leftovers_freeable_bytes == 0  # all held by user variables


def test_leftovers_freeable_total_counts_what_no_user_variable_holds(fake, ip, run_cell):
    """The total the panel's "Free memory" line shows covers every block found, not only
    the top entries the snapshot carries."""
    pytest.importorskip("torch")
    fake(fake_pynvml.zero_gpus())
    flush_output_history(ip)  # the global test shell's earlier outputs
    run_cell("import torch\nkept = torch.zeros(1000)")
    try:
        before = gpu_status(top=2, processes=False)  # whatever earlier tests left in sys.last_*
        for _ in range(12):
            run_cell("torch.zeros(250)")  # 1000 bytes each, held only by the output history
        snap = gpu_status(top=2, processes=False)
        assert len(snap.leftovers) == 2
        assert snap.leftovers_count - before.leftovers_count == 12
        assert snap.leftovers_freeable_bytes - before.leftovers_freeable_bytes == 12 * 1000
        assert snap.leftovers_bytes - before.leftovers_bytes == 12 * 1000
        assert snap.leftovers_bytes - snap.leftovers_freeable_bytes >= 4000  # `kept`
    finally:
        flush_output_history(ip)
        ip.user_ns.pop("kept", None)


def test_leftovers_failing(fake, leftovers_module):
    fake(fake_pynvml.zero_gpus())
    leftovers_module(RuntimeError("boom"))
    snap = gpu_status()
    assert snap.leftovers is None
    assert snap.leftovers_note == "could not be listed: RuntimeError: boom"


def test_no_leftovers_does_not_look(fake, leftovers_module):
    fake(fake_pynvml.zero_gpus())
    calls = leftovers_module([])
    snap = gpu_status(leftovers=False)
    assert calls == [] and snap.leftovers is None and snap.leftovers_note == "not collected"
    assert "leftovers" not in snap.to_text()


def test_history_plug_in(fake, tracker_module):
    fake(fake_pynvml.zero_gpus())
    cells = [
        CellMemory(n, 0, n * MiB, 2 * n * MiB, 4 * MiB, 0, None, n == 3, MiB if n == 3 else 0, 0.5)
        for n in range(1, 4)
    ]
    cells = [dataclasses.replace(cell, devices=1, rss_after=600 * MiB) for cell in cells]
    cells[2] = dataclasses.replace(cells[2], rerun_of=2, leak_kind="cuda:0")
    cells.append(CellMemory(4, 0, 0, 0, 0, 0, None, False, 0, 0.25, rss_after=700 * MiB))
    tracker_module(cells)
    snap = gpu_status(leftovers=False, history=True, history_limit=3)
    assert [r.cell for r in snap.history] == [2, 3, 4]
    assert snap.history_note == "last 3 of 4 cells"
    assert snap.history[1].rerun_leak is True and snap.history[1].leak_bytes == MiB
    assert snap.history[1].nvml_used_after is None
    text = snap.to_text()
    assert "[3] allocated 3 MiB (+3 MiB)" in text
    assert "LEAK: rerun of [2] kept +1 MiB on cuda:0 again" in text  # as %gpu_history says
    assert "[4] host RSS 700 MiB | 0.25 s" in text  # no CUDA figures: no 'allocated 0 B'
    assert GpuStatus.from_json(snap.to_json()) == snap
    assert gpu_status(leftovers=False).history is None  # only when asked


# ---------------------------------------------------------------- views


def many_processes_world():
    world = fake_pynvml.one_gpu()
    gpu = world.gpus[0]
    gpu.processes = [
        fake_pynvml.FakeProcess(pid=5_000_100 + i, used=(10 - i) * 100 * MiB, name=f"job{i}")
        for i in range(8)
    ]
    gpu.processes.append(fake_pynvml.FakeProcess(pid=os.getpid(), used=10 * MiB))
    return world


def test_text_lists_the_biggest_processes_and_always_this_kernel(fake):
    fake(many_processes_world())
    text = gpu_status(leftovers=False).to_text()
    assert "job4" in text and "job5" not in text
    assert "<- this kernel" in text
    assert "... and 3 more (%gpu_status --processes lists all)" in text
    everything = gpu_status(leftovers=False, process_limit=None).to_text()
    assert all(f"job{i}" in everything for i in range(8)) and "more" not in everything


def test_unavailable_fields_are_shown_with_reasons(fake):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].fail["nvmlDeviceGetPowerUsage"] = fake_pynvml.NVML_ERROR_NOT_SUPPORTED
    snap = gpu_status(leftovers=False)
    text = snap.to_text()
    assert "power n/a / 70.0 W" in text
    assert "not available: mig_mode (not supported), power_draw_w (not supported)" in text
    assert "power_draw_w (not supported)" in snap.to_html()


def test_lost_gpu_is_a_banner_with_the_fix_in_every_view(fake):
    from colab_gpu_guard.status import panel_html

    world = fake(fake_pynvml.two_gpus())
    world.gpus[1].lost = "calls"
    snap = gpu_status(leftovers=False)
    text = snap.to_text()
    assert "GPU IS LOST" in text and "NVIDIA A100-SXM4-40GB" in text
    banner = next(line for line in text.splitlines() if line.startswith("!! "))
    # first, above the devices, with NVML's meaning and the fix for this runtime
    assert text.index(banner) < text.index("\nGPU 0 |")
    assert "GPU 1 is lost: it has fallen off the bus or otherwise become inaccessible" in banner
    assert "(NVML error 15, GPU_IS_LOST)" in banner
    assert "Fix: the machine needs a reboot" in banner and "restarting the kernel is not" in banner
    # the lost GPU's own section: one line, not a list of fields each "n/a (GPU is lost)"
    assert "  lost         NVML answers nothing more about it: see the fix above" in text
    assert "(GPU is lost)" not in text
    html = snap.to_html()
    assert html.index('class="cgg-banner"') < html.index("GPU 0 |")
    assert "Fix: the machine needs a reboot" in html
    lost = snap.nvml.devices[1]
    device = panel_html.render_device(snap, lost)
    assert 'class="cgg-banner"' in device and "Fix: the machine needs a reboot" in device
    assert 'class="cgg-banner"' not in panel_html.render_device(snap, snap.nvml.devices[0])
    assert "GPU is lost" not in str(snap.notes)  # a banner, not a line in the notes


def test_lost_gpu_fix_on_colab_is_a_new_runtime(fake, monkeypatch):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].lost = "handle"
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20240101")
    text = gpu_status(leftovers=False).to_text()
    assert "!! GPU 0 is lost" in text  # its name is unknown: lost at the handle
    assert "Fix: Runtime > Disconnect and delete runtime, then connect again" in text


def test_nvml_failing_to_start_on_a_lost_gpu_is_a_banner_too(fake):
    from colab_gpu_guard.status import panel_html

    fake(fake_pynvml.FakeWorld(init_error=fake_pynvml.NVML_ERROR_GPU_IS_LOST))
    snap = gpu_status(leftovers=False)
    assert snap.nvml.error_kind == "NVMLError_GpuIsLost"
    assert "!! a GPU is lost: it has fallen off the bus" in snap.to_text()
    assert 'class="cgg-banner"' in snap.to_html()
    assert "a GPU is lost" in panel_html.render_no_gpu(snap)


def test_a_v1_used_figure_says_it_includes_driver_reserved_memory(fake):
    from colab_gpu_guard.status import panel_html

    world = fake(fake_pynvml.one_gpu())
    world.driver_lacks.add("nvmlDeviceGetMemoryInfo_v2")
    snap = gpu_status(leftovers=False)
    text = snap.to_text()
    assert (
        "3.91 GiB used (including driver-reserved memory: this driver reports them together) "
        "/ 15 GiB total" in text
    )
    device = snap.nvml.devices[0]
    segments = dict(panel_html.device_segments(snap, device))
    assert "driver" not in segments  # inside NVML's v1 "used", and labelled so
    # the other process is charged 2.5 GiB; the rest of v1's used is charged to no process
    assert segments["others"] == 2560 * MiB
    assert segments["unlisted+driver"] == 3750 * MiB + 256 * MiB - 1280 * MiB - 2560 * MiB
    assert (
        "used, charged to no process NVML lists (including driver-reserved memory)"
        in panel_html.render_device(snap, device)
    )
    record = dataclasses.replace(
        CellMemory(1, 0, 0, 0, 0, 0, 5 * GiB, False, 0, 0.1), nvml_used_call="v1"
    )
    snap = dataclasses.replace(snap, history=(record,))
    assert "NVML used, all processes 5 GiB (including driver-reserved memory)" in snap.to_text()


def test_views_render_the_snapshot_without_querying_again(fake):
    world = fake(fake_pynvml.one_gpu())
    snap = gpu_status(leftovers=False)
    calls = len(world.calls)
    world.gpus[0].name = "Changed"
    views = [snap.to_text(), snap.to_html(), snap.to_json(), str(snap), snap._repr_html_()]
    assert len(world.calls) == calls
    assert all("Changed" not in view for view in views)
    assert [snap.to_text(), snap.to_html(), snap.to_json()] == views[:3]


def test_repr_pretty(fake):
    from IPython.lib.pretty import pretty

    fake(fake_pynvml.one_gpu())
    snap = gpu_status(leftovers=False)
    assert pretty(snap) == snap.to_text()


def test_html_escapes_every_outside_name(fake, leftovers_module, tracker_module):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].name = "<img src=x onerror=alert(1)>"
    world.gpus[0].processes[0].name = SCRIPT  # NVML's name: psutil cannot see that PID
    leftovers_module(
        [Leftover(SCRIPT, f"dict key {SCRIPT}", (2,), "<dtype>", "cuda:0", 8, 1, (SCRIPT,))]
    )
    tracker_module([CellMemory(1, 0, 0, 0, 0, 0, None, False, 0, 0.1)])
    snap = gpu_status(history=True)
    html = snap.to_html()
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "&lt;dtype&gt;" in html
    assert SCRIPT in snap.to_text()  # plain text is not HTML: shown as is


# ---------------------------------------------------------------- JSON


def full_snapshot(fake, world, leftovers_module, tracker_module):
    fake(world)
    leftovers_module([Leftover("a", "user namespace", (3,), "int64", "cpu", 24, 7, ("b",))])
    tracker_module([CellMemory(5, 0, 1, 2, 3, 0, 9, False, 0, 0.25)])
    return gpu_status(history=True)


@pytest.mark.parametrize(
    "world",
    [fake_pynvml.no_library, fake_pynvml.zero_gpus, fake_pynvml.one_gpu, fake_pynvml.two_gpus],
)
def test_json_round_trip_and_schema(fake, world, leftovers_module, tracker_module):
    jsonschema = pytest.importorskip("jsonschema")
    snap = full_snapshot(fake, world(), leftovers_module, tracker_module)
    data = json.loads(snap.to_json())
    assert data["schema_version"] == status.SCHEMA_VERSION
    jsonschema.validate(data, status.json_schema())
    again = GpuStatus.from_dict(data)
    assert again == snap and again.to_json() == snap.to_json()
    assert again.to_text() == snap.to_text() and again.to_html() == snap.to_html()


def test_schema_rejects_wrong_documents(fake):
    jsonschema = pytest.importorskip("jsonschema")
    fake(fake_pynvml.one_gpu())
    data = gpu_status(leftovers=False).to_dict()
    schema = status.json_schema()
    broken = json.loads(json.dumps(data))
    broken["nvml"]["devices"][0]["memory_total"] = "lots"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    missing = dict(data)
    del missing["host"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(missing, schema)


def test_from_dict_refuses_other_schema_versions(fake):
    fake(fake_pynvml.zero_gpus())
    data = gpu_status(leftovers=False).to_dict()
    data["schema_version"] = status.SCHEMA_VERSION + 1
    with pytest.raises(ValueError, match="schema_version"):
        GpuStatus.from_dict(data)
    with pytest.raises(ValueError):
        GpuStatus.from_dict({})


def test_snapshot_is_immutable_and_hashable(fake):
    fake(fake_pynvml.two_gpus())
    snap = gpu_status(leftovers=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        snap.notes = ()  # type: ignore[misc]
    assert hash(snap) == hash(GpuStatus.from_json(snap.to_json()))


finite = st.floats(allow_nan=False, allow_infinity=False)
names = st.text(max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    entry=st.builds(
        Leftover,
        name=names,
        holder=names,
        shape=st.lists(st.integers(0, 10**6), max_size=4).map(tuple),
        dtype=names,
        device=names,
        nbytes=st.integers(0, 2**50),
        storage_id=st.integers(0, 2**63),
        shared_with=st.lists(names, max_size=3).map(tuple),
        framework=names,
        array_nbytes=st.integers(0, 2**50),
        holders=st.lists(names, max_size=3).map(tuple),
    ),
    cell=st.builds(
        CellMemory,
        cell=st.none() | st.integers(0, 10**6),
        allocated_before=st.integers(0, 2**50),
        allocated_after=st.integers(0, 2**50),
        peak=st.integers(0, 2**50),
        reserved_after=st.integers(0, 2**50),
        ooms=st.integers(0, 100),
        nvml_used_after=st.none() | st.integers(0, 2**50),
        rerun_leak=st.booleans(),
        leak_bytes=st.integers(0, 2**50),
        duration_s=finite,
        rss_after=st.none() | st.integers(0, 2**50),
        devices=st.integers(0, 8),
        leak_kind=names,
        rerun_of=st.none() | st.integers(0, 10**6),
    ),
)
def test_records_round_trip(entry, cell):
    for record in (entry, cell):
        data = json.loads(json.dumps(to_data(record)))
        assert from_data(type(record), data) == record


# ---------------------------------------------------------------- %gpu_status


def test_magic_displays_text_and_html(ip, fake):
    from IPython.utils.capture import capture_output

    fake(fake_pynvml.one_gpu())
    with capture_output() as captured:
        ip.run_line_magic("gpu_status", "")
    (output,) = captured.outputs
    assert "text/plain" in output.data and "text/html" in output.data
    assert "Tesla T4" in output.data["text/plain"]
    assert 'class="cgg-status"' in output.data["text/html"]


def test_magic_real_no_gpu_path(ip):
    from IPython.utils.capture import capture_output

    nvml.set_pynvml(None)
    with capture_output() as captured:
        ip.run_line_magic("gpu_status", "--no-leftovers")
    text = captured.outputs[0].data["text/plain"]
    assert "GPU status" in text and "host RAM" in text
    if not nvml.snapshot().available:  # this machine: nvidia-ml-py finds no driver
        assert "No GPU: no NVIDIA driver on this machine" in text
        assert "No GPU: no NVIDIA driver" in captured.outputs[0].data["text/html"]


def test_magic_json(ip, fake, capsys):
    fake(fake_pynvml.two_gpus())
    ip.run_line_magic("gpu_status", "--json --no-leftovers")
    data = json.loads(capsys.readouterr().out)
    snap = GpuStatus.from_dict(data)
    assert snap.gpu_count == 2 and snap.leftovers is None


def test_magic_passes_the_user_namespace_and_flags(ip, fake, leftovers_module, capsys):
    fake(many_processes_world())
    calls = leftovers_module([])
    ip.run_line_magic("gpu_status", "--json --processes")
    # the running shell: find_leftovers looks up its namespace and output history itself
    assert calls and calls[-1]["namespace"] is None
    snap = GpuStatus.from_json(capsys.readouterr().out)
    assert snap.process_limit is None and snap.leftovers == ()
    ip.run_line_magic("gpu_status", "--json --no-leftovers")
    assert len(calls) == 1
    capsys.readouterr()


def test_magic_history_flag(ip, fake, tracker_module, capsys):
    fake(fake_pynvml.zero_gpus())
    tracker_module([CellMemory(1, 0, 0, 0, 0, 0, None, False, 0, 0.1)])
    ip.run_line_magic("gpu_status", "--json --no-leftovers --history")
    snap = GpuStatus.from_json(capsys.readouterr().out)
    assert snap.history is not None and snap.history[0].cell == 1


def test_magic_of_another_shell_passes_its_namespace(ip, fake, leftovers_module, capsys):
    from colab_gpu_guard.ipython import magics, registration_for

    fake(fake_pynvml.zero_gpus())
    calls = leftovers_module([])
    other = types.SimpleNamespace(user_ns={"a": 1})  # a shell that is not the running one
    instance = magics.StatusMagics(ip, registration_for(ip))
    instance.shell = other
    instance.gpu_status("--json")
    assert calls[-1]["namespace"] is other.user_ns
    assert GpuStatus.from_json(capsys.readouterr().out).leftovers == ()


@pytest.mark.parametrize("line", ["--bogus", "extra", "--json --watch 1", "--processes=3"])
def test_magic_junk_raises_usage_error(ip, line):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError):
        ip.run_line_magic("gpu_status", line)


def test_magic_junk_in_a_cell_shows_no_traceback(ip, run_cell, capsys):
    result = run_cell("%gpu_status --bogus")
    captured = capsys.readouterr()
    assert "Traceback" not in captured.out + captured.err
    assert "unrecognized arguments: --bogus" in captured.out + captured.err
    assert result.error_in_exec is not None or result.error_before_exec is not None


def test_magic_help_is_useful(ip):
    magic = ip.find_line_magic("gpu_status")
    doc = magic.__doc__
    for text in ("--json", "--processes", "--history", "--no-leftovers", "Example:", "NVML"):
        assert text in doc
    info = ip.object_inspect("%gpu_status")
    assert info["found"] and "--no-leftovers" in (info.get("docstring") or "")


def test_magic_is_removed_on_unload(ip):
    assert ip.find_line_magic("gpu_status") is not None
    ip.run_line_magic("unload_ext", "colab_gpu_guard")
    try:
        assert ip.find_line_magic("gpu_status") is None
    finally:
        ip.run_line_magic("load_ext", "colab_gpu_guard")


def test_real_leftovers_and_history_plug_in(ip, run_cell, capsys):
    pytest.importorskip("colab_gpu_guard.leftovers")
    pytest.importorskip("colab_gpu_guard.cells.tracker")
    pytest.importorskip("torch")
    nvml.set_pynvml(None)
    # hidden holders come first in the groups: what earlier tests left there must not push
    # these out of the snapshot's top groups
    ip.run_line_magic("gpu_reset", "")
    try:
        run_cell("import torch; guard_big = torch.zeros(1_000_000); guard_view = guard_big[:10]")
        run_cell("guard_small = 1")
        capsys.readouterr()
        ip.run_line_magic("gpu_status", "--json --history")
        snap = GpuStatus.from_json(capsys.readouterr().out)
    finally:
        for name in ("guard_big", "guard_view", "guard_small"):
            ip.user_ns.pop(name, None)
    entry = next(e for e in snap.leftovers if e.name == "guard_big")
    assert entry.nbytes == 4_000_000 and entry.device == "cpu" and entry.shape == (1_000_000,)
    assert "guard_view" in entry.shared_with
    group = next(g for g in snap.leftover_groups if g.name == "guard_big")
    assert (group.count, group.nbytes, group.type_name) == (1, 4_000_000, "Tensor")
    assert group.entries[0] == entry and not group.hidden and not group.released_by_reset
    # the view has no row of its own: guard_big's row names it
    assert not any(g.name == "guard_view" for g in snap.leftover_groups)
    text = snap.to_text()
    # the tensor is listed once: its group is that array itself
    assert "  3.81 MiB  guard_big  float32 [1000000] cpu  (user variable)  also: " in text
    assert text.count("guard_big  ") == 1 and text.count("guard_view") == 1, text
    assert snap.history and all(isinstance(r.cell, int) for r in snap.history)


def test_core_modules_import_no_front_end_or_framework():

    code = (
        "import sys; import colab_gpu_guard.status, colab_gpu_guard.nvml; "
        "bad = [m for m in ('IPython', 'ipywidgets', 'torch', 'numpy', 'pynvml', 'psutil') "
        "if m in sys.modules]; print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"


@pytest.mark.gpu
def test_gpu_allocator_beside_real_nvml():
    torch = pytest.importorskip("torch")
    nvml.set_pynvml(None)
    block = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    snap = gpu_status(leftovers=False)
    memory = snap.memory[0]
    assert memory.matched_by == "uuid", memory
    assert memory.reserved >= 256 << 20
    assert snap.nvml.devices[memory.nvml_index].memory_total is not None
    if memory.nvml_identified_by != "pid":  # this process may hold CuPy/JAX pools too
        pytest.skip(
            "NVML does not list this PID here (a container's PID namespace): the "
            "by-memory match is tested in a fresh process below"
        )
    assert memory.context_and_other is not None and memory.context_and_other > 0
    del block


_FIND_ME = """
import dataclasses, json, os, torch
from colab_gpu_guard import nvml
from colab_gpu_guard.status import gpu_status, matching

device = torch.device("cuda", 0)
# a size no other process here is likely to be near (the pytest process has a context too)
free, _ = torch.cuda.mem_get_info(0)
held = torch.empty(min(10 << 30, free // 4), dtype=torch.uint8, device=device)
a = torch.randn(1024, 1024, device=device)
(a @ a).sum().item()  # cuBLAS kernels load into the context
image = torch.randn(8, 3, 64, 64, device=device)
torch.nn.functional.conv2d(image, torch.randn(16, 3, 3, 3, device=device)).sum().item()  # cuDNN
torch.cuda.synchronize()
snap = gpu_status(leftovers=False)
memory = snap.memory[0]
gpu = snap.nvml.devices[memory.nvml_index]
mine = gpu.this_process()
hidden = dataclasses.replace(snap.nvml, devices=tuple(
    dataclasses.replace(d, processes=tuple(
        dataclasses.replace(p, this_process=False, matched_by_memory=False)
        for p in d.processes or ()))
    for d in snap.nvml.devices))
target = gpu
if memory.mig_index is not None:
    target = next(m for m in gpu.mig_instances if m.index == memory.mig_index)
place = matching.KernelOn(memory.nvml_index, target, memory.reserved)
found = matching.find_by_memory(hidden, [place])
print("RESULT:" + json.dumps(dict(
    pid=os.getpid(), identified_by=memory.nvml_identified_by, reserved=memory.reserved,
    used=memory.nvml_used_by_this_process, context=memory.context_and_other,
    margin=matching.CONTEXT_MARGIN, mine=None if mine is None else mine.pid,
    listed=[p.pid for p in gpu.processes or ()], found=found, notes=list(snap.notes),
    torch=torch.__version__, cudnn=torch.backends.cudnn.version())))
"""


@pytest.mark.gpu
def test_gpu_this_kernel_found_by_pid_is_the_one_found_by_memory():
    """In a fresh process (no other framework's allocator), after cuBLAS and cuDNN work on
    the real GPU: NVML charges the kernel torch's reserved bytes plus less than
    CONTEXT_MARGIN, and the by-memory matcher, given the snapshot with every PID hidden,
    picks the process NVML lists under this kernel's PID. In a container (no PID matches)
    gpu_status itself must have matched it by memory."""
    pytest.importorskip("torch")
    result = run_python(_FIND_ME, marker="RESULT:")
    print(f"\nNVML charges the kernel torch's reserved + context and libraries: {result}")
    assert result["identified_by"] in ("pid", "memory"), result
    assert 0 < result["context"] <= result["margin"], result
    if result["identified_by"] == "memory":  # a container: NVML lists host PIDs
        assert result["pid"] not in result["listed"] and result["mine"] == result["found"]
    else:
        assert result["mine"] == result["pid"] == result["found"], result


def test_a_failed_device_count_is_not_called_no_gpu(fake):
    world = fake(fake_pynvml.one_gpu())
    world.fail["nvmlDeviceGetCount"] = fake_pynvml.NVML_ERROR_UNKNOWN
    snap = gpu_status(leftovers=False)
    text = snap.to_text()
    assert "no GPU visible" not in text and "NVML works but lists no GPU" not in snap.notes
    assert "not available: devices (unknown error)" in text
    world.fail.clear()
    nvml.reset()
    world.gpus = []
    assert "no GPU visible to NVML" in gpu_status(leftovers=False).to_text()


def test_a_snapshot_written_before_the_house_move_still_reads():
    """A `%gpu_status --json` document written by the version before the leftovers and
    history entries became the scan's `Leftover` and the tracker's `CellMemory` (schema 1,
    fields then a subset) reads back, and the same entries write the same fields again."""
    path = Path(__file__).resolve().parents[1] / "fixtures" / "gpu_status_before_the_house.json"
    old = json.loads(path.read_text())
    snap = GpuStatus.from_json(path.read_text())
    assert [entry.name for entry in snap.leftovers] == ["weights", "Out[2]"]
    assert snap.leftovers[0].shared_with == ("view",) and snap.leftovers[0].shape == (256, 1024)
    assert [record.cell for record in snap.history] == [1, 2, 3]
    again = json.loads(snap.to_json())
    for kind in ("leftovers", "history"):
        for before, now in zip(old[kind], again[kind]):
            assert {key: now[key] for key in before} == before  # the old fields, unchanged
    graph = {"graph_nbytes", "graph_tensors", "graph_shared_nbytes", "graph_leaves"}  # issue 14
    views = {"views_nbytes"}  # what the names use of the memory (None: not known)
    sharing = {"graph_shared_with", "graph_counted_under"}  # which graphs share, named
    groups = {"root", "shared_roots"}  # the group an entry is listed under (issue 29)
    kind = {"kind"}  # a sparse tensor's layout, a wrapper subclass's class ('' for others)
    assert (
        set(again["leftovers"][0]) - set(old["leftovers"][0])
        == {"array_nbytes", "holders"} | graph | views | sharing | groups | kind
    )
    assert again["leftovers"][0]["kind"] == ""
    assert again["leftovers"][0]["root"] is None  # not kept then: not made up now
    assert {key: again["leftovers"][0][key] for key in graph} == dict.fromkeys(graph, 0)
    assert {key: again["leftovers"][0][key] for key in sharing} == {key: [] for key in sharing}
    assert again["leftovers"][0]["views_nbytes"] is None
    added = {"devices", "leak_kind", "peak_bound", "nvml_used_call", "leaks", "held_by"}
    added.add("nvml_process_used")  # issue 16: NVML's figure for this PID
    added.add("grew")  # issue 14: the containers a flagged rerun added to
    added.add("rss_before")  # what a cell started from (the panel ran in between)
    assert set(again["history"][0]) - set(old["history"][0]) == added


def test_the_now_line_claims_nothing_about_leftovers_it_did_not_search(fake):
    from colab_gpu_guard.status.compact import held_text, now_items

    fake(fake_pynvml.no_library())
    unsearched = gpu_status(leftovers=False)
    assert now_items(unsearched) == []
    assert held_text(unsearched) == "held between cells: not searched: Refresh looks for them"
    searched = gpu_status(leftovers=True, namespace={})
    assert now_items(searched) == [] and held_text(searched) == "held between cells: no arrays"


def test_outside_a_kernel_the_text_says_this_process(fake, monkeypatch):
    """`python -m colab_gpu_guard status`, a script, or a notebook's `!python ...` runs in
    a process of its own: its figures are that process's, not the kernel's."""
    from colab_gpu_guard import notebook_refs

    fake(fake_pynvml.two_gpus())
    assert gpu_status(leftovers=False).host.process == "kernel"  # the test shell runs here
    monkeypatch.setattr(notebook_refs, "running_shell", lambda: None)
    snap = gpu_status(leftovers=False)
    text = snap.to_text()
    assert snap.host.process == "process" and "this kernel" not in text
    assert "<- this process" in text
    assert f"this process {format_bytes(snap.host.process_rss)} (PID" in text


def test_used_memory_no_listed_process_is_charged_is_not_called_other_processes(fake):
    """As seen on an H100 (driver 580): NVML's used is 8.8 MiB above what it charges this
    process, with no other process listed. That remainder is "unattributed" in the bar and
    the compact line, never "others"; with another process listed, others is what NVML
    charges it and only the rest is unattributed."""
    from colab_gpu_guard.status import compact, panel_html

    alone = fake_pynvml.FakeGpu(
        used=1_280 * MiB + 9 * MiB,
        processes=[fake_pynvml.FakeProcess(pid=os.getpid(), used=1_280 * MiB, name="python3")],
    )
    fake(fake_pynvml.FakeWorld(gpus=[alone]))
    snap = gpu_status(leftovers=False)
    device = snap.nvml.devices[0]
    segments = dict(panel_html.device_segments(snap, device))
    assert segments["others"] == 0 and segments["unlisted"] == 9 * MiB
    # under 1% of the GPU: in the bar's tooltip and the used figure, not the compact line
    parts = dict(compact.gpu_line(snap, device).parts)
    assert parts == {"this kernel": 1_280 * MiB, "free": device.memory_free}
    text = compact.compact_text(snap)
    assert "others" not in text and "this kernel 1.25 GiB / free" in text
    assert "charged to no process NVML lists" in panel_html.render_device(snap, device)
    # a container that cannot see the other processes: 2 GiB unattributed is on the line
    alone.used = 1_280 * MiB + 2 * GiB
    snap = gpu_status(leftovers=False)
    text = compact.compact_text(snap)
    assert "others" not in text and "this kernel 1.25 GiB / unattributed 2 GiB / free" in text

    fake(fake_pynvml.one_gpu())  # another process, charged 2.5 GiB: all of the rest
    snap = gpu_status(leftovers=False)
    segments = dict(panel_html.device_segments(snap, snap.nvml.devices[0]))
    assert segments["others"] == 3_750 * MiB - 1_280 * MiB and "unlisted" not in segments


def test_a_few_hidden_bytes_are_said_calmly_and_megabytes_are_a_warning(fake):
    """As seen on an H100: a 4-byte scalar in Out[5] was the panel's one yellow warning
    while hundreds of MiB sat elsewhere. Hidden memory under 1 MiB is an info line."""
    from colab_gpu_guard.status.compact import now_items

    fake(fake_pynvml.no_library())
    base = gpu_status(leftovers=True, namespace={})
    for freeable, kind in ((4, "info"), (2**20, "warn"), (64 * 2**20, "warn")):
        snap = dataclasses.replace(base, leftovers_freeable_bytes=freeable)
        (item,) = now_items(snap)
        assert item.kind == kind and item.text.startswith(f"{format_bytes(freeable)} hidden")


def test_the_now_line_names_the_list_that_keeps_autograd_graphs(fake):
    """`losses.append(loss)` five times: the now line names `losses` with the bytes its
    graphs keep (the leftovers group's figure) and the fix; a list of plain numbers is
    not named."""
    torch = pytest.importorskip("torch")
    from colab_gpu_guard.status.compact import now_items

    fake(fake_pynvml.no_library())
    weight = torch.ones(256, 1024, requires_grad=True)
    losses = [(torch.randn(1024, 1024) @ weight.T).relu().sum() for _ in range(5)]
    snap = gpu_status(leftovers=True, namespace={"weight": weight, "losses": losses})
    (group,) = [g for g in snap.leftover_groups if g.name == "losses"]
    assert group.kind == "autograd graph" and group.graph_nbytes >= 5 * 2**20
    texts = [item.text for item in now_items(snap) if item.kind == "warn"]
    assert texts == [
        f"`losses` keeps {format_bytes(group.graph_nbytes)} alive in autograd graphs "
        "(fix: .item() for a loss you only log, .detach() for a tensor you keep)"
    ]
    # a warning comes before a calm line (as on an H100: 4 B in Out[5] came first)
    calm = dataclasses.replace(snap, leftovers_freeable_bytes=4)
    assert [item.kind for item in now_items(calm)] == ["warn", "info"]
    plain = gpu_status(leftovers=True, namespace={"losses": [loss.item() for loss in losses]})
    assert not any("autograd" in item.text for item in now_items(plain))


def test_the_gpu_line_never_files_this_kernels_memory_under_others_alone(fake, cuda_torch):
    """(a) NVML lists this kernel without a figure: what is not the other process's is
    'others + this kernel', not 'unlisted' (NVML does list it). (b) In a container where
    this kernel is not identified among NVML's host PIDs, its CUDA context is inside the
    rest: 'others + CUDA context', not 'others'."""
    from colab_gpu_guard.status import compact

    listed = fake_pynvml.FakeGpu(
        used=6 * GiB,
        processes=[
            fake_pynvml.FakeProcess(os.getpid(), None, name="python3"),
            fake_pynvml.FakeProcess(4242, 2 * GiB, name="other"),
        ],
    )
    fake(fake_pynvml.FakeWorld(gpus=[listed]))
    snap = gpu_status(leftovers=False)
    parts = dict(compact.gpu_line(snap, snap.nvml.devices[0]).parts)
    assert parts == {"others + this kernel": 6 * GiB, "free": snap.nvml.devices[0].memory_free}

    hosts = fake_pynvml.FakeGpu(
        used=8 * GiB,
        processes=[
            fake_pynvml.FakeProcess(4_999_999, 4 * GiB, name="python3"),
            fake_pynvml.FakeProcess(5_000_001, 4 * GiB, name="other"),
        ],
    )
    fake(fake_pynvml.FakeWorld(gpus=[hosts]))
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(1 * GiB, 2 * GiB, 2 * GiB))])
    snap = gpu_status(leftovers=False)
    text = compact.compact_text(snap)
    assert "this kernel 2 GiB / others + CUDA context 6 GiB / free" in text, text


def test_psutil_missing_is_named_with_its_install(fake, monkeypatch):
    fake(fake_pynvml.zero_gpus())
    monkeypatch.setitem(sys.modules, "psutil", None)  # installed without its dependencies
    snap = gpu_status(leftovers=False)
    note = "host memory not available: psutil is not installed (pip install psutil)"
    assert snap.host.note == note and snap.host.ram_total is None
    assert note in snap.to_text() and "Traceback" not in snap.to_text()


def test_every_nvml_query_failing_says_nvml_failed_and_why(fake):
    """NVML starts but answers every query with an error: the text says NVML failed and
    why (it said "driver n/a | CUDA driver n/a | NVML n/a"), never that it lists no GPU."""
    world = fake(fake_pynvml.one_gpu())
    calls = [
        name
        for name in fake_pynvml.api_names()
        if name.startswith("nvml") and name not in ("nvmlInit", "nvmlShutdown")
    ]
    for name in calls:
        world.fail[name] = fake_pynvml.NVML_ERROR_UNKNOWN
    text = gpu_status(leftovers=False).to_text()
    assert "NVML failed: unknown error" in text.splitlines()[1], text
    assert "lists no GPU" not in text and "driver n/a" not in text
