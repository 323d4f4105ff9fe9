"""What NVML (the NVIDIA driver's management library) says about this machine's GPUs.

`snapshot()` returns one immutable `NvmlSnapshot`: driver, CUDA driver and NVML versions, and
per device its name, UUID, PCI bus id, memory (total / used / free, and what the driver
reserves where the v2 memory call exists), utilisation, temperature, power draw and limit,
compute mode, compute capability, MIG mode and MIG instances, ECC mode and volatile
uncorrected errors, and the processes using it (compute and graphics; pid, name, used
memory, and which one is this process).

Every field may be "not available": a call that raises (not supported on this GPU, no
permission, function not in this driver, GPU lost...) leaves that field ``None`` and records
why in the record's ``unavailable`` pairs, without failing the rest. A lost GPU stops the
queries for that device only.

NVML is initialised once per process, on first use, and shut down at interpreter exit. A
failed initialisation (no driver: ``NVMLError_LibraryNotFound``; driver not loaded...) is
cached, so a snapshot on a machine without a GPU costs microseconds; `reset()` forgets the
cached state (tests, or after attaching a driver). `set_pynvml(module)` swaps in another
``pynvml`` module (tests use a fake one); ``None`` restores the real nvidia-ml-py.

This module imports neither IPython nor torch; ``pynvml`` and ``psutil`` are imported on
first use.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import os
import threading
import typing
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional, Union

from .units import NA, cuda_version_text

__all__ = [
    "MigInstance",
    "NvmlDevice",
    "NvmlProcess",
    "NvmlSnapshot",
    "initialised",
    "reset",
    "set_pynvml",
    "snapshot",
]

NOT_AVAILABLE = NA

# Process calls, newest first. Each may be missing from an older nvidia-ml-py (AttributeError)
# or from an older driver (NVMLError_FunctionNotFound); the unversioned one maps to whichever
# version the installed binding was written for.
COMPUTE_PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
GRAPHICS_PROCESS_CALLS = (
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses",
)

COMPUTE_MODES = {
    0: "Default",
    1: "Exclusive Thread",
    2: "Prohibited",
    3: "Exclusive Process",
}

# NVML marks "no value" in unsigned fields with all bits set.
_UINT_NOT_AVAILABLE = 0xFFFFFFFF
_ULONGLONG_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF

# Why a call failed, by the NVMLError subclass it raised.
_REASONS = {
    "NVMLError_NotSupported": "not supported",
    "NVMLError_NoPermission": "no permission",
    "NVMLError_GpuIsLost": "GPU is lost",
    "NVMLError_FunctionNotFound": "not in this driver",
    "NVMLLibraryMismatchError": "not in this driver",
    "NVMLError_Uninitialized": "NVML not initialised",
    "NVMLError_NotFound": "not found",
    "NVMLError_NoData": "no data",
    "NVMLError_Timeout": "timed out",
    "NVMLError_ResetRequired": "GPU needs a reset",
    "NVMLError_InvalidArgument": "invalid argument",
    "NVMLError_Unknown": "unknown error",
}
# Errors meaning "this call does not exist here": try an older version of it.
_MISSING = ("NVMLError_FunctionNotFound", "NVMLLibraryMismatchError")
_LOST = ("NVMLError_GpuIsLost",)

# Why NVML could not be initialised at all, by exception class name.
_INIT_FAILURES = {
    "ImportError": "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    "ModuleNotFoundError": "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    "NVMLError_LibraryNotFound": (
        "no NVIDIA driver on this machine (the NVML library libnvidia-ml was not found)"
    ),
    "NVMLError_DriverNotLoaded": (
        "the NVIDIA driver is not loaded (no GPU attached, or the driver failed to start)"
    ),
    "NVMLError_NoPermission": "no permission to use NVML",
    "NVMLError_LibRmVersionMismatch": (
        "the NVML library and the loaded kernel driver differ in version "
        "(driver updated without a reboot?)"
    ),
    "NVMLError_GpuIsLost": "a GPU has fallen off the bus (GPU is lost)",
    "NVMLError_Unknown": "NVML failed to initialise (unknown error)",
}

Unavailable = tuple[tuple[str, str], ...]


# ---------------------------------------------------------------- records


class _Reasons:
    """Mixin: look up why a field is not available."""

    unavailable: Unavailable

    def reason(self, field: str) -> Optional[str]:
        """Why `field` is not available, or None if it is (or was never asked for)."""
        for name, why in self.unavailable:
            if name == field:
                return why
        return None


@dataclass(frozen=True)
class NvmlProcess:
    """A process with a context on a GPU, as NVML lists it.

    used_memory is None where NVML does not report it (Windows WDDM; MIG without
    privileges). kinds is ("compute",), ("graphics",) or both. The instance ids are set on
    MIG devices only. this_process is True for the process that took the snapshot; in a
    container NVML may report host PIDs, so no process may match.
    """

    pid: int
    name: Optional[str]
    used_memory: Optional[int]
    kinds: tuple[str, ...] = ("compute",)
    gpu_instance_id: Optional[int] = None
    compute_instance_id: Optional[int] = None
    this_process: bool = False


@dataclass(frozen=True)
class MigInstance(_Reasons):
    """One MIG device (a GPU instance + compute instance) of a MIG-enabled GPU."""

    index: int
    uuid: Optional[str] = None
    name: Optional[str] = None
    memory_total: Optional[int] = None
    memory_used: Optional[int] = None
    memory_free: Optional[int] = None
    gpu_instance_id: Optional[int] = None
    compute_instance_id: Optional[int] = None
    unavailable: Unavailable = ()


@dataclass(frozen=True)
class NvmlDevice(_Reasons):
    """One physical GPU. Memory in bytes, power in watts, temperature in degrees C,
    utilisation in percent over NVML's last sample period. memory_used is what NVML calls
    used (with the v2 call, not counting memory_reserved, which the driver and firmware set
    aside). processes is None when they were not asked for or could not be listed."""

    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    memory_total: Optional[int] = None
    memory_used: Optional[int] = None
    memory_free: Optional[int] = None
    memory_reserved: Optional[int] = None
    utilization_gpu: Optional[int] = None
    utilization_memory: Optional[int] = None
    temperature_c: Optional[int] = None
    power_draw_w: Optional[float] = None
    power_limit_w: Optional[float] = None
    compute_mode: Optional[str] = None
    compute_capability: Optional[str] = None
    mig_enabled: Optional[bool] = None
    mig_pending: Optional[bool] = None
    mig_instances: tuple[MigInstance, ...] = ()
    ecc_enabled: Optional[bool] = None
    ecc_errors_uncorrected: Optional[int] = None
    processes: Optional[tuple[NvmlProcess, ...]] = None
    lost: bool = False
    unavailable: Unavailable = ()

    def this_process(self) -> Optional[NvmlProcess]:
        """The entry for the process that took the snapshot, if NVML listed it."""
        for process in self.processes or ():
            if process.this_process:
                return process
        return None

    def other_processes(self) -> tuple[NvmlProcess, ...]:
        return tuple(p for p in self.processes or () if not p.this_process)

    def used_by_this_process(self) -> Optional[int]:
        """Bytes NVML says this process uses on this GPU (summed over MIG instances)."""
        used = [p.used_memory for p in self.processes or () if p.this_process]
        if not used or any(u is None for u in used):
            return None
        return sum(u for u in used if u is not None)


@dataclass(frozen=True)
class NvmlSnapshot(_Reasons):
    """NVML's view of the machine at one moment. `available` is False when NVML could not
    be initialised; `error` then says why in words and `error_kind` names the exception
    (e.g. "NVMLError_LibraryNotFound")."""

    available: bool
    error: Optional[str] = None
    error_kind: Optional[str] = None
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[str] = None
    nvml_version: Optional[str] = None
    devices: tuple[NvmlDevice, ...] = ()
    pid: int = 0
    processes_queried: bool = True
    unavailable: Unavailable = ()

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlSnapshot:
        return from_data(cls, data)

    def device_by_uuid(self, uuid: str) -> Optional[Union[NvmlDevice, MigInstance]]:
        """The device or MIG instance with this UUID (with or without its GPU-/MIG- prefix)."""
        wanted = normalise_uuid(uuid)
        for device in self.devices:
            if device.uuid and normalise_uuid(device.uuid) == wanted:
                return device
            for instance in device.mig_instances:
                if instance.uuid and normalise_uuid(instance.uuid) == wanted:
                    return instance
        return None

    def __str__(self) -> str:
        if not self.available:
            return f"NVML not available: {self.error}"
        return (
            f"NVML {self.nvml_version or NOT_AVAILABLE}, driver "
            f"{self.driver_version or NOT_AVAILABLE}, CUDA driver "
            f"{self.cuda_driver_version or NOT_AVAILABLE}: {len(self.devices)} GPU(s)"
        )


def normalise_uuid(uuid: str) -> str:
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text


# ---------------------------------------------------------------- serialisation helpers


def to_data(value: Any) -> Any:
    """A dataclass tree as JSON-ready data: dataclasses to dicts, tuples to lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_data(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_data(item) for key, item in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def from_data(kind: Any, data: Any) -> Any:
    """Rebuild a value of type `kind` (a dataclass, Optional, tuple[...], primitive) from
    what `to_data` produced. Unknown keys are ignored, missing ones take their defaults."""
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(data, dict):
            raise ValueError(f"{kind.__name__}: expected an object, got {type(data).__name__}")
        hints = _HINTS.get(kind)
        if hints is None:
            hints = _HINTS[kind] = typing.get_type_hints(kind)
        values = {}
        for f in dataclasses.fields(kind):
            if f.name in data:
                values[f.name] = from_data(hints[f.name], data[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{kind.__name__}: missing {f.name!r}")
        return kind(**values)
    origin = typing.get_origin(kind)
    if origin is Union:
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        if data is None:
            return None
        if len(options) == 1:
            return from_data(options[0], data)
        for option in options:  # a union of primitives: keep the value if it fits one
            if isinstance(option, type) and isinstance(data, option):
                return data
        raise ValueError(f"{data!r} fits none of {options}")
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_data(args[0], item) for item in data)
        return tuple(from_data(arg, item) for arg, item in zip(args, data))
    if kind is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if kind in (int, float, str, bool) and not isinstance(data, kind):
        raise ValueError(f"expected {kind.__name__}, got {data!r}")
    return data


# ---------------------------------------------------------------- module and initialisation


@dataclass
class _State:
    module: Optional[ModuleType]
    ok: bool
    pid: int
    failure: Optional[NvmlSnapshot] = None


_lock = threading.RLock()
_state: Optional[_State] = None
_override: Optional[ModuleType] = None
_atexit_registered = False


def set_pynvml(module: Optional[ModuleType]) -> None:
    """Use `module` as pynvml from now on (a fake one in tests); None: the real one."""
    global _override
    with _lock:
        reset()
        _override = module


def reset() -> None:
    """Forget the cached initialisation (shutting NVML down if this process started it)."""
    global _state
    with _lock:
        state, _state = _state, None
        if state is not None and state.ok:
            _shutdown(state)


def _shutdown(state: _State) -> None:
    if state.module is None or state.pid != os.getpid():
        return  # a forked child: its parent owns that initialisation
    # It may be shut down by someone else already, or the library may be unloading.
    with contextlib.suppress(Exception):
        state.module.nvmlShutdown()


def _shutdown_at_exit() -> None:
    state = _state
    if state is not None and state.ok:
        _shutdown(state)


def _import_pynvml() -> ModuleType:
    if _override is not None:
        return _override
    import pynvml

    return pynvml


def initialised() -> tuple[Optional[ModuleType], Optional[NvmlSnapshot]]:
    """(pynvml module, None) once NVML is initialised in this process, or (None, the
    cached "not available" snapshot) when it cannot be."""
    global _state, _atexit_registered
    state = _state
    if state is not None and (state.pid == os.getpid() or not state.ok):
        return (state.module, None) if state.ok else (None, state.failure)
    with _lock:
        state = _state
        if state is not None and (state.pid == os.getpid() or not state.ok):
            return (state.module, None) if state.ok else (None, state.failure)
        # Not tried yet, or a forked child of a process that initialised NVML: start it
        # here (nvmlInit is reference counted, so this never shuts the parent's down).
        pid = os.getpid()
        try:
            module = _import_pynvml()
        except ImportError as error:
            _state = _State(None, False, pid, _failure(error))
            return None, _state.failure
        try:
            module.nvmlInit()
        except Exception as error:
            _state = _State(module, False, pid, _failure(error))
            return None, _state.failure
        _state = _State(module, True, pid)
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
        return module, None


def known_unavailable() -> bool:
    """True once NVML failed to initialise in this process (cached; no NVML call made)."""
    state = _state
    return state is not None and not state.ok


def _failure(error: BaseException) -> NvmlSnapshot:
    kind = type(error).__name__
    message = _INIT_FAILURES.get(kind)
    if message is None:
        message = f"NVML failed to initialise: {kind}: {_error_text(error)}"
    return NvmlSnapshot(available=False, error=message, error_kind=kind, pid=os.getpid())


def _error_text(error: BaseException) -> str:
    try:
        return str(error)
    except Exception:  # NVMLError.__str__ asks the library, which may be gone
        return repr(error)


def reason_for(error: BaseException) -> str:
    """A short human reason for a failed NVML call."""
    if isinstance(error, AttributeError):
        return "not in this nvidia-ml-py"
    kind = type(error).__name__
    return _REASONS.get(kind) or f"{kind}: {_error_text(error)}"


# ---------------------------------------------------------------- queries


class _Query:
    """Calls NVML functions by name for one record, keeping the reasons for failures.

    Once a call says the GPU is lost, every later call on this query is skipped.
    """

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.reasons: dict[str, str] = {}
        self.lost = False
        self.last_error: Optional[BaseException] = None

    def attempt(self, function: str, *args: Any, **kwargs: Any) -> tuple[bool, Any, str]:
        """(succeeded, value, error kind) without recording anything."""
        if self.lost:
            return False, None, _LOST[0]
        try:
            return True, getattr(self.module, function)(*args, **kwargs), ""
        except Exception as error:
            kind = "AttributeError" if isinstance(error, AttributeError) else type(error).__name__
            if kind in _LOST:
                self.lost = True
            self.last_error = error
            return False, None, kind

    def call(self, field: str, function: str, *args: Any, **kwargs: Any) -> Any:
        """The call's value, or None with the reason recorded under `field`."""
        ok, value, _ = self.attempt(function, *args, **kwargs)
        if not ok:
            self.fail(field)
        return value

    def fail(self, field: str, reason: Optional[str] = None) -> None:
        if reason is None:
            if self.lost:
                reason = "GPU is lost"
            elif self.last_error is not None:
                reason = reason_for(self.last_error)
            else:
                reason = "not available"
        self.reasons.setdefault(field, reason)

    def first(self, field: str, functions: tuple[str, ...], *args: Any) -> tuple[bool, Any]:
        """Try `functions` in order while each is missing (binding or driver)."""
        for function in functions:
            ok, value, kind = self.attempt(function, *args)
            if ok:
                return True, value
            if kind not in _MISSING and kind != "AttributeError":
                self.fail(field)
                return False, None
        self.fail(field, "not in this driver or nvidia-ml-py")
        return False, None

    def unavailable(self) -> Unavailable:
        return tuple(sorted(self.reasons.items()))


def snapshot(processes: bool = True) -> NvmlSnapshot:
    """NVML's view of this machine now. Never raises; what could not be read is None with
    its reason in ``unavailable``. `processes=False` skips listing GPU processes."""
    view = _snapshot(processes)
    if view.reason("driver_version") == "NVML not initialised":
        # Someone else shut NVML down (more nvmlShutdown calls than inits): start it again.
        _forget_initialisation()
        view = _snapshot(processes)
    return view


def _forget_initialisation() -> None:
    global _state
    with _lock:
        _state = None


def _snapshot(processes: bool) -> NvmlSnapshot:
    module, failure = initialised()
    if module is None:
        assert failure is not None
        return failure
    query = _Query(module)
    driver = _text(query.call("driver_version", "nvmlSystemGetDriverVersion"))
    cuda = query.call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
    nvml_version = _text(query.call("nvml_version", "nvmlSystemGetNVMLVersion"))
    count = query.call("devices", "nvmlDeviceGetCount")
    pid = os.getpid()
    names = _ProcessNames(module)
    devices = tuple(
        _safe_device(module, index, pid, processes, names) for index in range(int(count or 0))
    )
    return NvmlSnapshot(
        available=True,
        driver_version=driver,
        cuda_driver_version=cuda_version_text(cuda),
        nvml_version=nvml_version,
        devices=devices,
        pid=pid,
        processes_queried=processes,
        unavailable=query.unavailable(),
    )


def _safe_device(
    module: ModuleType, index: int, pid: int, processes: bool, names: _ProcessNames
) -> NvmlDevice:
    try:
        return _device(module, index, pid, processes, names)
    except Exception as error:  # an answer of a shape we did not expect: this GPU only
        reason = f"could not be read: {type(error).__name__}: {_error_text(error)}"
        return NvmlDevice(index=index, unavailable=(("device", reason),))


def _device(
    module: ModuleType, index: int, pid: int, processes: bool, names: _ProcessNames
) -> NvmlDevice:
    query = _Query(module)
    handle = query.call("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return NvmlDevice(index=index, lost=query.lost, unavailable=query.unavailable())
    fields: dict[str, Any] = {}
    fields["name"] = _text(query.call("name", "nvmlDeviceGetName", handle))
    fields["uuid"] = _text(query.call("uuid", "nvmlDeviceGetUUID", handle))
    pci = query.call("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    fields["pci_bus_id"] = _text(getattr(pci, "busId", None)) if pci is not None else None
    fields.update(_memory(query, handle, with_reserved=True))
    utilization = query.call("utilization", "nvmlDeviceGetUtilizationRates", handle)
    if utilization is not None:
        fields["utilization_gpu"] = _uint(utilization.gpu)
        fields["utilization_memory"] = _uint(utilization.memory)
    fields["temperature_c"] = _temperature(query, handle)
    fields["power_draw_w"] = _watts(query.call("power_draw_w", "nvmlDeviceGetPowerUsage", handle))
    fields["power_limit_w"] = _watts(
        query.call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
    )
    mode = query.call("compute_mode", "nvmlDeviceGetComputeMode", handle)
    fields["compute_mode"] = None if mode is None else COMPUTE_MODES.get(mode, f"mode {mode}")
    capability = query.call("compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    if capability is not None:
        fields["compute_capability"] = f"{capability[0]}.{capability[1]}"
    mig_handles: list[Any] = []
    mig = query.call("mig_mode", "nvmlDeviceGetMigMode", handle)
    if mig is not None:
        fields["mig_enabled"] = mig[0] == module.NVML_DEVICE_MIG_ENABLE
        fields["mig_pending"] = mig[1] == module.NVML_DEVICE_MIG_ENABLE
        if fields["mig_enabled"]:
            fields["mig_instances"], mig_handles = _mig_instances(query, handle)
    ecc = query.call("ecc_mode", "nvmlDeviceGetEccMode", handle)
    if ecc is not None:
        fields["ecc_enabled"] = bool(ecc[0])
        if ecc[0]:
            fields["ecc_errors_uncorrected"] = query.call(
                "ecc_errors_uncorrected",
                "nvmlDeviceGetTotalEccErrors",
                handle,
                module.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                module.NVML_VOLATILE_ECC,
            )
    if processes:
        listed = _processes(query, handle, pid, names)
        if listed is None and mig_handles and not query.lost:
            listed = _mig_processes(query, mig_handles, pid, names)
        fields["processes"] = listed
    return NvmlDevice(index=index, lost=query.lost, unavailable=query.unavailable(), **fields)


def _memory(query: _Query, handle: Any, with_reserved: bool) -> dict[str, Optional[int]]:
    memory = None
    version = getattr(query.module, "nvmlMemory_v2", None)
    if with_reserved and version is not None:
        # v2 splits out what the driver reserves; older bindings (no `version` parameter:
        # TypeError) and older drivers (FunctionNotFound) fall back to v1.
        ok, memory, _ = query.attempt("nvmlDeviceGetMemoryInfo", handle, version=version)
        if not ok:
            memory = None
    if memory is None:
        memory = query.call("memory", "nvmlDeviceGetMemoryInfo", handle)
    if memory is None:
        return {}
    values = {
        "memory_total": _ulonglong(memory.total),
        "memory_used": _ulonglong(memory.used),
        "memory_free": _ulonglong(memory.free),
    }
    reserved = getattr(memory, "reserved", None)
    if with_reserved:
        if reserved is None:
            query.fail("memory_reserved", "needs the v2 memory call (newer driver)")
        values["memory_reserved"] = _ulonglong(reserved)
    return values


def _temperature(query: _Query, handle: Any) -> Optional[int]:
    sensor = query.module.NVML_TEMPERATURE_GPU
    # nvmlDeviceGetTemperature is deprecated in favour of nvmlDeviceGetTemperatureV, which
    # older drivers and bindings lack.
    ok, value, kind = query.attempt("nvmlDeviceGetTemperatureV", handle, sensor)
    if ok:
        return _uint(value)
    if kind not in _MISSING and kind != "AttributeError":
        query.fail("temperature_c")
        return None
    return _uint(query.call("temperature_c", "nvmlDeviceGetTemperature", handle, sensor))


def _mig_instances(query: _Query, handle: Any) -> tuple[tuple[MigInstance, ...], list[Any]]:
    count = query.call("mig_instances", "nvmlDeviceGetMaxMigDeviceCount", handle)
    instances = []
    handles = []
    for slot in range(int(count or 0)):
        ok, mig_handle, kind = query.attempt("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if not ok:
            if kind == "NVMLError_NotFound":
                continue  # an empty slot
            query.fail("mig_instances")
            if query.lost:
                break
            continue
        inner = _Query(query.module)
        fields: dict[str, Any] = {
            "uuid": _text(inner.call("uuid", "nvmlDeviceGetUUID", mig_handle)),
            "name": _text(inner.call("name", "nvmlDeviceGetName", mig_handle)),
            "gpu_instance_id": inner.call(
                "gpu_instance_id", "nvmlDeviceGetGpuInstanceId", mig_handle
            ),
            "compute_instance_id": inner.call(
                "compute_instance_id", "nvmlDeviceGetComputeInstanceId", mig_handle
            ),
        }
        fields.update(_memory(inner, mig_handle, with_reserved=False))
        instances.append(MigInstance(index=slot, unavailable=inner.unavailable(), **fields))
        handles.append(mig_handle)
        if inner.lost:
            query.lost = True
            break
    return tuple(instances), handles


def _mig_processes(
    query: _Query, mig_handles: list[Any], pid: int, names: _ProcessNames
) -> Optional[tuple[NvmlProcess, ...]]:
    """Processes per MIG device, for when the whole GPU's list needs more privileges."""
    found: list[NvmlProcess] = []
    any_listed = False
    for mig_handle in mig_handles:
        inner = _Query(query.module)
        listed = _processes(inner, mig_handle, pid, names)
        if listed is not None:
            any_listed = True
            found.extend(listed)
        if inner.lost:
            query.lost = True
            break
    if not any_listed:
        return None
    for key in ("processes", "processes.compute", "processes.graphics"):
        query.reasons.pop(key, None)
    found.sort(key=lambda p: (-(p.used_memory or 0), p.pid))
    return tuple(found)


def _processes(
    query: _Query, handle: Any, pid: int, names: _ProcessNames
) -> Optional[tuple[NvmlProcess, ...]]:
    listed = []
    for kind, calls in (("compute", COMPUTE_PROCESS_CALLS), ("graphics", GRAPHICS_PROCESS_CALLS)):
        ok, value = query.first(f"processes.{kind}", calls, handle)
        if ok:
            listed.extend((kind, entry) for entry in value or ())
    if "processes.compute" in query.reasons and "processes.graphics" in query.reasons:
        query.fail("processes", query.reasons["processes.compute"])
        return None
    merged: dict[tuple[int, Optional[int], Optional[int]], dict[str, Any]] = {}
    for kind, entry in listed:
        process_id = int(entry.pid)
        gi = _uint(getattr(entry, "gpuInstanceId", None))
        ci = _uint(getattr(entry, "computeInstanceId", None))
        used = _ulonglong(getattr(entry, "usedGpuMemory", None))
        record = merged.setdefault(
            (process_id, gi, ci), {"kinds": [], "used": None, "gi": gi, "ci": ci}
        )
        if kind not in record["kinds"]:
            record["kinds"].append(kind)
        if used is not None:  # a process in both lists reports its memory in each
            record["used"] = max(used, record["used"] or 0)
    result = [
        NvmlProcess(
            pid=key[0],
            name=names.get(key[0]),
            used_memory=record["used"],
            kinds=tuple(record["kinds"]),
            gpu_instance_id=record["gi"],
            compute_instance_id=record["ci"],
            this_process=key[0] == pid,
        )
        for key, record in merged.items()
    ]
    result.sort(key=lambda p: (-(p.used_memory or 0), p.pid))
    return tuple(result)


class _ProcessNames:
    """Process names by pid: psutil first, NVML's own lookup second; cached per snapshot."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.names: dict[int, Optional[str]] = {}

    def get(self, pid: int) -> Optional[str]:
        if pid not in self.names:
            self.names[pid] = self._lookup(pid)
        return self.names[pid]

    def _lookup(self, pid: int) -> Optional[str]:
        try:
            import psutil

            return psutil.Process(pid).name() or None
        except Exception:  # ImportError, NoSuchProcess (another PID namespace), AccessDenied
            pass
        try:
            return _text(self.module.nvmlSystemGetProcessName(pid)) or None
        except Exception:
            return None


# ---------------------------------------------------------------- value helpers


def _text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def _uint(value: Any) -> Optional[int]:
    if value is None:
        return None
    value = int(value)
    return None if value == _UINT_NOT_AVAILABLE else value


def _ulonglong(value: Any) -> Optional[int]:
    if value is None:
        return None
    value = int(value)
    return None if value == _ULONGLONG_NOT_AVAILABLE else value


def _watts(milliwatts: Optional[int]) -> Optional[float]:
    return None if milliwatts is None else int(milliwatts) / 1000.0
