"""`snapshot()`: NVML's view of this machine at one moment (the records: `records.py`).
A call that raises (not supported, no permission, not in this driver, GPU lost...) leaves
that field None with its reason and the rest is read; a lost GPU stops that device's
queries only. ``psutil`` is imported on first use."""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any, NamedTuple, Optional

from ..units import cuda_version_text, unavailable
from . import lib, memory
from .lib import Query, text, uint, ulonglong, watts
from .records import MigInstance, MissingField, NvmlDevice, NvmlProcess, NvmlSnapshot

COMPUTE_MODES = {
    0: "Default",
    1: "Exclusive Thread",
    2: "Prohibited",
    3: "Exclusive Process",
}


def snapshot(processes: bool = True) -> NvmlSnapshot:
    """NVML's view of this machine now. Never raises; what could not be read is None with
    its reason in ``unavailable``. `processes=False` skips listing GPU processes."""
    view = _snapshot(processes)
    if view.reason("driver_version") == "NVML not initialised":
        # Someone else shut NVML down (more nvmlShutdown calls than inits): start it again.
        lib.forget()
        view = _snapshot(processes)
    return view


def _snapshot(processes: bool) -> NvmlSnapshot:
    module, failure = lib.initialised()
    if module is None:
        assert failure is not None
        return failure
    query = Query(module)
    driver = text(query.call("driver_version", "nvmlSystemGetDriverVersion"))
    cuda = query.call("cuda_driver_version", "nvmlSystemGetCudaDriverVersion")
    nvml_version = text(query.call("nvml_version", "nvmlSystemGetNVMLVersion"))
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
    except Exception as error:  # NVML answered in a shape we did not expect: this GPU only
        reason = unavailable(error, "could not be read").reason
        return NvmlDevice(index=index, unavailable=(MissingField("device", reason),))


def _device(
    module: ModuleType, index: int, pid: int, processes: bool, names: _ProcessNames
) -> NvmlDevice:
    query = Query(module)
    identity = _identity(query, index)
    if identity is None:
        return NvmlDevice(index=index, lost=query.lost, unavailable=query.unavailable())
    handle = identity.handle
    fields: dict[str, Any] = dict(identity.fields)
    fields.update(_memory(query, handle, with_reserved=True))
    utilization = query.call("utilization", "nvmlDeviceGetUtilizationRates", handle)
    if utilization is not None:
        fields["utilization_gpu"] = uint(utilization.gpu)
        fields["utilization_memory"] = uint(utilization.memory)
    fields["temperature_c"] = _temperature(query, handle)
    fields["power_draw_w"] = watts(query.call("power_draw_w", "nvmlDeviceGetPowerUsage", handle))
    fields["power_limit_w"] = watts(
        query.call("power_limit_w", "nvmlDeviceGetEnforcedPowerLimit", handle)
    )
    mode = query.call("compute_mode", "nvmlDeviceGetComputeMode", handle)
    fields["compute_mode"] = None if mode is None else COMPUTE_MODES.get(mode, f"mode {mode}")
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


class _Identity(NamedTuple):
    """What a GPU is, read once per NVML initialisation: its handle (valid until
    nvmlShutdown), name, UUID, PCI bus id and compute capability, fixed for as long as the
    handle is (a new GPU or driver means a new initialisation, `lib.token`)."""

    token: object
    handle: Any
    fields: dict[str, Any]


# By GPU index. Kept only when every call answered: a failure is asked again next time.
_identities: dict[int, _Identity] = {}


def _identity(query: Query, index: int) -> Optional[_Identity]:
    """GPU `index`'s identity: the one read since NVML was last initialised, else read now
    (None where even its handle could not be had; what failed is in `query`)."""
    token = lib.token()
    known = _identities.get(index)
    if known is not None and known.token is token:
        return known
    handle = query.call("handle", "nvmlDeviceGetHandleByIndex", index)
    if handle is None:
        return None
    before = len(query.reasons)
    fields: dict[str, Any] = {
        "name": text(query.call("name", "nvmlDeviceGetName", handle)),
        "uuid": text(query.call("uuid", "nvmlDeviceGetUUID", handle)),
    }
    pci = query.call("pci_bus_id", "nvmlDeviceGetPciInfo", handle)
    fields["pci_bus_id"] = text(getattr(pci, "busId", None)) if pci is not None else None
    capability = query.call("compute_capability", "nvmlDeviceGetCudaComputeCapability", handle)
    if capability is not None:
        fields["compute_capability"] = f"{capability[0]}.{capability[1]}"
    identity = _Identity(token, handle, fields)
    if len(query.reasons) == before and not query.lost:
        _identities[index] = identity
    return identity


