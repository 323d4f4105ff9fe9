"""PyTorch: CUDA state, accelerators, tensor metadata and allocator figures.

torch is looked up in ``sys.modules``; only seeding imports it (the user asked for torch to
be seeded and it is installed). Allocator queries never initialise CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from operator import attrgetter, methodcaller
from types import ModuleType
from typing import NamedTuple, Optional

from .base import ArrayInfo, presence

NAME = "PyTorch"
MODULE = "torch"

loaded, installed, version = presence(MODULE)


def import_torch() -> ModuleType:
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
    except Exception:
        return []


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
    except Exception:
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


def is_array(obj: object) -> bool:
    tensor = tensor_type()
    return tensor is not None and isinstance(obj, tensor)


def _dense_nbytes(tensor) -> int:
    try:
        return tensor.numel() * tensor.element_size()
    except Exception:
        return 0


_DTYPE_NAMES: dict = {}
_CUDA_NAMES: dict = {}


def _dtype_name(dtype) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = str(dtype).replace("torch.", "")
    return name


def _device_name(tensor) -> str:
    index = tensor.get_device()  # -1 on CPU; no torch.device object is built
    if index >= 0 and tensor.is_cuda:
        name = _CUDA_NAMES.get(index)
        if name is None:
            name = _CUDA_NAMES[index] = f"cuda:{index}"
        return name
    if index < 0 and tensor.is_cpu:
        return "cpu"
    return str(tensor.device)


def array_info(tensor) -> ArrayInfo:
    """A tensor's metadata. Views share their base's untyped storage, so they share its
    key. Tensors without a storage (sparse, nested) count their own bytes under a key of
    their own; meta tensors hold no memory and count 0 bytes.
    """
    shape = tuple(tensor.shape)
    dtype = _dtype_name(tensor.dtype)
    device = _device_name(tensor)
    if device == "meta":
        return ArrayInfo(shape, dtype, device, 0, ("meta", id(tensor)), 0, id(tensor))
    nbytes = _dense_nbytes(tensor)
    try:
        storage = tensor.untyped_storage()
        storage_nbytes = storage.nbytes()
        pointer = storage.data_ptr()
    except Exception:  # sparse / nested / functional tensors have no plain storage
        layout_bytes = _sparse_nbytes(tensor)
        nbytes = layout_bytes if layout_bytes is not None else nbytes
        return ArrayInfo(shape, dtype, device, nbytes, ("tensor", id(tensor)), nbytes, id(tensor))
    if storage_nbytes == 0 or pointer == 0:
        key = ("tensor", id(tensor))
        return ArrayInfo(shape, dtype, device, nbytes, key, storage_nbytes, id(tensor))
    return ArrayInfo(shape, dtype, device, nbytes, (device, pointer), storage_nbytes, pointer)


def _sparse_nbytes(tensor) -> Optional[int]:
    try:
        if tensor.is_sparse:
            return _dense_nbytes(tensor._values()) + _dense_nbytes(tensor._indices())
    except Exception:
        return None
    return None


_SHAPE = attrgetter("shape")
_DTYPE = attrgetter("dtype")
_DEVICE = attrgetter("device")
_NBYTES = attrgetter("nbytes")
_UNTYPED_STORAGE = methodcaller("untyped_storage")
_STORAGE_NBYTES = methodcaller("nbytes")
_DATA_PTR = methodcaller("data_ptr")
_NEW_INFO = partial(tuple.__new__, ArrayInfo)


def array_infos(tensors: list) -> list[ArrayInfo]:
    """``array_info`` of many tensors, one C-level pass per attribute (``map`` with
    ``attrgetter``/``methodcaller``; a notebook may hold 10^5 tensors). Raises where any
    tensor is unusual (meta, sparse or nested, an attribute that raises): the caller then
    reads them one at a time with ``array_info``.
    """
    devices = list(map(_DEVICE, tensors))
    device_names = {device: str(device) for device in set(devices)}
    if "meta" in device_names.values():
        raise ValueError("meta tensors")  # array_info handles them
    dtypes = list(map(_DTYPE, tensors))
    dtype_names = {dtype: _dtype_name(dtype) for dtype in set(dtypes)}
    shapes = list(map(_SHAPE, tensors))  # torch.Size: a tuple already
    nbytes = list(map(_NBYTES, tensors))  # numel() * element_size(), in C
    storages = list(map(_UNTYPED_STORAGE, tensors))
    storage_nbytes = list(map(_STORAGE_NBYTES, storages))
    pointers = list(map(_DATA_PTR, storages))
    del storages
    device_texts = list(map(device_names.__getitem__, devices))
    infos = list(
        map(
            _NEW_INFO,
            zip(
                shapes,
                map(dtype_names.__getitem__, dtypes),
                device_texts,
                nbytes,
                zip(device_texts, pointers),
                storage_nbytes,
                pointers,
            ),
        )
    )
    if 0 in pointers or 0 in storage_nbytes:  # empty storages: a key of their own
        for index, info in enumerate(infos):
            if info.storage_nbytes == 0 or info.storage_id == 0:
                ident = id(tensors[index])
                infos[index] = info._replace(storage_key=("tensor", ident), storage_id=ident)
    return infos


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
