"""CuPy: seeded and its pools emptied only when the user imported it already, and only on
devices that already have a CUDA context.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
from typing import Any, Callable, Iterator, Optional

from ..units import format_bytes
from .base import ArrayInfo, presence

NAME = "CuPy"
MODULE = "cupy"
SEED_VARIABLE = "CUPY_SEED"

loaded, installed, version = presence(MODULE)


def device_count() -> int:
    cupy = loaded()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # CuPy: CUDARuntimeError without a driver or device
        return 0


# ---------------------------------------------------------------- which devices have a context

# What CuPy does (checked in its source, v14): ``cupy.random.seed`` seeds the generator of
# the *current* device, creating it (a cuRAND generator, so a CUDA context) if that device
# has none; a device's generator is otherwise created at its first ``cupy.random`` use,
# seeded from ``CUPY_SEED`` when that is set (``cupy/random/_generator.py``,
# ``get_random_state``). The memory pool's ``free_all_blocks``, ``used_bytes`` and
# ``total_bytes`` act on the current device's pool only (``cupy/cuda/memory.pyx``,
# ``MemoryPool.device_pool``). And ``with cupy.cuda.Device(i)`` calls ``cudaSetDevice`` on
# entry and, to restore, on exit (``cupy/cuda/device.pyx``): under CUDA 12 that creates a
# context on a device without one. So a device is made current only when both it and the
# device current before have one.

_CUDA_ERROR_NOT_INITIALIZED = 3
_DRIVER_NAMES = ("nvcuda.dll",) if sys.platform == "win32" else ("libcuda.so.1", "libcuda.so")


@functools.cache
def _driver() -> Optional[tuple[Callable, Callable]]:
    """``cuDeviceGet`` and ``cuDevicePrimaryCtxGetState`` from the CUDA driver library, or
    None where it cannot be loaded (CuPy has its own bindings, but not this query)."""
    for name in _DRIVER_NAMES:
        try:
            library = ctypes.CDLL(name)
        except OSError:
            continue
        get_device = library.cuDeviceGet
        get_device.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_int]
        get_device.restype = ctypes.c_int
        get_state = library.cuDevicePrimaryCtxGetState
        get_state.argtypes = [
            ctypes.c_int,
            ctypes.POINTER(ctypes.c_uint),
            ctypes.POINTER(ctypes.c_int),
        ]
        get_state.restype = ctypes.c_int
        return get_device, get_state
    return None


def devices_with_context(count: Optional[int] = None) -> Optional[list[int]]:
    """The devices on which this process has a primary CUDA context (CuPy and torch share
    the primary context), asking the driver, which creates nothing; None where it cannot be
    asked. Before anything initialised the driver in this process there is no context."""
    driver = _driver()
    if driver is None:
        return None
    get_device, get_state = driver
    found = []
    for ordinal in range(device_count() if count is None else count):
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        status = get_device(ctypes.byref(device), ordinal)
        if status == _CUDA_ERROR_NOT_INITIALIZED:
            return []
        if status != 0 or get_state(device, ctypes.byref(flags), ctypes.byref(active)) != 0:
            return None
        if active.value:
            found.append(ordinal)
    return found


def _current_device(cupy) -> int:
    return int(cupy.cuda.runtime.getDevice())  # cudaGetDevice: creates nothing


@contextlib.contextmanager
def _made_current(cupy, index: int, current: int) -> Iterator[None]:
    if index == current:
        yield
    else:
        with cupy.cuda.Device(index):
            yield


def _names(indices) -> str:
    return ", ".join(f"cuda:{index}" for index in indices)


# ---------------------------------------------------------------- seeding


def _generators() -> dict[int, Any]:
    """CuPy's global generators by device (``cupy.random._generator._random_states``),
    never importing CuPy's random module."""
    module = sys.modules.get("cupy.random._generator")
    states = getattr(module, "_random_states", None)
    return dict(states) if isinstance(states, dict) else {}


