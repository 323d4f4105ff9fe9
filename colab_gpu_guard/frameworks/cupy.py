"""CuPy: seeded on every device, only when the user imported it already."""

from __future__ import annotations

from typing import Optional

from .base import ArrayInfo, presence

NAME = "CuPy"
MODULE = "cupy"

loaded, installed, version = presence(MODULE)


def device_count() -> int:
    cupy = loaded()
    if cupy is None:
        return 0
    try:
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # CUDARuntimeError without a driver or device
        return 0


def seed(value: int) -> str:
    cupy = loaded()
    assert cupy is not None, "seed CuPy only once the user imported it"
    count = device_count()
    for index in range(count):
        with cupy.cuda.Device(index):
            cupy.random.seed(value)
    return f"cupy.random.seed on {count} device(s)"


def array_type() -> Optional[type]:
    cupy = loaded()
    return getattr(cupy, "ndarray", None) if cupy is not None else None


def is_array(obj: object) -> bool:
    kind = array_type()
    return kind is not None and isinstance(obj, kind)


def array_info(array) -> ArrayInfo:
    """A CuPy array's metadata: views share their base's ``Memory`` allocation
    (``array.data.mem``)."""
    device = f"cuda:{int(array.device.id)}"
    nbytes = int(array.nbytes)
    memory = getattr(getattr(array, "data", None), "mem", None)
    if memory is None or not getattr(memory, "ptr", 0):
        return ArrayInfo(
            tuple(array.shape),
            str(array.dtype),
            device,
            nbytes,
            ("cupy", id(array)),
            nbytes,
            id(array),
        )
    pointer = int(memory.ptr)
    size = int(getattr(memory, "size", nbytes))
    return ArrayInfo(
        tuple(array.shape), str(array.dtype), device, nbytes, (device, pointer), size, pointer
    )


def release_caches() -> list[str]:
    """Free every unused block of CuPy's default device and pinned memory pools."""
    cupy = loaded()
    if cupy is None:
        return []
    done = []
    cupy.get_default_memory_pool().free_all_blocks()
    done.append("cupy.get_default_memory_pool().free_all_blocks()")
    pinned = getattr(cupy, "get_default_pinned_memory_pool", None)
    if pinned is not None:
        pinned().free_all_blocks()
        done.append("cupy.get_default_pinned_memory_pool().free_all_blocks()")
    return done
