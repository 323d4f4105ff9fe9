"""colab_gpu_guard.nvml against the fake pynvml (0, 1, 2 GPUs, MIG, failures) and against
the real nvidia-ml-py on this machine (no GPU: LibraryNotFound); GPU-marked tests compare
NVML with torch and nvidia-smi on a real device."""

from __future__ import annotations

import dataclasses
import importlib
import os
import shutil
import subprocess
import sys
import threading
import time

import pytest

from colab_gpu_guard import nvml
from colab_gpu_guard.nvml.lib import COMPUTE_PROCESS_CALLS, GRAPHICS_PROCESS_CALLS
from colab_gpu_guard.serialize import from_data
from tests import fake_pynvml
from tests.fake_pynvml import GiB, MiB

NOT_SUPPORTED = fake_pynvml.NVML_ERROR_NOT_SUPPORTED
NO_PERMISSION = fake_pynvml.NVML_ERROR_NO_PERMISSION


def real_nvml_library_present() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.fixture(autouse=True)
def real_pynvml_after():
    yield
    nvml.set_pynvml(None)


@pytest.fixture
def fake():
    """use(world) -> world: make nvml use the fake pynvml acting on `world`."""

    def use(world):
        nvml.set_pynvml(fake_pynvml.install(world))
        return world

    return use


# ---------------------------------------------------------------- the real module, no fake


@pytest.mark.skipif(real_nvml_library_present(), reason="this machine has an NVIDIA driver")
def test_real_nvidia_ml_py_without_a_gpu_reports_library_not_found():
    nvml.set_pynvml(None)
    import pynvml

    with pytest.raises(pynvml.NVMLError_LibraryNotFound):
        pynvml.nvmlInit()  # what the real module does here
    view = nvml.snapshot()
    assert view.available is False
    assert view.error_kind == "NVMLError_LibraryNotFound"
    assert "no NVIDIA driver" in view.error
    assert view.devices == () and view.no_driver
    assert "NVML not available" in str(view)
    from colab_gpu_guard.status import gpu_status

    # what the status says first on a machine without a GPU, in plain words
    status_lines = str(gpu_status(leftovers=False)).splitlines()
    assert status_lines[1].strip().startswith("No GPU: no NVIDIA driver on this machine")
    assert nvml.snapshot() is view  # the failure is cached, not retried
    nvml.reset()
    again = nvml.snapshot()
    assert again is not view and again == dataclasses.replace(view, pid=again.pid)


def test_missing_nvidia_ml_py_is_reported_where_a_driver_may_be(monkeypatch):
    nvml.set_pynvml(None)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    monkeypatch.setattr(os.path, "exists", lambda path: path == "/dev/nvidiactl")
    view = nvml.snapshot()
    assert not view.available and not view.no_driver  # a driver may be there
    assert view.error_kind in ("ImportError", "ModuleNotFoundError")
    assert "pip install nvidia-ml-py" in view.error