def _memory(query: Query, handle: Any, with_reserved: bool) -> dict[str, Any]:
    figures, call, _ = memory.read(query, handle)
    if figures is None:
        return {}
    values: dict[str, Any] = {
        "memory_total": ulonglong(figures.total),
        "memory_used": ulonglong(figures.used),
        "memory_free": ulonglong(figures.free),
    }
    if with_reserved:
        values["memory_call"] = call
        if call == memory.V1:
            query.fail(
                "memory_reserved", "needs the v2 memory call (a newer driver or nvidia-ml-py)"
            )
        else:
            values["memory_reserved"] = ulonglong(figures.reserved)
    return values


def _temperature(query: Query, handle: Any) -> Optional[int]:
    sensor = query.module.NVML_TEMPERATURE_GPU
    # nvmlDeviceGetTemperature is deprecated in favour of nvmlDeviceGetTemperatureV, which
    # older bindings lack (AttributeError) and older drivers lack (FunctionNotFound) or have
    # in another structure version (ArgumentVersionMismatch): all three mean "missing".
    ok, value, kind = query.attempt("nvmlDeviceGetTemperatureV", handle, sensor)
    if ok:
        return uint(value)
    if kind not in lib.MISSING and kind != "AttributeError":
        query.fail("temperature_c")
        return None
    return uint(query.call("temperature_c", "nvmlDeviceGetTemperature", handle, sensor))


def _mig_instances(query: Query, handle: Any) -> tuple[tuple[MigInstance, ...], list[Any]]:
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
        inner = Query(query.module)
        fields: dict[str, Any] = {
            "uuid": text(inner.call("uuid", "nvmlDeviceGetUUID", mig_handle)),
            "name": text(inner.call("name", "nvmlDeviceGetName", mig_handle)),
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
    query: Query, mig_handles: list[Any], pid: int, names: _ProcessNames
) -> Optional[tuple[NvmlProcess, ...]]:
    """Processes per MIG device, for when the whole GPU's list needs more privileges."""
    found: list[NvmlProcess] = []
    any_listed = False
    for mig_handle in mig_handles:
        inner = Query(query.module)
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
    query: Query, handle: Any, pid: int, names: _ProcessNames
) -> Optional[tuple[NvmlProcess, ...]]:
    listed = lib.process_entries(query, handle)
    if listed is None:
        query.fail("processes", query.reasons["processes.compute"])
        return None
    merged: dict[tuple[int, Optional[int], Optional[int]], dict[str, Any]] = {}
    for kind, entry in listed:
        process_id = int(entry.pid)
        gi = uint(getattr(entry, "gpuInstanceId", None))
        ci = uint(getattr(entry, "computeInstanceId", None))
        used = ulonglong(getattr(entry, "usedGpuMemory", None))
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
    """Process names by pid: NVML's own lookup first (the driver's, right in any PID
    namespace), psutil second, and only where NVML's PIDs are this process's namespace's
    (inside a container NVML reports host PIDs: a local PID of the same number is another
    process); cached per snapshot."""

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.names: dict[int, Optional[str]] = {}
        self._local: Optional[bool] = None

    def get(self, pid: int) -> Optional[str]:
        if pid not in self.names:
            self.names[pid] = self._lookup(pid)
        return self.names[pid]

    def _lookup(self, pid: int) -> Optional[str]:
        try:
            name = text(self.module.nvmlSystemGetProcessName(pid))
        except Exception:  # NVML: no name for this process
            name = None
        if name:
            return os.path.basename(name.split(" ", 1)[0]) or name
        if self._local is None:
            self._local = _pids_are_local()
        if not self._local:
            return None
        try:
            import psutil

            return psutil.Process(pid).name() or None
        except Exception:  # psutil: ImportError, NoSuchProcess, AccessDenied
            return None


def _pids_are_local() -> bool:
    """Whether this process is in the init PID namespace (its /proc status lists one PID
    in 'NSpid'), so the PIDs NVML reports are this namespace's; True where not told."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("NSpid:"):
                    return len(line.split()) == 2
    except OSError:
        pass
    return True
