"""NumPy: its legacy global RNG (``numpy.random.seed``)."""

from __future__ import annotations

from typing import Optional

from .base import ArrayInfo, presence

NAME = "NumPy"
MODULE = "numpy"

loaded, installed, version = presence(MODULE)


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


def array_info(array) -> ArrayInfo:
    """An ndarray's metadata. Views are followed through ``.base`` to the array that owns
    the memory, so a view and its base share one storage key."""
    ndarray = type(array)
    numpy = loaded()
    if numpy is not None:
        ndarray = numpy.ndarray
    root = array
    while isinstance(root.base, ndarray):
        root = root.base
    return ArrayInfo(
        tuple(array.shape),
        str(array.dtype),
        "cpu",
        int(array.nbytes),
        ("numpy", id(root)),
        int(root.nbytes),
        id(root),
    )