def test_without_a_driver_a_missing_nvidia_ml_py_is_not_advised(monkeypatch):
    """On a machine with no NVIDIA driver at all, installing the binding changes nothing:
    the reason is the missing driver, with no pip advice."""
    nvml.set_pynvml(None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(os.path, "exists", lambda path: False)
    view = nvml.snapshot()
    assert not view.available
    assert view.error.startswith("no NVIDIA driver on this machine") and view.no_driver
    assert "pip install" not in view.error


# ---------------------------------------------------------------- initialisation


def test_library_not_found_is_cached_until_reset(fake):
    world = fake(fake_pynvml.no_library())
    first = nvml.snapshot()
    assert not first.available and first.error_kind == "NVMLError_LibraryNotFound"
    for _ in range(5):
        assert nvml.snapshot() is first
    assert world.calls == ["nvmlInit"]
    nvml.reset()
    nvml.snapshot()
    assert world.calls == ["nvmlInit", "nvmlInit"]


def test_driver_not_loaded(fake):
    fake(fake_pynvml.driver_not_loaded())
    view = nvml.snapshot()
    assert not view.available
    assert view.error_kind == "NVMLError_DriverNotLoaded"
    assert "driver is not loaded" in view.error


def test_unknown_init_error_keeps_its_text(fake):
    fake(fake_pynvml.FakeWorld(init_error=fake_pynvml.NVML_ERROR_IRQ_ISSUE))
    view = nvml.snapshot()
    assert view.error_kind == "NVMLError_IrqIssue"
    assert view.error.startswith("NVML failed to initialise: NVMLError_IrqIssue")


def test_nvml_is_initialised_once_and_shut_down_on_reset(fake):
    world = fake(fake_pynvml.one_gpu())
    for _ in range(3):
        assert nvml.snapshot().available
    assert world.init_count == 1 and world.shutdown_count == 0
    nvml.reset()
    assert world.shutdown_count == 1
    nvml.reset()  # nothing left to shut down
    assert world.shutdown_count == 1


def test_shutdown_at_exit_is_safe(fake):
    world = fake(fake_pynvml.one_gpu())
    nvml.snapshot()
    nvml.lib._shutdown_at_exit()
    assert world.shutdown_count == 1
    world.fail["nvmlShutdown"] = fake_pynvml.NVML_ERROR_UNINITIALIZED
    nvml.lib._shutdown_at_exit()  # an error at exit is swallowed


def test_concurrent_first_snapshots_initialise_once(fake):
    world = fake(fake_pynvml.two_gpus())
    results = []
    threads = [threading.Thread(target=lambda: results.append(nvml.snapshot())) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 8 and all(r.available for r in results)
    assert world.init_count == 1


def test_a_forked_child_initialises_its_own(fake, monkeypatch):
    world = fake(fake_pynvml.one_gpu())
    nvml.snapshot()
    parent = os.getpid()
    monkeypatch.setattr(nvml.lib.os, "getpid", lambda: parent + 1)
    nvml.snapshot()
    assert world.init_count == 2
    nvml.reset()  # the child shuts down its own initialisation only
    assert world.shutdown_count == 1


# ---------------------------------------------------------------- devices


def test_zero_gpus(fake):
    fake(fake_pynvml.zero_gpus())
    view = nvml.snapshot()
    assert view.available and view.devices == ()
    assert view.driver_version == "550.54.15"
    assert view.cuda_driver_version == "12.4"
    assert view.nvml_version == "12.550.54.15"
    assert view.unavailable == ()


def test_one_gpu_every_field(fake):
    fake(fake_pynvml.one_gpu())
    view = nvml.snapshot()
    assert view.available and len(view.devices) == 1 and view.pid == os.getpid()
    gpu = view.devices[0]
    assert gpu.index == 0
    assert gpu.name == "Tesla T4"
    assert gpu.uuid == "GPU-11111111-2222-3333-4444-555555555555"
    assert gpu.pci_bus_id == "00000000:00:04.0"
    assert gpu.memory_total == 15360 * MiB
    assert gpu.memory_used == 3750 * MiB
    assert gpu.memory_reserved == 256 * MiB
    assert gpu.memory_free == 15360 * MiB - 3750 * MiB - 256 * MiB
    assert (gpu.utilization_gpu, gpu.utilization_memory) == (37, 12)
    assert gpu.temperature_c == 51
    assert gpu.power_draw_w == 31.5 and gpu.power_limit_w == 70.0
    assert gpu.compute_mode == "Default"
    assert gpu.compute_capability == "7.5"
    assert gpu.mig_enabled is None and gpu.reason("mig_mode") == "not supported"
    assert gpu.mig_instances == ()
    assert gpu.ecc_enabled is True and gpu.ecc_errors_uncorrected == 0
    assert not gpu.lost
    assert dict(gpu.unavailable) == {"mig_mode": "not supported"}


def test_processes_sorted_named_and_this_process_marked(fake):
    fake(fake_pynvml.one_gpu())
    gpu = nvml.snapshot().devices[0]
    assert [p.pid for p in gpu.processes] == [fake_pynvml.OTHER_PID, os.getpid()]
    other, mine = gpu.processes
    assert other.name == "other_trainer"  # NVML's name (the driver's: any PID namespace)
    assert mine.name == "python3"  # NVML's too, where it has one
    assert (other.used_memory, mine.used_memory) == (2560 * MiB, 1280 * MiB)
    assert not other.this_process and mine.this_process
    assert gpu.this_process() == mine
    assert gpu.used_by_this_process() == 1280 * MiB
    assert gpu.other_processes() == (other,)
    assert mine.kinds == ("compute",) and mine.gpu_instance_id is None


def test_a_process_name_comes_from_nvml_and_psutil_only_for_local_pids(fake, monkeypatch):
    """NVML reports host PIDs inside a container: a local process of the same PID is
    another program, so psutil names a PID only where this process is in the init PID
    namespace; NVML's own name wins everywhere."""
    import psutil

    nvml_snapshot = importlib.import_module("colab_gpu_guard.nvml.snapshot")

    world = fake_pynvml.one_gpu()
    world.gpus[0].processes[1].name = None  # NVML has no name for this kernel's PID
    fake(world)
    assert nvml.snapshot().devices[0].processes[1].name == psutil.Process().name()
    monkeypatch.setattr(nvml_snapshot, "_pids_are_local", lambda: False)
    names = [p.name for p in nvml.snapshot().devices[0].processes]
    assert names == ["other_trainer", None]  # not the local PID's process


def test_processes_can_be_skipped(fake):
    world = fake(fake_pynvml.one_gpu())
    view = nvml.snapshot(processes=False)
    assert view.devices[0].processes is None and not view.processes_queried
    assert not any("RunningProcesses" in call for call in world.calls)


def test_unsupported_and_forbidden_fields_leave_the_rest(fake):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].fail = {
        "nvmlDeviceGetPowerUsage": NOT_SUPPORTED,
        "nvmlDeviceGetEnforcedPowerLimit": NOT_SUPPORTED,
        "nvmlDeviceGetUtilizationRates": NO_PERMISSION,
        "nvmlDeviceGetEccMode": NOT_SUPPORTED,
        "nvmlDeviceGetPciInfo": fake_pynvml.NVML_ERROR_UNKNOWN,
    }
    gpu = nvml.snapshot().devices[0]
    assert gpu.power_draw_w is None and gpu.reason("power_draw_w") == "not supported"
    assert gpu.power_limit_w is None
    assert gpu.utilization_gpu is None and gpu.reason("utilization") == "no permission"
    assert gpu.ecc_enabled is None and gpu.ecc_errors_uncorrected is None
    assert gpu.pci_bus_id is None and gpu.reason("pci_bus_id") == "unknown error"
    assert gpu.name == "Tesla T4" and gpu.memory_total == 15360 * MiB
    assert gpu.temperature_c == 51 and len(gpu.processes) == 2


def test_system_fields_may_fail_alone(fake):
    world = fake(fake_pynvml.one_gpu())
    world.fail["nvmlSystemGetCudaDriverVersion"] = fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    view = nvml.snapshot()
    assert view.cuda_driver_version is None
    assert view.reason("cuda_driver_version") == "not in this driver"
    assert view.driver_version == "550.54.15" and len(view.devices) == 1


def test_a_gpu_lost_at_its_handle_leaves_the_others(fake):
    world = fake(fake_pynvml.two_gpus())
    world.gpus[0].lost = "handle"
    view = nvml.snapshot()
    lost, fine = view.devices
    assert lost.lost and lost.name is None and lost.reason("handle") == "GPU is lost"
    assert not fine.lost and fine.name == "NVIDIA H100 80GB HBM3" and fine.processes


def test_a_gpu_lost_mid_query_stops_querying_it(fake):
    world = fake(fake_pynvml.two_gpus())
    world.gpus[0].lost = "calls"
    view = nvml.snapshot()
    lost, fine = view.devices
    assert lost.lost and lost.name is None and lost.memory_total is None
    assert all(why == "GPU is lost" for _, why in lost.unavailable)
    start = world.calls.index("nvmlDeviceGetHandleByIndex")
    end = world.calls.index("nvmlDeviceGetHandleByIndex", start + 1)
    assert world.calls[start + 1 : end] == ["nvmlDeviceGetName"]  # then it stopped asking
    assert fine.memory_total == 80 * GiB


IDENTITY_CALLS = (
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetPciInfo",
    "nvmlDeviceGetCudaComputeCapability",
)


def identity_calls(calls: list[str]) -> dict[str, int]:
    return {name: calls.count(name) for name in IDENTITY_CALLS}


def test_a_gpus_identity_is_read_once_per_initialisation(fake):
    """Handle, name, UUID, PCI bus id and compute capability are fixed while NVML stays
    initialised: the panel's snapshot after each cell does not ask again. (MIG instances
    are read each time: they can be made and destroyed while NVML runs.)"""
    world = fake(fake_pynvml.two_gpus())
    first = nvml.snapshot()
    read = dict.fromkeys(IDENTITY_CALLS, 2)  # two GPUs
    read["nvmlDeviceGetName"] = read["nvmlDeviceGetUUID"] = 4  # and two MIG instances
    assert identity_calls(world.calls) == read
    calls = len(world.calls)
    second = nvml.snapshot()
    again = dict.fromkeys(IDENTITY_CALLS, 0)
    again["nvmlDeviceGetName"] = again["nvmlDeviceGetUUID"] = 2  # the MIG instances
    assert identity_calls(world.calls[calls:]) == again
    assert "nvmlDeviceGetMemoryInfo_v2" in world.calls[calls:]  # the rest is read again
    for before, after in zip(first.devices, second.devices):
        assert (before.name, before.uuid, before.pci_bus_id, before.compute_capability) == (
            after.name,
            after.uuid,
            after.pci_bus_id,
            after.compute_capability,
        )
    assert second.devices[1].compute_capability == "9.0"
    nvml.reset()  # shut down: the handles are no longer valid
    calls = len(world.calls)
    assert nvml.snapshot().devices == second.devices
    assert identity_calls(world.calls[calls:]) == read


def test_an_identity_call_that_failed_is_asked_again(fake):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].fail = {"nvmlDeviceGetPciInfo": fake_pynvml.NVML_ERROR_UNKNOWN}
    assert nvml.snapshot().devices[0].pci_bus_id is None
    world.gpus[0].fail = {}
    gpu = nvml.snapshot().devices[0]
    assert gpu.pci_bus_id == world.gpus[0].bus_id and gpu.reason("pci_bus_id") is None


