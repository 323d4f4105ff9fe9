"""A fake ``pynvml`` (nvidia-ml-py) for tests; never shipped.

`install(world)` returns a fresh module object named ``pynvml`` holding this file's NVML API
names (functions ``nvml*``, constants ``NVML_*``/``nvml*``, error classes ``NVMLError*``,
structures ``c_nvml*``/``nvml*_t``) that act on `world`: a `FakeWorld` of `FakeGpu`s.
`test_fake_pynvml_conformance.py` checks that every one of those names exists in the real
nvidia-ml-py with a compatible signature, equal constant values and the same structure
fields, and that every NVML name ``colab_gpu_guard/nvml.py`` uses exists here.

Modelled: 0, 1 and 2 GPUs; MIG (instances, empty slots, per-instance processes); any call
failing with any NVML error on one GPU (NotSupported, NoPermission, ArgumentVersionMismatch
for a versioned call the driver has in another structure version...); a lost GPU (at its
handle or at every call); functions missing from the driver (FunctionNotFound, and the
binding's NVMLLibraryMismatchError for the unversioned process calls; the v2 memory call
is "nvmlDeviceGetMemoryInfo_v2" in ``driver_lacks`` and ``fail``) or from the binding
(attribute absent); init failing with LibraryNotFound, DriverNotLoaded or GpuIsLost. The
device-level ``used`` is v2's (without ``reserved``); the v1 call adds ``reserved``, as the
driver does. Calls before
``nvmlInit`` raise ``NVMLError_Uninitialized`` like the real library.
"""

from __future__ import annotations

import os
import string
import types
from dataclasses import dataclass, field
from typing import Optional

GiB = 1 << 30
MiB = 1 << 20

# ---------------------------------------------------------------- constants (as in pynvml)

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_COMPUTEMODE_DEFAULT = 0
NVML_COMPUTEMODE_EXCLUSIVE_THREAD = 1
NVML_COMPUTEMODE_PROHIBITED = 2
NVML_COMPUTEMODE_EXCLUSIVE_PROCESS = 3
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1
nvmlMemory_v2 = 0x02000028
nvmlTemperature_v1 = 0x100000C

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_UNKNOWN = 999

_NOT_AVAILABLE_UINT = 0xFFFFFFFF


# ---------------------------------------------------------------- errors (as in pynvml)


class NVMLError(Exception):
    _valClassMapping: dict = {}
    _errcode_to_string = {
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }

    def __new__(typ, value):
        if typ == NVMLError:
            typ = NVMLError._valClassMapping.get(value, typ)
        obj = Exception.__new__(typ)
        obj.value = value
        return obj

    def __str__(self):
        return self._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")


