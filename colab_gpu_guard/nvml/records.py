"""What NVML says, as immutable records: the machine, each GPU, its MIG instances and the
processes using it. Every field may be None ("not available"), with the reason kept in the
record's ``unavailable`` tuple of `MissingField`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Union

from ..serialize import from_data, to_data
from ..units import NA, counted


class MissingField(NamedTuple):
    """A field NVML could not give, and why (JSON: ``[field, reason]``)."""

    field: str
    reason: str


MissingFields = tuple[MissingField, ...]


class _Reasons:
    """Mixin: look up why a field is not available."""

    unavailable: MissingFields

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
    container NVML reports host PIDs, so no process may match by PID. `gpu_status` then
    identifies this kernel by its memory (``status.matching.find_by_memory``) and marks
    that entry this_process with matched_by_memory; `nvml.snapshot()` never does.
    """

    pid: int
    name: Optional[str]
    used_memory: Optional[int]
    kinds: tuple[str, ...] = ("compute",)
    gpu_instance_id: Optional[int] = None
    compute_instance_id: Optional[int] = None
    this_process: bool = False
    matched_by_memory: bool = False


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
    unavailable: MissingFields = ()


@dataclass(frozen=True)
class NvmlDevice(_Reasons):
    """One physical GPU. Memory in bytes, power in watts, temperature in degrees C,
    utilisation in percent over NVML's last sample period. memory_used is what NVML calls
    used; memory_call says which call gave it: "v2" (not counting memory_reserved, which
    the driver and firmware set aside) or "v1" (an older driver or nvidia-ml-py: used then
    includes that reserved memory, and memory_reserved is None). processes is None when
    they were not asked for or could not be listed. lost: NVML said the GPU is lost
    (NVML_ERROR_GPU_IS_LOST: fallen off the bus or otherwise inaccessible)."""

    index: int
    name: Optional[str] = None
    uuid: Optional[str] = None
    pci_bus_id: Optional[str] = None
    memory_total: Optional[int] = None
    memory_used: Optional[int] = None
    memory_free: Optional[int] = None
    memory_reserved: Optional[int] = None
    memory_call: Optional[str] = None
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
    unavailable: MissingFields = ()

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
    (e.g. "NVMLError_LibraryNotFound"); `no_driver`: this machine has no NVIDIA driver at
    all (its NVML library is not there, or without nvidia-ml-py, nor are its files)."""

    available: bool
    error: Optional[str] = None
    error_kind: Optional[str] = None
    driver_version: Optional[str] = None
    cuda_driver_version: Optional[str] = None
    nvml_version: Optional[str] = None
    devices: tuple[NvmlDevice, ...] = ()
    pid: int = 0
    processes_queried: bool = True
    unavailable: MissingFields = ()
    no_driver: bool = False

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlSnapshot:
        return from_data(cls, data)

    @property
    def lost_at_start(self) -> bool:
        """NVML could not even start because a GPU is lost (fallen off the bus)."""
        return not self.available and self.error_kind == "NVMLError_GpuIsLost"

    @property
    def driver_versions_differ(self) -> bool:
        """NVML could not start because its library and the running driver (the kernel
        module) are of different versions (a driver updated without a reboot)."""
        return not self.available and self.error_kind == "NVMLError_LibRmVersionMismatch"

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
            f"NVML {self.nvml_version or NA}, driver "
            f"{self.driver_version or NA}, CUDA driver "
            f"{self.cuda_driver_version or NA}: {counted(len(self.devices), 'GPU')}"
        )


def normalise_uuid(uuid: str) -> str:
    text = uuid.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if text.startswith(prefix):
            text = text[len(prefix) :]
    return text
