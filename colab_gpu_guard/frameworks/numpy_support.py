"""NumPy: its legacy global RNG (``numpy.random.seed``)."""

from __future__ import annotations

from types import ModuleType
from typing import Optional

from . import is_installed, loaded_module, module_version

NAME = "NumPy"
MODULE = "numpy"


def loaded() -> Optional[ModuleType]:
    return loaded_module(MODULE)


def installed() -> bool:
    return is_installed(MODULE)


def version() -> str:
    return module_version(loaded(), "numpy")


def seed(value: int) -> str:
    import numpy

    numpy.random.seed(value)
    return "numpy.random.seed (the legacy global RNG)"


def is_array(obj: object) -> bool:
    numpy = loaded()
    return numpy is not None and isinstance(obj, numpy.ndarray)


def array_type() -> Optional[type]:
    numpy = loaded()
    return getattr(numpy, "ndarray", None) if numpy is not None else None


def array_info(array) -> tuple:
    """(shape, dtype, device, nbytes, storage_key, storage_nbytes, storage_id) of an ndarray.

    Views are followed through ``.base`` to the array that owns the memory, so a view and
    its base share one storage key.
    """
    ndarray = type(array)
    numpy = loaded()
    if numpy is not None:
        ndarray = numpy.ndarray
    root = array
    while isinstance(root.base, ndarray):
        root = root.base
    return (
        tuple(array.shape),
        str(array.dtype),
        "cpu",
        int(array.nbytes),
        ("numpy", id(root)),
        int(root.nbytes),
        id(root),
    )