def test_a_gpu_lost_after_its_identity_was_read_still_reads_as_lost(fake):
    world = fake(fake_pynvml.two_gpus())
    nvml.snapshot()
    world.gpus[0].lost = "calls"
    lost, fine = nvml.snapshot().devices
    assert lost.lost and lost.memory_total is None and lost.name == "NVIDIA A100-SXM4-40GB"
    assert lost.reason("memory") == "GPU is lost"
    assert not fine.lost and fine.memory_total == 80 * GiB


def test_bytes_from_an_old_binding_are_decoded(fake):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].name = b"Tesla T4"
    world.driver_version = b"470.82.01\x00"
    view = nvml.snapshot()
    assert view.devices[0].name == "Tesla T4" and view.driver_version == "470.82.01"


# ---------------------------------------------------------------- version fallbacks


def test_v3_process_calls_missing_from_the_driver_fall_back_to_v2(fake):
    world = fake(fake_pynvml.one_gpu())
    world.driver_lacks |= {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
    }
    gpu = nvml.snapshot().devices[0]
    assert len(gpu.processes) == 2 and gpu.reason("processes") is None
    assert "nvmlDeviceGetComputeRunningProcesses_v2" in world.calls


def test_versioned_process_calls_missing_from_the_binding_use_the_unversioned(fake):
    world = fake_pynvml.one_gpu()
    world.binding_lacks |= {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    }
    fake(world)  # the binding is built from the world: set what it lacks first
    gpu = nvml.snapshot().devices[0]
    assert len(gpu.processes) == 2


