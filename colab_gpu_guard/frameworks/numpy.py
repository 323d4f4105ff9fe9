"""NumPy: its legacy global RNG (``numpy.random.seed``)."""

from __future__ import annotations

from typing import Optional

from . import torch as torch_support
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
    the memory, so a view and its base share one storage key. The key is the memory's
    address, as torch's is: an ndarray over a torch tensor's memory (``t.numpy()``) takes
    that tensor's storage key, and a tensor over an ndarray's (``torch.from_numpy``) has
    the ndarray's address, so memory the two share is counted once."""
    ndarray = type(array)
    numpy = loaded()
    if numpy is not None:
        ndarray = numpy.ndarray
    root = array
    while isinstance(root.base, ndarray):
        root = root.base
    shape, dtype, nbytes = tuple(array.shape), str(array.dtype), int(array.nbytes)
    owner = root.base
    # a plain tensor (a subclass is not read: its methods could run user code)
    if owner is not None and type(owner) is torch_support.tensor_type():
        held = torch_support.array_info(owner)
        return ArrayInfo(
            shape, dtype, "cpu", nbytes, held.storage_key, held.storage_nbytes, held.storage_id
        )
    size = int(root.nbytes)
    # ndarray's own descriptor: a subclass's __array_interface__ could be user code
    address = ndarray.__array_interface__.__get__(root, ndarray)["data"][0] if size else 0
    if not address:  # an empty array: a key of its own
        return ArrayInfo(shape, dtype, "cpu", nbytes, ("numpy", id(root)), size, id(root))
    return ArrayInfo(shape, dtype, "cpu", nbytes, ("cpu", address), size, address)
