"""PyTorch: seeding, deterministic flags, CUDA state and allocator figures.

torch is looked up in ``sys.modules``; only seeding imports it (the user asked for torch to
be seeded and it is installed). Allocator queries never initialise CUDA.
"""

from __future__ import annotations

import functools
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable, Optional

from . import is_installed, loaded_module, module_version

NAME = "PyTorch"
MODULE = "torch"

# The literal that ATen's Context.cpp compiles in while it still enforces a cuBLAS workspace
# configuration under deterministic mode (removed by pytorch/pytorch#161749).
CUBLAS_CHECK_MARKER = b"it uses CuBLAS and you have CUDA >= 10.2"
CUBLAS_DETERMINISTIC_CONFIGS = (":4096:8", ":16:8")


def loaded() -> Optional[ModuleType]:
    return loaded_module(MODULE)


def installed() -> bool:
    return is_installed(MODULE)


def version() -> str:
    return module_version(loaded(), "torch")


def import_torch() -> ModuleType:
    import torch

    return torch


def cuda_version(torch: ModuleType) -> Optional[str]:
    """The CUDA runtime torch was built with, or None for a CPU/ROCm build."""
    return getattr(getattr(torch, "version", None), "cuda", None)


def cuda_initialized(torch: Optional[ModuleType] = None) -> bool:
    torch = torch or loaded()
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:
        return False


def cuda_in_bad_fork(torch: ModuleType) -> bool:
    check = getattr(torch.cuda, "_is_in_bad_fork", None)
    return bool(check and check())


def cuda_device_count(torch: Optional[ModuleType] = None) -> int:
    """Visible CUDA devices (does not create a CUDA context)."""
    torch = torch or loaded()
    if torch is None or cuda_version(torch) is None:
        return 0
    try:
        return int(torch.cuda.device_count())
    except Exception:
        return 0


def mps_available(torch: ModuleType) -> bool:
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    try:
        return bool(mps is not None and mps.is_available())
    except Exception:
        return False


def xpu_available(torch: ModuleType) -> bool:
    xpu = getattr(torch, "xpu", None)
    try:
        return bool(xpu is not None and xpu.is_available())
    except Exception:
        return False


# ---------------------------------------------------------------- deterministic flags


@dataclass(frozen=True)
class DeterministicFlags:
    """torch's global determinism switches, as read or to be written."""

    algorithms: bool
    warn_only: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool

    def describe(self) -> dict[str, str]:
        return {
            "torch.use_deterministic_algorithms": (
                f"{self.algorithms} (warn_only={self.warn_only})"
            ),
            "torch.backends.cudnn.deterministic": str(self.cudnn_deterministic),
            "torch.backends.cudnn.benchmark": str(self.cudnn_benchmark),
        }


def read_flags(torch: ModuleType) -> DeterministicFlags:
    warn_only_reader = getattr(torch, "is_deterministic_algorithms_warn_only_enabled", None)
    return DeterministicFlags(
        algorithms=bool(torch.are_deterministic_algorithms_enabled()),
        warn_only=bool(warn_only_reader()) if warn_only_reader else False,
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
    )


def write_flags(torch: ModuleType, flags: DeterministicFlags) -> None:
    try:
        torch.use_deterministic_algorithms(flags.algorithms, warn_only=flags.warn_only)
    except TypeError:  # torch < 1.11 has no warn_only
        torch.use_deterministic_algorithms(flags.algorithms)
    torch.backends.cudnn.deterministic = flags.cudnn_deterministic
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark


# ---------------------------------------------------------------- cuBLAS workspace


@dataclass(frozen=True)
class CublasRequirement:
    """Whether this torch insists on CUBLAS_WORKSPACE_CONFIG in deterministic mode."""

    needed: Optional[bool]  # None: could not tell
    evidence: str


def _torch_libraries(torch: ModuleType) -> list[Path]:
    lib_dir = Path(torch.__file__).parent / "lib"
    names = ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll")
    return [lib_dir / name for name in names if (lib_dir / name).is_file()]


def _file_contains(path: Path, marker: bytes) -> bool:
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return False
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(marker) != -1


def cublas_requirement_from_libraries(libraries: Iterable[Path]) -> CublasRequirement:
    """Feature-detect the cuBLAS workspace check in torch's compiled ATen library.

    torch builds that still enforce the workspace configuration carry the error message
    in ``libtorch_cpu``; builds after pytorch/pytorch#161749 no longer do.
    """
    libraries = list(libraries)
    for library in libraries:
        try:
            if _file_contains(library, CUBLAS_CHECK_MARKER):
                return CublasRequirement(
                    True, f"{library.name} still carries the cuBLAS workspace check"
                )
        except OSError as error:
            return CublasRequirement(None, f"could not read {library.name}: {error}")
    if libraries:
        names = ", ".join(library.name for library in libraries)
        return CublasRequirement(
            False, f"{names} has no cuBLAS workspace check (pytorch/pytorch#161749)"
        )
    return CublasRequirement(None, "torch's ATen library was not found")


@functools.cache
def _cublas_requirement_cached(torch_file: str) -> CublasRequirement:
    torch = loaded()
    assert torch is not None
    return cublas_requirement_from_libraries(_torch_libraries(torch))


def cublas_requirement(torch: ModuleType) -> CublasRequirement:
    if cuda_version(torch) is None:
        return CublasRequirement(False, "this torch build has no CUDA, so no cuBLAS")
    return _cublas_requirement_cached(str(torch.__file__))


# ---------------------------------------------------------------- allocator figures


@dataclass(frozen=True)
class AllocatorStats:
    """What this process's caching allocator holds on one device, in bytes."""

    device: int
    allocated: int
    reserved: int
    peak_allocated: int
    num_ooms: int


def allocator_stats(torch: Optional[ModuleType] = None) -> list[AllocatorStats]:
    """Per-device allocator figures; empty unless CUDA is initialised (never initialises it)."""
    torch = torch or loaded()
    if torch is None or not cuda_initialized(torch):
        return []
    stats = []
    for index in range(cuda_device_count(torch)):
        raw = torch.cuda.memory_stats(index)
        stats.append(
            AllocatorStats(
                device=index,
                allocated=int(raw.get("allocated_bytes.all.current", 0)),
                reserved=int(raw.get("reserved_bytes.all.current", 0)),
                peak_allocated=int(raw.get("allocated_bytes.all.peak", 0)),
                num_ooms=int(raw.get("num_ooms", 0)),
            )
        )
    return stats