def test_no_process_call_at_all_leaves_processes_not_available(fake):
    world = fake_pynvml.one_gpu()
    world.driver_lacks |= {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v3",
    }
    world.binding_lacks |= {
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
    }
    fake(world)
    gpu = nvml.snapshot().devices[0]
    assert gpu.processes is None
    assert gpu.reason("processes") == "not in this driver or nvidia-ml-py"
    assert gpu.memory_total == 15360 * MiB and gpu.used_by_this_process() is None


def test_process_listing_not_supported(fake):
    world = fake(fake_pynvml.one_gpu())
    for name in COMPUTE_PROCESS_CALLS[:1] + GRAPHICS_PROCESS_CALLS[:1]:
        world.gpus[0].fail[name] = NOT_SUPPORTED
    gpu = nvml.snapshot().devices[0]
    assert gpu.processes is None and gpu.reason("processes") == "not supported"
    # NotSupported is an answer, not a missing function: no older call is tried
    assert "nvmlDeviceGetComputeRunningProcesses_v2" not in world.calls


def test_memory_v2_missing_falls_back_to_v1(fake):
    world = fake(fake_pynvml.one_gpu())
    world.driver_lacks.add("nvmlDeviceGetMemoryInfo_v2")
    gpu = nvml.snapshot().devices[0]
    assert gpu.memory_call == "v1"
    assert gpu.memory_total == 15360 * MiB
    assert gpu.memory_used == 3750 * MiB + 256 * MiB  # v1 counts the reserved part as used
    assert gpu.memory_reserved is None and "v2" in gpu.reason("memory_reserved")


def test_binding_without_memory_v2_uses_v1(fake):
    world = fake_pynvml.one_gpu()
    world.binding_lacks.add("nvmlMemory_v2")
    fake(world)
    gpu = nvml.snapshot().devices[0]
    assert gpu.memory_reserved is None and gpu.memory_total == 15360 * MiB
    assert "nvmlDeviceGetMemoryInfo_v2" not in world.calls


@pytest.mark.parametrize("where", ["driver", "binding", "version"])
def test_temperature_v_missing_falls_back(fake, where):
    world = fake_pynvml.one_gpu()
    if where == "version":  # the driver has the call, in another structure version
        world.gpus[0].fail["nvmlDeviceGetTemperatureV"] = (
            fake_pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
        )
    else:
        getattr(world, f"{where}_lacks").add("nvmlDeviceGetTemperatureV")
    fake(world)
    gpu = nvml.snapshot().devices[0]
    assert gpu.temperature_c == 51 and "nvmlDeviceGetTemperature" in world.calls
    assert gpu.reason("temperature_c") is None


def test_real_binding_raises_a_version_mismatch_that_counts_as_missing():
    """nvidia-ml-py raises NVML_ERROR_ARGUMENT_VERSION_MISMATCH (25) as
    NVMLError_ArgumentVersionMismatch: for a structure version it does not know itself
    (checked in Python, no driver needed) and for one the driver does not know."""
    pynvml = pytest.importorskip("pynvml")
    with pytest.raises(pynvml.NVMLError) as raised:
        pynvml.nvmlDeviceGetTemperatureV(None, pynvml.NVML_TEMPERATURE_GPU, version=1)
    assert raised.value.value == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH == 25
    assert type(raised.value).__name__ == "NVMLError_ArgumentVersionMismatch"
    assert type(raised.value).__name__ in nvml.lib.MISSING
    assert nvml.reason_for(raised.value) == "this version of the call is not in this driver"


def test_temperature_not_supported_is_not_retried(fake):
    world = fake(fake_pynvml.one_gpu())
    world.gpus[0].fail["nvmlDeviceGetTemperatureV"] = NOT_SUPPORTED
    gpu = nvml.snapshot().devices[0]
    assert gpu.temperature_c is None and gpu.reason("temperature_c") == "not supported"
    assert "nvmlDeviceGetTemperature" not in world.calls