def seed(value: int) -> str:
    """Seed CuPy's generator on each device that has one, and set ``CUPY_SEED`` so that a
    device CuPy has no generator on yet gets one seeded with `value` at its first use. No
    generator, and so no CUDA context, is created."""
    cupy = loaded()
    assert cupy is not None, "seed CuPy only once the user imported it"
    generators = _generators()
    os.environ[SEED_VARIABLE] = str(value)
    if not generators:
        return (
            f"no CuPy generator exists yet: {SEED_VARIABLE}={value} seeds each device's "
            "when CuPy first draws on it"
        )
    current = _current_device(cupy)
    # A generator implies a context on its device; the current device needs one too before
    # a `with Device(...)` may restore it. Where it has none, seed from where we are.
    can_switch = current in generators or current in (devices_with_context() or ())
    for index, state in sorted(generators.items()):
        if can_switch:
            with _made_current(cupy, index, current):
                state.seed(value)
        else:
            state.seed(value)
    return (
        f"cupy.random.seed on {_names(sorted(generators))} (the devices with a generator); "
        f"{SEED_VARIABLE}={value} seeds the others' when CuPy first draws on them"
    )


# ---------------------------------------------------------------- arrays


def array_type() -> Optional[type]:
    cupy = loaded()
    return getattr(cupy, "ndarray", None) if cupy is not None else None


def array_info(array) -> ArrayInfo:
    """A CuPy array's metadata: views share their base's ``Memory`` allocation
    (``array.data.mem``)."""
    device = f"cuda:{int(array.device.id)}"
    nbytes = int(array.nbytes)
    memory = getattr(getattr(array, "data", None), "mem", None)
    if memory is None or not getattr(memory, "ptr", 0):
        key, size, ident = ("cupy", id(array)), nbytes, id(array)
    else:
        pointer = int(memory.ptr)
        key, size, ident = (device, pointer), int(getattr(memory, "size", nbytes)), pointer
    return ArrayInfo(tuple(array.shape), str(array.dtype), device, nbytes, key, size, ident)


# ---------------------------------------------------------------- releasing the pools


def release_caches() -> list[str]:
    """Free the unused blocks of CuPy's default memory pool on every device with a CUDA
    context (CuPy's pool acts on the current device only, so each is made current in
    turn), then its pinned host memory pool; say what was freed where."""
    cupy = loaded()
    if cupy is None:
        return []
    current = _current_device(cupy)
    with_context = devices_with_context()
    if with_context is None:  # the driver cannot be asked: the current device, as it is
        reachable, unreachable = [current], []
    elif current in with_context:
        reachable, unreachable = with_context, []
    else:
        reachable, unreachable = [], with_context
    done = []
    pool = cupy.get_default_memory_pool()
    for index in reachable:
        with _made_current(cupy, index, current):
            before = int(pool.total_bytes())
            pool.free_all_blocks()
            after, used = int(pool.total_bytes()), int(pool.used_bytes())
        if before:
            done.append(
                f"cupy memory pool on cuda:{index}: freed {format_bytes(before - after)} of "
                f"unused cached memory ({format_bytes(used)} still in use by arrays)"
            )
    if reachable and not done:
        done.append(f"cupy memory pool: nothing cached on {_names(reachable)}")
    if unreachable:
        done.append(
            f"cupy memory pool on {_names(unreachable)}: not emptied; the current device "
            f"cuda:{current} has no CUDA context, and switching away and back would create one"
        )
    done += _release_pinned(cupy, can_free=bool(reachable))
    return done


def _release_pinned(cupy, can_free: bool) -> list[str]:
    """Pinned host blocks are freed with ``cudaFreeHost``, which needs a context current."""
    get_pool = getattr(cupy, "get_default_pinned_memory_pool", None)
    if get_pool is None:
        return []
    pinned = get_pool()
    blocks = int(pinned.n_free_blocks())
    if not blocks:
        return []
    if not can_free:
        return [f"cupy pinned memory pool: {blocks} unused buffers kept (no CUDA context current)"]
    pinned.free_all_blocks()
    return [f"cupy pinned memory pool: {blocks} unused buffers freed"]
