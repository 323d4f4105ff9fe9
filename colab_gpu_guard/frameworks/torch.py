"""PyTorch: CUDA state, accelerators, seeding hooks, allocator figures and caches (tensor
metadata: ``torch_arrays``).

torch is looked up in ``sys.modules``; only seeding imports it (the user asked for torch to
be seeded and it is installed). Allocator queries never initialise CUDA.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import NamedTuple, Optional

from .base import presence

# the Framework protocol's names for what torch_arrays reads (and its bulk readers)
from .torch_arrays import array_columns as array_columns
from .torch_arrays import array_info as array_info
from .torch_arrays import array_infos as array_infos
from .torch_arrays import array_spans as array_spans
from .torch_arrays import no_subclass_dispatch as no_subclass_dispatch
from .torch_arrays import sparse_parts as sparse_parts
from .torch_arrays import storage_weakrefs as storage_weakrefs
from .torch_arrays import wrapper_kind as wrapper_kind

NAME = "PyTorch"
MODULE = "torch"

loaded, installed, version = presence(MODULE)


def import_torch() -> ModuleType:
    if "torch" in sys.modules and sys.modules["torch"] is None:
        # set so by the user or a test: Python refuses the import ("import of torch
        # halted"); say that, not that torch is missing
        raise ModuleNotFoundError(
            "import of torch is blocked in this process (sys.modules['torch'] is None)",
            name="torch",
        )
    try:
        import torch
    except ModuleNotFoundError as error:
        if error.name != "torch":
            raise
        raise ModuleNotFoundError(
            "PyTorch is not installed: pip install torch (see the README for CUDA builds)",
            name="torch",
        ) from None
    return torch


def cuda_version(torch: ModuleType) -> Optional[str]:
    """The CUDA runtime torch was built with, or None for a CPU/ROCm build."""
    return getattr(getattr(torch, "version", None), "cuda", None)


def hip_version(torch: ModuleType) -> Optional[str]:
    """The ROCm (HIP) runtime torch was built with, or None for a CPU/CUDA build."""
    return getattr(getattr(torch, "version", None), "hip", None)


def cpu_only_build(torch: ModuleType) -> bool:
    """Built for neither CUDA nor ROCm (a ROCm build drives AMD GPUs through torch.cuda)."""
    return cuda_version(torch) is None and hip_version(torch) is None


def cuda_initialized(torch: Optional[ModuleType] = None) -> bool:
    torch = torch or loaded()
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:  # torch: CUDA state of an unusual build
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
    except Exception:  # torch: no driver, or a broken CUDA install
        return 0


def devices_with_context(torch: Optional[ModuleType] = None) -> list[int]:
    """The CUDA devices on which this process already has a primary context.

    Anything that selects a device (``torch.cuda.synchronize(i)`` enters
    ``torch.cuda.device(i)``) creates a context there under CUDA 12+, a few hundred MB on a
    GPU the user never touched; so whatever visits devices visits only these. Asks the
    driver (``torch._C._cuda_hasPrimaryContext``), which creates nothing; where that is
    missing, only the current device.
    """
    torch = torch or loaded()
    if torch is None or not cuda_initialized(torch):
        return []
    count = cuda_device_count(torch)
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    try:
        if has_context is None:
            return [int(torch.cuda.current_device())] if count else []
        return [index for index in range(count) if has_context(index)]
    except Exception:  # torch: the driver query (no driver, a broken context)
        return []


def mps_available(torch: ModuleType) -> bool:
    mps = getattr(getattr(torch, "backends", None), "mps", None)
    try:
        return bool(mps is not None and mps.is_available())
    except Exception:  # torch: the MPS backend of this build
        return False


def xpu_available(torch: ModuleType) -> bool:
    xpu = getattr(torch, "xpu", None)
    try:
        return bool(xpu is not None and xpu.is_available())
    except Exception:  # torch: the XPU backend of this build
        return False


_ACCELERATORS: dict[int, tuple[str, ...]] = {}


def other_accelerators(torch: ModuleType) -> tuple[str, ...]:
    """("mps",) / ("xpu",) / () : non-CUDA accelerators with RNGs to seed (asked once per
    torch module: neither appears during a process's life)."""
    found = _ACCELERATORS.get(id(torch))
    if found is None:
        found = _ACCELERATORS[id(torch)] = tuple(
            name
            for name, available in (("mps", mps_available), ("xpu", xpu_available))
            if available(torch)
        )
    return found


_QUEUED_BY = ["  colab_gpu_guard: the per-cell reseed of %seed_all --every-cell\n"]


def queue_cuda_seed_all(torch: ModuleType, value: int) -> None:
    """``torch.cuda.manual_seed_all(value)`` for a per-cell hot path.

    Before CUDA starts, torch queues the seeding for when it does, and records
    ``traceback.format_stack()`` with it (about 100 us in a notebook's deep stack, every
    cell). This queues the same callback in the same slot of torch's lazy-seed tracker,
    under the same lock, with a fixed origin line instead. Where torch's internals are
    not as expected, it calls ``manual_seed_all``.
    """
    cuda = torch.cuda
    tracker = getattr(cuda, "_lazy_seed_tracker", None)
    lock = getattr(cuda, "_initialization_lock", None)
    if lock is None or not callable(getattr(tracker, "queue_seed_all", None)):
        cuda.manual_seed_all(value)
        return

    def seed_every_device() -> None:
        for index in range(cuda.device_count()):
            cuda.default_generators[index].manual_seed(value)

    with lock:
        if cuda.is_initialized():
            seed_every_device()
        else:
            tracker.queue_seed_all(seed_every_device, _QUEUED_BY)


def _device_to_seed_from(torch: ModuleType) -> Optional[int]:
    """A device with a context to make current while seeding, or None to stay put.

    A CUDA generator's seed is host-side state: seeding device i's generator touches no
    GPU, except that torch first asks whether the *current* device's stream is being
    captured into a CUDA graph. Released torch asks only where that device already has a
    context (``at::cuda::currentStreamCaptureStatus``); newer code asks unconditionally
    (``c10::cuda::currentStreamCaptureIdMayInitCtx``), which would create a context on a
    current device that has none. So when the current device has no context and another
    has, seeding runs with that one current.
    """
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    if has_context is None or not cuda_initialized(torch):
        return None
    try:
        if has_context(int(torch.cuda.current_device())):
            return None
        return next(iter(devices_with_context(torch)), None)
    except Exception:  # torch: the driver query (no driver, a broken context)
        return None


@contextmanager
def seeding_device(torch: ModuleType) -> Iterator[None]:
    """Run CUDA seeding (``torch.manual_seed``, a device generator's ``manual_seed``) so
    that it creates no CUDA context: see `_device_to_seed_from`. Restoring the previous
    device on exit (``torch.cuda.device``, i.e. ``MaybeExchangeDevice``) creates none."""
    index = _device_to_seed_from(torch)
    if index is None:
        yield
        return
    with torch.cuda.device(index):
        yield


def seed_cuda_generators(torch: ModuleType, value: int) -> None:
    """Seed every CUDA device's default generator now (CUDA initialised), creating no
    context: a device without one keeps the seed until its first use."""
    with seeding_device(torch):
        for generator in torch.cuda.default_generators:
            generator.manual_seed(value)


# ---------------------------------------------------------------- allocator figures


class AllocatorStats(NamedTuple):
    """What this process's caching allocator holds on one device, in bytes.
    ``allocated_total``: bytes ever allocated (torch's accumulated ``allocated`` counter,
    which ``reset_peak_memory_stats`` leaves alone)."""

    device: int
    allocated: int
    reserved: int
    peak_allocated: int
    num_ooms: int
    allocated_total: int = 0


def allocator_stats(
    torch: Optional[ModuleType] = None, count: Optional[int] = None
) -> list[AllocatorStats]:
    """Per-device allocator figures; empty unless CUDA is initialised (never initialises
    it). `count` (the device count, when the caller knows it) skips the check: the per-cell
    hooks call this after checking themselves.

    Reads ``torch._C._cuda_memoryStats`` (the nested dict behind ``memory_stats``) instead
    of ``torch.cuda.memory_allocated`` & co., which each flatten and sort the whole dict:
    host-side allocator bookkeeping only, no CUDA call, no synchronisation.
    """
    torch = torch or loaded()
    if count is None:
        if torch is None or not cuda_initialized(torch):
            return []
        count = cuda_device_count(torch)
    raw_stats = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
    stats = []
    for index in range(count):
        if raw_stats is not None:
            raw = raw_stats(index)
            allocated = raw["allocated_bytes"]["all"]
            reserved = raw["reserved_bytes"]["all"]
            figures = (
                allocated["current"],
                reserved["current"],
                allocated["peak"],
                allocated["allocated"],
            )
        else:
            flat = torch.cuda.memory_stats(index)
            figures = (
                flat.get("allocated_bytes.all.current", 0),
                flat.get("reserved_bytes.all.current", 0),
                flat.get("allocated_bytes.all.peak", 0),
                flat.get("allocated_bytes.all.allocated", 0),
            )
            raw = flat
        stats.append(
            AllocatorStats(
                index,
                int(figures[0]),
                int(figures[1]),
                int(figures[2]),
                int(raw.get("num_ooms", 0)),
                int(figures[3]),
            )
        )
    return stats


def reset_peaks(torch: ModuleType, count: int) -> None:
    """Reset the allocator's peak statistics on every device (host-side, no sync)."""
    reset = getattr(torch._C, "_cuda_resetPeakMemoryStats", None)
    for index in range(count):
        if reset is not None:
            reset(index)
        else:
            torch.cuda.reset_peak_memory_stats(index)


# ---------------------------------------------------------------- arrays (leftovers, reset)


def tensor_type(torch: Optional[ModuleType] = None) -> Optional[type]:
    """``torch.Tensor`` if torch is imported, else None (never imports torch)."""
    torch = torch or loaded()
    return getattr(torch, "Tensor", None) if torch is not None else None


def module_type(torch: Optional[ModuleType] = None) -> Optional[type]:
    """``torch.nn.Module`` if torch is imported, else None."""
    torch = torch or loaded()
    nn = getattr(torch, "nn", None) if torch is not None else None
    return getattr(nn, "Module", None)


def has_accelerator(torch: Optional[ModuleType] = None) -> bool:
    """A CUDA or MPS device is visible to torch (does not create a CUDA context)."""
    torch = torch or loaded()
    if torch is None:
        return False
    return cuda_device_count(torch) > 0 or mps_available(torch)


def release_cuda_caches(torch: ModuleType) -> list[str]:
    """Return cached allocator blocks to the driver; call only on a healthy context, after
    synchronising. ``empty_cache`` empties every device's cache in one call (the caching
    allocator loops over its per-device allocators); a device's allocator calls CUDA only
    for the blocks and events it holds, so a device without a context (which holds none)
    is not touched and gets none. ``ipc_collect`` frees what this process shared with
    others, on the devices it came from.
    """
    devices = devices_with_context(torch)
    if not devices:
        return []
    names = ", ".join(f"cuda:{index}" for index in devices)
    torch.cuda.empty_cache()
    torch.cuda.ipc_collect()
    return [
        f"torch.cuda.empty_cache() ({names}: the devices with a CUDA context)",
        "torch.cuda.ipc_collect()",
    ]


def release_other_caches(torch: ModuleType) -> list[str]:
    """Empty torch caches that need no CUDA context (MPS)."""
    done = []
    mps = getattr(torch, "mps", None)
    if mps_available(torch) and hasattr(mps, "empty_cache"):
        mps.empty_cache()
        done.append("torch.mps.empty_cache()")
    return done