# ---------------------------------------------------------------- MIG and two GPUs


def test_mig_instances_and_processes(fake):
    fake(fake_pynvml.two_gpus())
    a100, h100 = nvml.snapshot().devices
    assert a100.mig_enabled is True and a100.mig_pending is True
    assert [m.index for m in a100.mig_instances] == [0, 2]  # slot 1 is empty
    first, second = a100.mig_instances
    assert first.uuid == "MIG-aaaaaaaa-1111-1111-1111-111111111111"
    assert first.name.endswith("3g.20gb")
    assert (first.memory_total, first.memory_used) == (20 * GiB, 8 * GiB)
    assert (first.gpu_instance_id, first.compute_instance_id) == (1, 0)
    assert second.gpu_instance_id == 2 and second.unavailable == ()
    by_pid = {p.pid: p for p in a100.processes}
    assert by_pid[fake_pynvml.OTHER_PID].gpu_instance_id == 1
    assert by_pid[fake_pynvml.OTHER_PID_2].used_memory is None  # NVML did not say
    assert h100.mig_enabled is False and h100.mig_instances == ()


def test_a_process_with_compute_and_graphics_contexts_is_listed_once(fake):
    fake(fake_pynvml.two_gpus())
    h100 = nvml.snapshot().devices[1]
    assert len(h100.processes) == 1
    (mine,) = h100.processes
    assert mine.kinds == ("compute", "graphics") and mine.used_memory == 6 * GiB
    assert mine.this_process


def test_mig_processes_fall_back_to_each_instance(fake, monkeypatch):
    world = fake(fake_pynvml.two_gpus())
    a100 = world.gpus[0]
    original = fake_pynvml._running

    def parent_needs_privileges(handle, function, graphics):
        if handle.gpu == 0 and handle.mig is None:
            raise fake_pynvml.NVMLError(NO_PERMISSION)
        return original(handle, function, graphics)

    monkeypatch.setattr(fake_pynvml, "_running", parent_needs_privileges)
    gpu = nvml.snapshot().devices[0]
    assert {p.pid for p in gpu.processes} == {p.pid for p in a100.processes}
    assert gpu.reason("processes") is None


def test_device_by_uuid_finds_gpus_and_mig_instances(fake):
    fake(fake_pynvml.two_gpus())
    view = nvml.snapshot()
    assert view.device_by_uuid("bbbbbbbb-0000-0000-0000-000000000000") is view.devices[1]
    mig = view.device_by_uuid("MIG-AAAAAAAA-2222-2222-2222-222222222222")
    assert mig is view.devices[0].mig_instances[1]
    assert view.device_by_uuid("GPU-none") is None


# ---------------------------------------------------------------- records


@pytest.mark.parametrize(
    "world",
    [
        fake_pynvml.no_library,
        fake_pynvml.zero_gpus,
        fake_pynvml.one_gpu,
        fake_pynvml.two_gpus,
    ],
)
def test_snapshot_round_trips_through_dict(fake, world):
    import json

    fake(world())
    view = nvml.snapshot()
    data = json.loads(json.dumps(view.to_dict()))
    assert nvml.NvmlSnapshot.from_dict(data) == view


def test_snapshots_are_immutable(fake):
    fake(fake_pynvml.one_gpu())
    view = nvml.snapshot()
    with pytest.raises(dataclasses.FrozenInstanceError):
        view.devices[0].name = "x"  # type: ignore[misc]
    assert isinstance(view.devices, tuple) and isinstance(view.devices[0].processes, tuple)
    assert hash(view) == hash(nvml.NvmlSnapshot.from_dict(view.to_dict()))


def test_helpers():
    assert nvml.lib.uint(0xFFFFFFFF) is None and nvml.lib.uint(3) == 3
    assert nvml.lib.ulonglong(2**64 - 1) is None
    assert nvml.normalise_uuid(" GPU-AbC ") == "abc"
    assert nvml.reason_for(AttributeError("x")) == "not in this nvidia-ml-py"


def test_from_data_rejects_wrong_shapes():
    with pytest.raises(ValueError):
        nvml.NvmlSnapshot.from_dict({"available": "yes"})
    with pytest.raises(ValueError):
        from_data(nvml.NvmlProcess, [1, 2])


# ---------------------------------------------------------------- a real GPU


# ---------------------------------------------------------------- "NVML used": one figure


def test_used_memory_is_the_snapshots_v2_used_figure(fake):
    world = fake(fake_pynvml.two_gpus())
    view = nvml.snapshot(processes=False)
    assert [d.memory_call for d in view.devices] == ["v2", "v2"]
    reading = nvml.used_memory()
    # the figure %gpu_status shows: v2 "used", without what the driver reserves
    assert reading == nvml.UsedMemory((12 * GiB, 6 * GiB), "v2")
    assert reading.per_device == tuple(d.memory_used for d in view.devices)
    assert reading.total == 18 * GiB
    calls = len(world.calls)
    assert nvml.used_memory() == reading
    # after the first reading: one memory call per GPU, the handles are kept
    assert world.calls[calls:] == ["nvmlDeviceGetMemoryInfo_v2"] * 2


