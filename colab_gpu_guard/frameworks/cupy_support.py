"""CuPy: seeded on every device, only when the user imported it already."""

from __future__ import annotations

from types import ModuleType
from typing import Optional

from . import is_installed, loaded_module, module_version

NAME = "CuPy"
MODULE = "cupy"


def loaded() -> Optional[ModuleType]:
    return loaded_module(MODULE)


def installed() -> bool:
    return is_installed(MODULE)


def version() -> str:
    return module_version(loaded(), "cupy")


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
