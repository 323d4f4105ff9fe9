"""gpu_status(): the combined snapshot, its text / HTML / JSON views, and %gpu_status."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colab_gpu_guard import cuda_health, nvml, status
from colab_gpu_guard.frameworks import torch as torch_support
from colab_gpu_guard.leftovers import Leftover
from colab_gpu_guard.serialize import from_data, to_data
from colab_gpu_guard.status import GpuStatus, gpu_status
from colab_gpu_guard.tracker import CellMemory
from tests import fake_pynvml
from tests.conftest import flush_output_history
from tests.fake_pynvml import GiB, MiB

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
    """use(items or an exception) installs colab_gpu_guard.leftovers with find_leftovers."""
    calls = []

    def use(result):
        module = types.ModuleType("colab_gpu_guard.leftovers")

        def find_leftovers(device=None, namespace=None, deep=False):
            calls.append({"device": device, "namespace": namespace, "deep": deep})
            if isinstance(result, Exception):
                raise result
            return list(result)

        module.find_leftovers = find_leftovers
        monkeypatch.setitem(sys.modules, "colab_gpu_guard.leftovers", module)
        return calls

    return use


@pytest.fixture
def tracker_module(monkeypatch):
    """use(cells): the tracker's history is `cells`."""
    from colab_gpu_guard import tracker

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
    assert "NVML not available: no NVIDIA driver on this machine" in text
    assert "host RAM" in text and f"PID {os.getpid()}" in text
    html = snap.to_html()
    assert "NVML not available" in html
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
    if torch.version.cuda is None:
        assert any("CPU-only build" in note for note in snap.notes)
    assert snap.torch.health == cuda_health.health().state


def test_broken_cuda_context_is_reported(fake):
    fake(fake_pynvml.one_gpu())
    cuda_health.mark_broken("device-side assert triggered")
    snap = gpu_status(leftovers=False)
    assert snap.torch.health == "broken"
    assert cuda_health.RESTART_ADVICE in snap.notes
    assert "device-side assert triggered" in snap.to_text()


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
    assert "cuda:0" in text and "1 OOM(s)" in text
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


def test_container_pid_mismatch_is_explained(fake, cuda_torch):
    fake(fake_pynvml.one_gpu(this_pid=fake_pynvml.OTHER_PID_2))  # NVML sees a host PID
    cuda_torch([(types.SimpleNamespace(uuid=T4_UUID), stats(1 * GiB, 1 * GiB))])
    snap = gpu_status(leftovers=False)
    assert snap.memory[0].nvml_used_by_this_process is None
    assert any("NVML reports host PIDs" in note for note in snap.notes)


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
        for i in range(1, 13)
    ]
    items.append(Leftover("view_of_t12", "list l[0]", (12, 4), "float32", "cuda:0", 12 * MiB, 12))
    calls = leftovers_module(items)
    namespace = {"x": 1}
    snap = gpu_status(namespace=namespace, top=3)
    assert calls[0]["namespace"] is namespace
    assert [e.name for e in snap.leftovers][:1] == ["t12"]
    assert len(snap.leftovers) == 3 and snap.leftovers_count == 13
    assert snap.leftovers_bytes == sum(range(1, 13)) * MiB  # the view's storage counted once
    assert snap.leftovers_freeable_bytes == snap.leftovers_bytes  # no "user variable" holder
    assert snap.leftovers[0] == Leftover(
        "t12", "user namespace", (12, 4), "float32", "cuda:0", 12 * MiB, 12, ()
    )
    text = snap.to_text()
    assert "leftovers (3 of 13, 78 MiB in all)" in text
    assert "t12 | 12 MiB | cuda:0 | float32 | (12, 4) | held by user namespace" in text
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


def test_leftovers_module_missing_or_failing(fake, leftovers_module, monkeypatch):
    fake(fake_pynvml.zero_gpus())
    monkeypatch.setitem(sys.modules, "colab_gpu_guard.leftovers", None)
    snap = gpu_status()
    assert snap.leftovers is None and snap.leftovers_note.startswith("not available")
    assert "leftovers    not available" in snap.to_text()
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
    tracker_module(cells)
    snap = gpu_status(leftovers=False, history=True, history_limit=2)
    assert [r.cell for r in snap.history] == [2, 3]
    assert snap.history_note == "last 2 of 3 cells"
    assert snap.history[1].rerun_leak is True and snap.history[1].leak_bytes == MiB
    assert snap.history[1].nvml_used_after is None
    text = snap.to_text()
    assert "[3] allocated 3 MiB (+3 MiB)" in text and "LEAK on rerun: 1 MiB" in text
    assert GpuStatus.from_json(snap.to_json()) == snap
    assert gpu_status(leftovers=False).history is None  # only when asked


def test_history_module_missing(fake, monkeypatch):
    fake(fake_pynvml.zero_gpus())
    monkeypatch.setitem(sys.modules, "colab_gpu_guard.tracker", None)
    snap = gpu_status(leftovers=False, history=True)
    assert snap.history is None and snap.history_note.startswith("not available")


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


def test_lost_gpu_is_flagged(fake):
    world = fake(fake_pynvml.two_gpus())
    world.gpus[1].lost = "calls"
    text = gpu_status(leftovers=False).to_text()
    assert "GPU IS LOST" in text and "NVIDIA A100-SXM4-40GB" in text


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
        assert "NVML not available: no NVIDIA driver on this machine" in text
        assert "NVML not available" in captured.outputs[0].data["text/html"]


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
    for text in ("--json", "--processes", "--history", "--no-leftovers", "Examples", "NVML"):
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
    pytest.importorskip("colab_gpu_guard.tracker")
    pytest.importorskip("torch")
    nvml.set_pynvml(None)
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
    assert "guard_big | 3.81 MiB | cpu | float32 | (1000000,)" in snap.to_text()
    assert snap.history and all(isinstance(r.cell, int) for r in snap.history)


def test_core_modules_import_no_front_end_or_framework():
    import subprocess

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
    if memory.nvml_used_by_this_process is None:
        pytest.skip("NVML does not list this PID here (a container's PID namespace)")
    assert memory.context_and_other is not None and memory.context_and_other > 0
    del block


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
    path = Path(__file__).parent / "fixtures" / "gpu_status_before_the_house.json"
    old = json.loads(path.read_text())
    snap = GpuStatus.from_json(path.read_text())
    assert [entry.name for entry in snap.leftovers] == ["weights", "Out[2]"]
    assert snap.leftovers[0].shared_with == ("view",) and snap.leftovers[0].shape == (256, 1024)
    assert [record.cell for record in snap.history] == [1, 2, 3]
    again = json.loads(snap.to_json())
    for kind in ("leftovers", "history"):
        for before, now in zip(old[kind], again[kind]):
            assert {key: now[key] for key in before} == before  # the old fields, unchanged
    assert set(again["leftovers"][0]) - set(old["leftovers"][0]) == {"array_nbytes", "holders"}
    assert set(again["history"][0]) - set(old["history"][0]) == {
        "devices",
        "leak_kind",
        "peak_bound",
    }