@pytest.mark.parametrize(
    "lacks",
    [
        ("driver", "nvmlDeviceGetMemoryInfo_v2"),  # FunctionNotFound
        ("binding", "nvmlMemory_v2"),  # an nvidia-ml-py before the v2 call
        ("version", fake_pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH),  # another struct version
    ],
)
def test_without_the_v2_call_every_figure_is_v1_and_says_so(fake, lacks):
    where, what = lacks
    world = fake_pynvml.two_gpus()
    if where == "version":
        world.fail["nvmlDeviceGetMemoryInfo_v2"] = what
    else:
        getattr(world, f"{where}_lacks").add(what)
    fake(world)
    view = nvml.snapshot(processes=False)
    # v1 counts what the driver reserves as used (R515 and later)
    expected = (12 * GiB + 512 * MiB, 6 * GiB + 1 * GiB)
    assert tuple(d.memory_used for d in view.devices) == expected
    assert [d.memory_call for d in view.devices] == ["v1", "v1"]
    assert all(d.memory_reserved is None for d in view.devices)
    assert nvml.used_memory() == nvml.UsedMemory(expected, "v1")
    calls = len(world.calls)
    nvml.used_memory()
    assert world.calls[calls:] == ["nvmlDeviceGetMemoryInfo"] * 2  # v2 is not tried again


def test_v2_refused_for_another_reason_is_tried_again(fake):
    world = fake(fake_pynvml.one_gpu())
    world.fail["nvmlDeviceGetMemoryInfo_v2"] = NOT_SUPPORTED
    assert nvml.used_memory() == nvml.UsedMemory((3750 * MiB + 256 * MiB,), "v1")
    del world.fail["nvmlDeviceGetMemoryInfo_v2"]
    assert nvml.used_memory() == nvml.UsedMemory((3750 * MiB,), "v2")


def test_used_memory_is_none_without_nvml_or_with_a_lost_gpu(fake):
    fake(fake_pynvml.no_library())
    assert nvml.used_memory() is None
    world = fake_pynvml.two_gpus()
    world.gpus[1].lost = "calls"
    fake(world)
    assert nvml.used_memory() is None
    world.gpus[1].lost = None  # back (a test-only recovery): the handles are looked up again
    calls = len(world.calls)
    assert nvml.used_memory() == nvml.UsedMemory((12 * GiB, 6 * GiB), "v2")
    assert "nvmlDeviceGetHandleByIndex" in world.calls[calls:]
    fake(fake_pynvml.zero_gpus())
    assert nvml.used_memory() == nvml.UsedMemory((), "v2")


def test_used_memory_looks_handles_up_again_after_nvml_starts_again(fake):
    world = fake(fake_pynvml.one_gpu())
    nvml.used_memory()
    nvml.reset()  # shut down: its handles are no longer valid
    calls = len(world.calls)
    assert nvml.used_memory() == nvml.UsedMemory((3750 * MiB,), "v2")
    assert world.calls[calls:] == [
        "nvmlInit",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetMemoryInfo_v2",
    ]
    fake_pynvml.nvmlShutdown()  # another library shuts NVML down behind our back
    assert nvml.used_memory() == nvml.UsedMemory((3750 * MiB,), "v2")
    assert world.init_count == 3


def test_the_per_cell_reading_makes_one_memory_call_per_gpu(fake):
    """The tracker's thread reads after every cell: once NVML is up, a reading is one
    memory call per GPU (handles and the device count are kept, and the v2 call is not
    retried where it failed), fewer calls than the count + handle + memory per GPU it
    replaced. No timing here: the cost of each call is NVML's own."""
    world = fake(fake_pynvml.two_gpus())
    first = nvml.used_memory()
    calls = len(world.calls)
    assert nvml.used_memory() == first
    assert world.calls[calls:] == ["nvmlDeviceGetMemoryInfo_v2"] * 2
    world.driver_lacks.add("nvmlDeviceGetMemoryInfo_v2")
    nvml.reset()
    assert nvml.used_memory().call == "v1"
    calls = len(world.calls)
    nvml.used_memory()
    assert world.calls[calls:] == ["nvmlDeviceGetMemoryInfo"] * 2


@pytest.mark.parametrize("v2", [True, False])
def test_gpu_reset_reports_the_same_figure_and_says_which(fake, v2):
    import colab_gpu_guard

    world = fake_pynvml.two_gpus()
    if not v2:
        world.driver_lacks.add("nvmlDeviceGetMemoryInfo_v2")
    fake(world)
    shown = [d.memory_used for d in nvml.snapshot(processes=False).devices]
    report = colab_gpu_guard.gpu_reset(namespace={})
    assert report.nvml_used_before == report.nvml_used_after == shown  # %gpu_status's figure
    assert report.nvml_used_call == ("v2" if v2 else "v1")
    line = next(line for line in str(report).splitlines() if "GPU 0 (NVML" in line)
    assert line.endswith("(including driver-reserved memory)") != v2
    assert report.to_dict()["nvml_used_call"] == report.nvml_used_call


