"""What NVML and torch say about this machine's GPUs, for the advisor's facts: the processes
on each GPU, the driver, each GPU's compute capability and the architectures torch was
built for. Nothing here creates a CUDA context."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from .. import nvml
from ..frameworks import torch as torch_support


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: Optional[int]
    device: int


def _nvml_snapshot() -> Optional[nvml.NvmlSnapshot]:
    """NVML's snapshot, or None when NVML is not available (no CUDA context needed)."""
    snapshot = nvml.snapshot(processes=True)  # never raises
    return snapshot if snapshot.available else None


def _capability(text: Any) -> Optional[tuple[int, int]]:
    match = re.fullmatch(r"(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def gpu_processes() -> Optional[list[GpuProcess]]:
    """Processes on every GPU as NVML sees them, or None if NVML is unavailable."""
    snapshot = _nvml_snapshot()
    if snapshot is None:
        return None
    return [
        GpuProcess(int(process.pid), process.name or "?", process.used_memory, device.index)
        for device in snapshot.devices
        for process in device.processes or ()
    ]


def driver_facts() -> dict[str, Any]:
    """Driver version, the CUDA version the driver supports, and each GPU's name and compute
    capability, from NVML (no CUDA context needed). Missing keys were not available."""
    snapshot = _nvml_snapshot()
    if snapshot is None:
        return {}
    facts: dict[str, Any] = {}
    if snapshot.driver_version:
        facts["driver_version"] = snapshot.driver_version
    if snapshot.cuda_driver_version:
        facts["driver_cuda"] = snapshot.cuda_driver_version
    facts["devices"] = [
        {
            "index": device.index,
            "name": device.name,
            "capability": _capability(device.compute_capability),
        }
        for device in snapshot.devices
    ]
    return facts


def torch_arch_list(torch: Any) -> Optional[list[str]]:
    """The GPU architectures this torch was compiled for (compile-time data, no CUDA call)."""
    try:
        if torch_support.cuda_version(torch) is None:
            return []
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        if flags is not None:
            text = flags()
            return text.split() if text else []
        return list(torch.cuda.get_arch_list())
    except Exception:  # torch: a build without the arch list
        return None


def arch_supports(arch_list: list[str], capability: tuple[int, int]) -> Optional[bool]:
    """Whether code compiled for `arch_list` runs on a GPU of `capability`: a cubin for the
    same major version and a lower or equal minor (binary compatibility), or PTX for an
    equal or lower capability (JIT-compiled). None when the list is empty."""
    if not arch_list:
        return None
    major, minor = capability
    for arch in arch_list:
        match = re.fullmatch(r"(sm|compute)_(\d+)", arch)
        if not match:
            continue  # arch-specific variants such as sm_90a run only on that exact GPU
        arch_major, arch_minor = divmod(int(match.group(2)), 10)
        if match.group(1) == "sm" and arch_major == major and arch_minor <= minor:
            return True
        if match.group(1) == "compute" and (arch_major, arch_minor) <= (major, minor):
            return True
    return False


def gpu_memory() -> list[dict[str, int]]:
    """Each GPU's memory in use and total, from NVML (no CUDA context needed); GPUs whose
    figures NVML does not report are left out, and so is everything without NVML."""
    snapshot = _nvml_snapshot()
    if snapshot is None:
        return []
    return [
        {"index": device.index, "used": device.memory_used, "total": device.memory_total}
        for device in snapshot.devices
        if device.memory_used is not None and device.memory_total is not None
    ]


def compute_modes() -> list[tuple[int, str]]:
    """(index, compute mode) for each GPU whose mode NVML reports ('Default',
    'Exclusive_Process', ...)."""
    snapshot = _nvml_snapshot()
    if snapshot is None:
        return []
    return [(d.index, d.compute_mode) for d in snapshot.devices if d.compute_mode]
