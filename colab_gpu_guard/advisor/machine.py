"""What NVML and torch say about this machine's GPUs, for the advisor's facts: the processes
on each GPU, the driver, each GPU's compute capability and the architectures torch was
built for. Nothing here creates a CUDA context."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

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


class GpuPresence(NamedTuple):
    """Whether this machine has an NVIDIA GPU, as NVML tells: `gpus`, how many it lists
    (0 where it says there is no NVIDIA driver, so no GPU CUDA could use); None where it
    cannot tell (nvidia-ml-py missing beside a driver, no permission, the driver not
    loaded...). `why`: NVML's own words where it did not start."""

    gpus: Optional[int]
    no_driver: bool
    why: Optional[str]


def gpu_presence() -> GpuPresence:
    """How many NVIDIA GPUs this machine has, where NVML can tell (no CUDA context): none
    where the NVML door found no driver (`NvmlSnapshot.no_driver`)."""
    snapshot = nvml.snapshot(processes=False)  # never raises
    if snapshot.available:
        return GpuPresence(len(snapshot.devices), False, None)
    no_driver = snapshot.no_driver
    return GpuPresence(0 if no_driver else None, no_driver, snapshot.error)


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


# Where the two halves of the NVIDIA driver say their version (Linux): the kernel module
# loaded at boot, and the libraries this process mapped (the file's real path: the kernel
# lists the target of a symlink such as libcuda.so.1 -> libcuda.so.550.54.15).
MODULE_VERSION_FILES = ("/sys/module/nvidia/version", "/proc/driver/nvidia/version")
PROCESS_MAPS = "/proc/self/maps"
# "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  ..." (the open modules:
# "... Open Kernel Module for x86_64  550.54.15  ...")
_NVRM = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)")
_LIBCUDA = re.compile(r"/libcuda\.so(?:\.(\d+\.\d+(?:\.\d+)*))?$|/libcuda\.so\.\d+$")


class DriverParts(NamedTuple):
    """The NVIDIA driver's two halves as this machine has them, each None where not found:
    the kernel module's version, and the libcuda this process loaded (its path, and the
    version its file name carries)."""

    kernel_module: Optional[str]
    libcuda_path: Optional[str]
    libcuda: Optional[str]


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:  # no such file (no driver, not Linux), no permission
        return ""


def driver_parts() -> DriverParts:
    """The loaded kernel module's version and the libcuda this process loaded, read from
    /sys, /proc and this process's memory map (no NVML or CUDA call)."""
    return DriverParts(_module_version(), *_libcuda())


def _module_version() -> Optional[str]:
    for path in MODULE_VERSION_FILES:
        text = _read(path).strip()
        if re.fullmatch(r"\d+(?:\.\d+)+", text):  # /sys/module/nvidia/version: the version
            return text
        match = _NVRM.search(text)
        if match:
            return match.group(1)
    return None


def _libcuda() -> tuple[Optional[str], Optional[str]]:
    """(path, version) of the libcuda this process mapped; (None, None) if none."""
    for line in _read(PROCESS_MAPS).splitlines():
        fields = line.split(maxsplit=5)  # address perms offset dev inode [path]
        path = fields[5].removesuffix(" (deleted)") if len(fields) == 6 else ""
        found = _LIBCUDA.search(path)
        if found:
            return path, found.group(1)
    return None, None


def driver_versions_details() -> dict[str, Any]:
    """What the answer to error 803 names: the two halves' versions (`driver_parts`),
    whether the libcuda loaded lies outside the system's library directories (a
    LD_LIBRARY_PATH entry put it first), and whether NVML fails the same way."""
    parts = driver_parts()
    path = parts.libcuda_path
    return {
        "kernel_module": parts.kernel_module,
        "libcuda": parts.libcuda,
        "libcuda_path": path,
        "libcuda_elsewhere": bool(path) and not system_library_dir(path),
        "libcuda_on_library_path": bool(path) and _on_library_path(os.path.dirname(path)),
        "nvml_mismatch": nvml.snapshot(processes=False).driver_versions_differ,
    }


def _on_library_path(directory: str) -> bool:
    entries = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    return any(entry and os.path.realpath(entry) == directory for entry in entries)


def system_library_dir(path: str) -> bool:
    """Whether `path` lies in a directory the system's dynamic loader searches by itself
    (where a driver installs libcuda), not one a LD_LIBRARY_PATH entry added."""
    return os.path.dirname(path) in _SYSTEM_LIBRARY_DIRS


_SYSTEM_LIBRARY_DIRS = frozenset(
    {
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        "/lib/x86_64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib/wsl/lib",  # WSL's driver, from Windows
        "/usr/local/nvidia/lib64",  # where NVIDIA's container runtime mounts the host's
        "/usr/local/nvidia/lib",
    }
)