@pytest.mark.parametrize("v2", [True, False])
def test_the_per_cell_history_records_the_same_figure_and_says_which(fake, v2):
    import types

    from colab_gpu_guard.cells.tracker import MemoryTracker, format_history

    world = fake_pynvml.two_gpus()
    if not v2:
        world.binding_lacks.add("nvmlMemory_v2")
    fake(world)
    shown = sum(d.memory_used for d in nvml.snapshot(processes=False).devices)
    tracker = MemoryTracker()
    try:
        tracker.pre_run_cell(types.SimpleNamespace(raw_cell="x = 1"))
        tracker.post_run_cell(types.SimpleNamespace(execution_count=1))
        deadline = time.monotonic() + 5
        while tracker.history()[0].nvml_used_after is None and time.monotonic() < deadline:
            time.sleep(0.005)  # the reading lands from the tracker's thread
        (record,) = tracker.history()
    finally:
        tracker.close()
    assert record.nvml_used_after == shown == (18 * GiB if v2 else 19.5 * GiB)
    assert record.nvml_used_call == ("v2" if v2 else "v1")
    header = format_history([record]).splitlines()[1]
    assert ("NVML used (including driver-reserved memory)" in header) != v2


@pytest.fixture
def cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    torch.zeros(1, device="cuda")  # a context, so this process is listed
    return torch


def _nvml_entity_for_cuda0(view, torch):
    uuid = str(torch.cuda.get_device_properties(0).uuid)
    entity = view.device_by_uuid(uuid)
    assert entity is not None, f"cuda:0 ({uuid}) not found in NVML"
    return entity


def _gpu_of_cuda0(view, torch):
    """The physical GPU (NvmlDevice) cuda:0 is, or is a MIG instance of."""
    entity = _nvml_entity_for_cuda0(view, torch)
    if isinstance(entity, nvml.NvmlDevice):
        return entity
    return next(d for d in view.devices if entity in d.mig_instances)


@pytest.mark.gpu
def test_gpu_nvml_total_less_driver_reserved_is_torchs_total(cuda_torch):
    """NVML's total is the whole memory; cudaMemGetInfo's (torch.cuda.mem_get_info) leaves
    out what the driver reserves. Seen on an H100, driver 580: 85520809984 - 503316480 ==
    85017493504 (nvidia-smi 81559 MiB, torch 79.2 GiB)."""
    nvml.set_pynvml(None)
    view = nvml.snapshot(processes=False)
    assert view.available, view.error
    entity = _nvml_entity_for_cuda0(view, cuda_torch)
    _, total = cuda_torch.cuda.mem_get_info(0)
    assert total <= entity.memory_total
    if not isinstance(entity, nvml.NvmlDevice) or entity.memory_reserved is None:
        pytest.skip("no driver-reserved figure here (a MIG instance, or NVML's v1 call)")
    assert entity.memory_total - entity.memory_reserved == total, (
        entity.memory_total,
        entity.memory_reserved,
        total,
    )


@pytest.mark.gpu
def test_gpu_nvml_v2_used_reserved_and_free_add_up_to_total(cuda_torch):
    nvml.set_pynvml(None)
    view = nvml.snapshot(processes=False)
    for device in view.devices:
        if device.memory_call != "v2":
            pytest.skip(f"GPU {device.index}: no v2 memory call ({device.memory_call})")
        parts = (device.memory_used, device.memory_reserved, device.memory_free)
        assert sum(parts) == device.memory_total, (parts, device.memory_total)


@pytest.mark.gpu
def test_gpu_per_cell_reading_is_the_snapshots_used_figure(cuda_torch):
    nvml.set_pynvml(None)
    before = nvml.snapshot(processes=False)
    reading = nvml.used_memory()
    after = nvml.snapshot(processes=False)
    assert reading is not None and len(reading.per_device) == len(before.devices)
    assert {reading.call} == {d.memory_call for d in before.devices}
    slack = 64 * MiB  # other processes on the machine may change meanwhile
    for used, first, second in zip(reading.per_device, before.devices, after.devices):
        low, high = sorted((first.memory_used, second.memory_used))
        assert low - slack <= used <= high + slack