def _make_error_classes() -> None:
    namespace = globals()
    for name in [n for n in namespace if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace(
            "_", ""
        )
        value = namespace[name]

        def new(typ, *args, _value=value):
            return NVMLError.__new__(typ, _value)

        error_class = type(class_name, (NVMLError,), {"__new__": new})
        namespace[class_name] = error_class
        NVMLError._valClassMapping[value] = error_class


_make_error_classes()


class NVMLLibraryMismatchError(Exception):
    pass


# ---------------------------------------------------------------- structures (as in pynvml)


class _Struct:
    FIELDS: tuple[str, ...] = ()

    def __init__(self, **values):
        for name in self.FIELDS:
            setattr(self, name, values.get(name, 0))


class c_nvmlMemory_t(_Struct):
    FIELDS = ("total", "free", "used")


class c_nvmlMemory_v2_t(_Struct):
    FIELDS = ("version", "total", "reserved", "free", "used")


class nvmlPciInfo_t(_Struct):
    FIELDS = (
        "busIdLegacy",
        "domain",
        "bus",
        "device",
        "pciDeviceId",
        "pciSubSystemId",
        "busId",
    )


class c_nvmlUtilization_t(_Struct):
    FIELDS = ("gpu", "memory")


class c_nvmlProcessInfo_v2_t(_Struct):
    """The process calls return friendly objects with these fields (see pynvml)."""

    FIELDS = ("pid", "usedGpuMemory", "gpuInstanceId", "computeInstanceId")


class nvmlFriendlyObject:
    def __init__(self, dictionary):
        for key in dictionary:
            setattr(self, key, dictionary[key])


# ---------------------------------------------------------------- the modelled machine


@dataclass
class FakeProcess:
    pid: int
    used: Optional[int]  # None: NVML does not report it
    name: Optional[str] = None  # what nvmlSystemGetProcessName answers (None: NotFound)
    compute: bool = True
    graphics: bool = False
    mig: Optional[int] = None  # MIG slot it runs on


@dataclass
class FakeMig:
    uuid: str
    name: str
    total: int
    used: int
    gpu_instance_id: int
    compute_instance_id: int


@dataclass
class FakeGpu:
    name: str = "Tesla T4"
    uuid: str = "GPU-11111111-2222-3333-4444-555555555555"
    bus_id: str = "00000000:00:04.0"
    total: int = 15360 * MiB
    used: int = 4 * GiB
    reserved: int = 256 * MiB
    utilization: tuple[int, int] = (37, 12)
    temperature: int = 51
    power_mw: int = 31_500
    power_limit_mw: int = 70_000
    compute_mode: int = NVML_COMPUTEMODE_DEFAULT
    capability: tuple[int, int] = (7, 5)
    mig: Optional[tuple[int, int]] = None  # (current, pending); None: NotSupported
    mig_slots: list[Optional[FakeMig]] = field(default_factory=list)
    ecc: Optional[tuple[int, int]] = (1, 1)  # None: NotSupported
    ecc_uncorrected: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    fail: dict[str, int] = field(default_factory=dict)  # function name -> NVML error code
    lost: Optional[str] = None  # "handle": at nvmlDeviceGetHandleByIndex; "calls": after it


@dataclass
class FakeWorld:
    gpus: list[FakeGpu] = field(default_factory=list)
    init_error: Optional[int] = None
    driver_version: str = "550.54.15"
    cuda_driver_version: int = 12040
    nvml_version: str = "12.550.54.15"
    driver_lacks: set[str] = field(default_factory=set)  # -> NVMLError_FunctionNotFound
    binding_lacks: set[str] = field(default_factory=set)  # -> absent from the module
    fail: dict[str, int] = field(default_factory=dict)  # system-level failures
    calls: list[str] = field(default_factory=list)
    init_count: int = 0
    shutdown_count: int = 0


class FakeHandle:
    def __init__(self, gpu: int, mig: Optional[int] = None) -> None:
        self.gpu = gpu
        self.mig = mig

    def __repr__(self) -> str:
        return f"FakeHandle(gpu={self.gpu}, mig={self.mig})"


_world = FakeWorld()

# Names that make up the fake module (and are checked against the real one).
API_PREFIXES = ("nvml", "NVML", "c_nvml")


def install(world: FakeWorld) -> types.ModuleType:
    """A fresh ``pynvml`` module acting on `world` (one world at a time). The module is
    built now: set ``world.binding_lacks`` before calling this; everything else in the
    world may change between calls."""
    global _world
    _world = world
    module = types.ModuleType("pynvml", "fake pynvml for tests (tests/fake_pynvml.py)")
    for name, value in globals().items():
        if name.startswith(API_PREFIXES) and name not in world.binding_lacks:
            setattr(module, name, value)
    return module


def api_names() -> list[str]:
    return sorted(name for name in globals() if name.startswith(API_PREFIXES))


def _enter(function: str) -> None:
    _world.calls.append(function)
    if _world.init_count <= _world.shutdown_count:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if function in _world.driver_lacks:
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    if function in _world.fail:
        raise NVMLError(_world.fail[function])


def _gpu(handle: FakeHandle, function: str) -> FakeGpu:
    if not isinstance(handle, FakeHandle) or handle.gpu >= len(_world.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _world.gpus[handle.gpu]
    if gpu.lost:
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if function in gpu.fail:
        raise NVMLError(gpu.fail[function])
    return gpu


def _mig(handle: FakeHandle, gpu: FakeGpu) -> Optional[FakeMig]:
    if handle.mig is None:
        return None
    return gpu.mig_slots[handle.mig]


# ---------------------------------------------------------------- the API


def nvmlInit():
    _world.calls.append("nvmlInit")
    if _world.init_error is not None:
        raise NVMLError(_world.init_error)
    _world.init_count += 1


def nvmlShutdown():
    _enter("nvmlShutdown")
    _world.shutdown_count += 1


def nvmlSystemGetDriverVersion():
    _enter("nvmlSystemGetDriverVersion")
    return _world.driver_version


def nvmlSystemGetCudaDriverVersion():
    _enter("nvmlSystemGetCudaDriverVersion")
    return _world.cuda_driver_version


def nvmlSystemGetNVMLVersion():
    _enter("nvmlSystemGetNVMLVersion")
    return _world.nvml_version


def nvmlSystemGetProcessName(pid):
    _enter("nvmlSystemGetProcessName")
    for gpu in _world.gpus:
        for process in gpu.processes:
            if process.pid == pid and process.name is not None:
                return process.name
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetCount():
    _enter("nvmlDeviceGetCount")
    return len(_world.gpus)


def nvmlDeviceGetHandleByIndex(index):
    _enter("nvmlDeviceGetHandleByIndex")
    if not 0 <= index < len(_world.gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _world.gpus[index]
    if gpu.lost == "handle":
        raise NVMLError(NVML_ERROR_GPU_IS_LOST)
    if "nvmlDeviceGetHandleByIndex" in gpu.fail:
        raise NVMLError(gpu.fail["nvmlDeviceGetHandleByIndex"])
    return FakeHandle(index)


def nvmlDeviceGetName(handle):
    _enter("nvmlDeviceGetName")
    gpu = _gpu(handle, "nvmlDeviceGetName")
    mig = _mig(handle, gpu)
    return mig.name if mig else gpu.name


def nvmlDeviceGetUUID(handle):
    _enter("nvmlDeviceGetUUID")
    gpu = _gpu(handle, "nvmlDeviceGetUUID")
    mig = _mig(handle, gpu)
    return mig.uuid if mig else gpu.uuid


def nvmlDeviceGetPciInfo(handle):
    _enter("nvmlDeviceGetPciInfo")
    gpu = _gpu(handle, "nvmlDeviceGetPciInfo")
    domain, bus, rest = gpu.bus_id.split(":")
    return nvmlPciInfo_t(
        busIdLegacy=gpu.bus_id[4:],
        domain=int(domain, 16),
        bus=int(bus, 16),
        device=int(rest.split(".")[0], 16),
        pciDeviceId=0x1EB810DE,
        pciSubSystemId=0x12A210DE,
        busId=gpu.bus_id,
    )


def nvmlDeviceGetMemoryInfo(handle, version=None):
    _enter("nvmlDeviceGetMemoryInfo_v2" if version else "nvmlDeviceGetMemoryInfo")
    gpu = _gpu(handle, "nvmlDeviceGetMemoryInfo")
    mig = _mig(handle, gpu)
    if mig is not None:
        total, used, reserved = mig.total, mig.used, 0
    else:
        total, used, reserved = gpu.total, gpu.used, gpu.reserved
    if not version:  # v1 counts the reserved memory as used (R515 and later)
        return c_nvmlMemory_t(total=total, free=total - used - reserved, used=used + reserved)
    if version != nvmlMemory_v2:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return c_nvmlMemory_v2_t(
        version=version,
        total=total,
        reserved=reserved,
        free=total - used - reserved,
        used=used,
    )


def nvmlDeviceGetUtilizationRates(handle):
    _enter("nvmlDeviceGetUtilizationRates")
    gpu = _gpu(handle, "nvmlDeviceGetUtilizationRates")
    return c_nvmlUtilization_t(gpu=gpu.utilization[0], memory=gpu.utilization[1])


def nvmlDeviceGetTemperatureV(handle, sensor, version=nvmlTemperature_v1):
    _enter("nvmlDeviceGetTemperatureV")
    if version != nvmlTemperature_v1:
        raise NVMLError(NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    return _temperature(handle, sensor, "nvmlDeviceGetTemperatureV")


def nvmlDeviceGetTemperature(handle, sensor):
    _enter("nvmlDeviceGetTemperature")
    return _temperature(handle, sensor, "nvmlDeviceGetTemperature")


def _temperature(handle, sensor, function):
    gpu = _gpu(handle, function)
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return gpu.temperature


def nvmlDeviceGetPowerUsage(handle):
    _enter("nvmlDeviceGetPowerUsage")
    return _gpu(handle, "nvmlDeviceGetPowerUsage").power_mw


def nvmlDeviceGetEnforcedPowerLimit(handle):
    _enter("nvmlDeviceGetEnforcedPowerLimit")
    return _gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw


def nvmlDeviceGetComputeMode(handle):
    _enter("nvmlDeviceGetComputeMode")
    return _gpu(handle, "nvmlDeviceGetComputeMode").compute_mode


def nvmlDeviceGetCudaComputeCapability(handle):
    _enter("nvmlDeviceGetCudaComputeCapability")
    return tuple(_gpu(handle, "nvmlDeviceGetCudaComputeCapability").capability)


def nvmlDeviceGetMigMode(device):
    _enter("nvmlDeviceGetMigMode")
    gpu = _gpu(device, "nvmlDeviceGetMigMode")
    if gpu.mig is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return list(gpu.mig)


def nvmlDeviceGetMaxMigDeviceCount(device):
    _enter("nvmlDeviceGetMaxMigDeviceCount")
    gpu = _gpu(device, "nvmlDeviceGetMaxMigDeviceCount")
    if gpu.mig is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return len(gpu.mig_slots)


def nvmlDeviceGetMigDeviceHandleByIndex(device, index):
    _enter("nvmlDeviceGetMigDeviceHandleByIndex")
    gpu = _gpu(device, "nvmlDeviceGetMigDeviceHandleByIndex")
    if gpu.mig is None or not gpu.mig[0]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= index < len(gpu.mig_slots):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if gpu.mig_slots[index] is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return FakeHandle(device.gpu, index)


def nvmlDeviceGetGpuInstanceId(device):
    _enter("nvmlDeviceGetGpuInstanceId")
    mig = _mig(device, _gpu(device, "nvmlDeviceGetGpuInstanceId"))
    if mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return mig.gpu_instance_id


def nvmlDeviceGetComputeInstanceId(device):
    _enter("nvmlDeviceGetComputeInstanceId")
    mig = _mig(device, _gpu(device, "nvmlDeviceGetComputeInstanceId"))
    if mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return mig.compute_instance_id


def nvmlDeviceGetEccMode(handle):
    _enter("nvmlDeviceGetEccMode")
    gpu = _gpu(handle, "nvmlDeviceGetEccMode")
    if gpu.ecc is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return list(gpu.ecc)


def nvmlDeviceGetTotalEccErrors(handle, errorType, counterType):
    _enter("nvmlDeviceGetTotalEccErrors")
    gpu = _gpu(handle, "nvmlDeviceGetTotalEccErrors")
    if gpu.ecc is None or not gpu.ecc[0]:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED and counterType == NVML_VOLATILE_ECC:
        return gpu.ecc_uncorrected
    return 0


def _running(handle, function, graphics):
    _enter(function)
    gpu = _gpu(handle, function)
    found = []
    for process in gpu.processes:
        if not (process.graphics if graphics else process.compute):
            continue
        if handle.mig is not None and process.mig != handle.mig:
            continue
        mig = gpu.mig_slots[process.mig] if process.mig is not None else None
        found.append(
            nvmlFriendlyObject(
                {
                    "pid": process.pid,
                    "usedGpuMemory": process.used,
                    "gpuInstanceId": mig.gpu_instance_id if mig else _NOT_AVAILABLE_UINT,
                    "computeInstanceId": (mig.compute_instance_id if mig else _NOT_AVAILABLE_UINT),
                }
            )
        )
    return found


def nvmlDeviceGetComputeRunningProcesses_v3(handle):
    return _running(handle, "nvmlDeviceGetComputeRunningProcesses_v3", graphics=False)


def nvmlDeviceGetComputeRunningProcesses_v2(handle):
    return _running(handle, "nvmlDeviceGetComputeRunningProcesses_v2", graphics=False)


def nvmlDeviceGetComputeRunningProcesses(handle):
    try:  # like pynvml's @throwOnVersionMismatch wrapper around the _v3 call
        return nvmlDeviceGetComputeRunningProcesses_v3(handle)
    except NVMLError_FunctionNotFound:  # noqa: F821 - made by _make_error_classes
        raise NVMLLibraryMismatchError("Unversioned function called ...") from None


def nvmlDeviceGetGraphicsRunningProcesses_v3(handle):
    return _running(handle, "nvmlDeviceGetGraphicsRunningProcesses_v3", graphics=True)


def nvmlDeviceGetGraphicsRunningProcesses_v2(handle):
    return _running(handle, "nvmlDeviceGetGraphicsRunningProcesses_v2", graphics=True)


def nvmlDeviceGetGraphicsRunningProcesses(handle):
    try:
        return nvmlDeviceGetGraphicsRunningProcesses_v3(handle)
    except NVMLError_FunctionNotFound:  # noqa: F821
        raise NVMLLibraryMismatchError("Unversioned function called ...") from None


# ---------------------------------------------------------------- scenarios

OTHER_PID = 5_000_001  # above Linux's largest pid_max, so psutil never finds it here
OTHER_PID_2 = 5_000_002


def no_library() -> FakeWorld:
    return FakeWorld(init_error=NVML_ERROR_LIBRARY_NOT_FOUND)


def driver_not_loaded() -> FakeWorld:
    return FakeWorld(init_error=NVML_ERROR_DRIVER_NOT_LOADED)


def zero_gpus() -> FakeWorld:
    return FakeWorld(gpus=[])


def one_gpu(this_pid: Optional[int] = None) -> FakeWorld:
    """A Colab-like Tesla T4: this process (1.25 GiB) and another one (2.5 GiB)."""
    pid = os.getpid() if this_pid is None else this_pid
    return FakeWorld(
        gpus=[
            FakeGpu(
                used=3_750 * MiB,
                processes=[
                    FakeProcess(pid=OTHER_PID, used=2_560 * MiB, name="other_trainer"),
                    FakeProcess(pid=pid, used=1_280 * MiB, name="python3"),
                ],
            )
        ]
    )


def two_gpus(this_pid: Optional[int] = None) -> FakeWorld:
    """GPU 0: an A100 in MIG mode (two instances, one empty slot); GPU 1: an H100 where
    this process has a compute and a graphics context."""
    pid = os.getpid() if this_pid is None else this_pid
    a100 = FakeGpu(
        name="NVIDIA A100-SXM4-40GB",
        uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",
        bus_id="00000000:07:00.0",
        total=40 * GiB,
        used=12 * GiB,
        reserved=512 * MiB,
        capability=(8, 0),
        mig=(1, 1),
        power_limit_mw=400_000,
        mig_slots=[
            FakeMig(
                uuid="MIG-aaaaaaaa-1111-1111-1111-111111111111",
                name="NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                total=20 * GiB,
                used=8 * GiB,
                gpu_instance_id=1,
                compute_instance_id=0,
            ),
            None,
            FakeMig(
                uuid="MIG-aaaaaaaa-2222-2222-2222-222222222222",
                name="NVIDIA A100-SXM4-40GB MIG 2g.10gb",
                total=10 * GiB,
                used=4 * GiB,
                gpu_instance_id=2,
                compute_instance_id=0,
            ),
        ],
        processes=[
            FakeProcess(pid=OTHER_PID, used=8 * GiB, name="mig_job_a", mig=0),
            FakeProcess(pid=OTHER_PID_2, used=None, name="mig_job_b", mig=2),
        ],
    )
    h100 = FakeGpu(
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
        bus_id="00000000:0A:00.0",
        total=80 * GiB,
        used=6 * GiB,
        reserved=1 * GiB,
        capability=(9, 0),
        mig=(0, 0),
        power_limit_mw=700_000,
        processes=[FakeProcess(pid=pid, used=6 * GiB, name="python3", graphics=True)],
    )
    return FakeWorld(gpus=[a100, h100])