@pytest.mark.gpu
def test_gpu_nvml_memory_agrees_with_nvidia_smi(cuda_torch):
    """nvidia-smi (MiB, rounded) shows NVML's v2 figures: total, reserved, used, free."""
    nvml.set_pynvml(None)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi not found")
    fields = "uuid,memory.total,memory.reserved,memory.used,memory.free"
    before = nvml.snapshot(processes=False)
    done = subprocess.run(
        [smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        check=False,
    )
    after = nvml.snapshot(processes=False)
    if done.returncode != 0:
        pytest.skip(f"nvidia-smi cannot query {fields}: {done.stdout}{done.stderr}")

    def mib(text):
        try:
            return float(text)
        except ValueError:  # [N/A]
            return None

    rows = [[part.strip() for part in line.split(",")] for line in done.stdout.splitlines()]
    assert len(rows) == len(before.devices), done.stdout
    for uuid, *values in rows:
        total, reserved, used, free = (mib(value) for value in values)
        first, second = before.device_by_uuid(uuid), after.device_by_uuid(uuid)
        assert first is not None and second is not None, uuid
        assert abs(total - first.memory_total / MiB) <= 1
        if reserved is not None and first.memory_reserved is not None:
            assert abs(reserved - first.memory_reserved / MiB) <= 1
        if first.memory_call == "v1" and reserved is not None:
            used += reserved  # NVML's v1 "used" counts the reserved part
        for shown, name in ((used, "memory_used"), (free, "memory_free")):
            low, high = sorted((getattr(first, name) / MiB, getattr(second, name) / MiB))
            assert low - 1 <= shown <= high + 1, (name, shown, low, high)


@pytest.mark.gpu
def test_gpu_compute_capability_is_torchs(cuda_torch):
    nvml.set_pynvml(None)
    view = nvml.snapshot(processes=False)
    major, minor = cuda_torch.cuda.get_device_capability(0)
    assert _gpu_of_cuda0(view, cuda_torch).compute_capability == f"{major}.{minor}"


@pytest.mark.gpu
def test_gpu_reset_lowers_reserved_and_nvml_used(cuda_torch):
    """Freeing a 2 GiB tensor with %gpu_reset's API returns it to the driver: torch's
    reserved bytes and NVML's used figure (the same one %gpu_status shows) both drop."""
    import colab_gpu_guard

    nvml.set_pynvml(None)
    size = 2 << 30
    cuda_torch.cuda.synchronize()
    cuda_torch.cuda.empty_cache()  # nothing cached before: what drops is the tensor
    namespace = {"big": cuda_torch.empty(size, dtype=cuda_torch.uint8, device="cuda")}
    namespace["big"].fill_(1)
    cuda_torch.cuda.synchronize()
    report = colab_gpu_guard.gpu_reset("big", namespace=namespace)
    assert "big" not in namespace
    (device,) = [d for d in report.devices if d.device == "cuda:0"]
    assert device.reserved_before - device.reserved_after >= size, device
    gpu = _gpu_of_cuda0(nvml.snapshot(processes=False), cuda_torch)
    assert report.nvml_used_call == gpu.memory_call
    before, after = report.nvml_used_before[gpu.index], report.nvml_used_after[gpu.index]
    assert before - after >= size - 64 * MiB, (before, after)  # others may change a little


@pytest.mark.gpu
def test_gpu_this_kernel_grows_by_one_gib(cuda_torch):
    nvml.set_pynvml(None)
    before_view = nvml.snapshot()
    device = _nvml_entity_for_cuda0(before_view, cuda_torch)
    if not isinstance(device, nvml.NvmlDevice):
        pytest.skip("cuda:0 is a MIG instance; per-process memory needs privileges there")
    before = device.used_by_this_process()
    if before is None:
        pytest.skip("NVML does not list this PID here (a container's PID namespace)")
    block = cuda_torch.empty(1 << 30, dtype=cuda_torch.uint8, device="cuda")
    block.fill_(1)
    cuda_torch.cuda.synchronize()
    after = nvml.snapshot().devices[device.index].used_by_this_process()
    assert after is not None and after - before >= 1 << 30
    del block


@pytest.mark.gpu
def test_gpu_driver_version_matches_nvidia_smi():
    nvml.set_pynvml(None)
    smi = shutil.which("nvidia-smi")
    if smi is None:
        pytest.skip("nvidia-smi not found")
    out = subprocess.run(
        [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    view = nvml.snapshot()
    assert view.available and out and view.driver_version == out[0]


def test_nvml_shut_down_behind_our_back_is_started_again(fake):
    world = fake(fake_pynvml.one_gpu())
    nvml.snapshot()
    fake_pynvml.nvmlShutdown()  # another library calls nvmlShutdown once too often
    view = nvml.snapshot()
    assert view.driver_version == "550.54.15" and view.devices[0].name == "Tesla T4"
    assert world.init_count == 2


def test_an_unexpected_answer_spoils_only_its_gpu(fake, monkeypatch):
    fake(fake_pynvml.two_gpus())
    original = fake_pynvml.nvmlDeviceGetUtilizationRates

    def odd(handle):
        if handle.gpu == 0:
            original(handle)
            return object()  # no .gpu / .memory
        return original(handle)

    monkeypatch.setattr(fake_pynvml, "nvmlDeviceGetUtilizationRates", odd)
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml._world))
    first, second = nvml.snapshot().devices
    assert first.reason("device").startswith("could not be read: AttributeError")
    assert second.name == "NVIDIA H100 80GB HBM3" and second.utilization_gpu == 37


def test_from_dict_needs_the_required_fields():
    with pytest.raises(ValueError, match="missing 'available'"):
        nvml.NvmlSnapshot.from_dict({})
