"""NumPy: its legacy global RNG (``numpy.random.seed``)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

from . import torch as torch_support
from .base import ArrayInfo, Extent, extent, presence, storage_key

NAME = "NumPy"
MODULE = "numpy"

loaded, installed, version = presence(MODULE)


def seed(value: int) -> str:
    import numpy

    numpy.random.seed(value)
    return "numpy.random.seed (the legacy global RNG)"


def array_type() -> Optional[type]:
    numpy = loaded()
    return getattr(numpy, "ndarray", None) if numpy is not None else None


class _Readers(NamedTuple):
    """ndarray's and dtype's own C-level getters: a subclass's ``__getattribute__`` or
    properties never run."""

    ndarray: type
    base: Callable[[Any], Any]
    shape: Callable[[Any], Any]
    dtype: Callable[[Any], Any]
    nbytes: Callable[[Any], Any]
    interface: Callable[[Any], Any]
    hasobject: Callable[[Any], Any]
    itemsize: Callable[[Any], Any]


_READERS: dict[int, _Readers] = {}


def _readers(numpy: Any) -> _Readers:
    ndarray = numpy.ndarray
    made = _READERS.get(id(ndarray))
    if made is None or made.ndarray is not ndarray:
        own = vars(ndarray)
        made = _READERS[id(ndarray)] = _Readers(
            ndarray,
            own["base"].__get__,
            own["shape"].__get__,
            own["dtype"].__get__,
            own["nbytes"].__get__,
            own["__array_interface__"].__get__,
            vars(numpy.dtype)["hasobject"].__get__,
            vars(numpy.dtype)["itemsize"].__get__,
        )
    return made


def array_info(array) -> ArrayInfo:
    """An ndarray's metadata, read through ndarray's own getters (a subclass's code never
    runs). Views are followed through ``.base`` to the array that owns the memory, so a
    view and its base share one storage key. The key is the memory's address, as torch's
    is: an ndarray over a torch tensor's memory (``t.numpy()``) takes that tensor's storage
    key, and a tensor over an ndarray's (``torch.from_numpy``) has the ndarray's address,
    so memory the two share is counted once."""
    numpy = loaded()
    if numpy is None:
        raise ValueError("NumPy is not imported")
    read = _readers(numpy)
    ndarray = read.ndarray
    root = array
    base = read.base(root)
    while issubclass(type(base), ndarray):
        root, base = base, read.base(base)
    shape, dtype = tuple(read.shape(array)), str(read.dtype(array))
    nbytes = int(read.nbytes(array))
    owner = base
    # a plain tensor (a subclass is not read: its methods could run user code)
    if owner is not None and type(owner) is torch_support.tensor_type():
        held = torch_support.array_info(owner)
        return ArrayInfo(
            shape, dtype, "cpu", nbytes, held.storage_key, held.storage_nbytes, held.storage_id
        )
    size = int(read.nbytes(root))
    address = read.interface(root, ndarray)["data"][0] if size else 0
    if not address:  # an empty array: a key of its own
        return ArrayInfo(shape, dtype, "cpu", nbytes, ("numpy", id(root)), size, id(root))
    return ArrayInfo(shape, dtype, "cpu", nbytes, storage_key("cpu", address), size, address)


def array_extent(array) -> Optional[Extent]:
    """Where an ndarray's elements lie (`base.Extent`), read through ndarray's own getters;
    None without NumPy, or for an empty one."""
    numpy = loaded()
    if numpy is None:
        return None
    read = _readers(numpy)
    interface = read.interface(array, read.ndarray)
    address = interface["data"][0]
    if not address:
        return None
    shape = tuple(interface["shape"])
    itemsize = int(read.itemsize(read.dtype(array)))
    strides = interface.get("strides") or _c_strides(shape, itemsize)
    return extent(address, shape, tuple(strides), itemsize)


def _c_strides(shape: tuple, itemsize: int) -> tuple[int, ...]:
    """A C-contiguous array's strides (``__array_interface__`` gives None for them)."""
    strides, step = [], itemsize
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def object_items(array) -> tuple[Optional[list], tuple]:
    """The items of an ndarray of Python objects, flattened, and its shape; (None, ())
    for any other array. Read on a plain ndarray view, through ndarray's own getters and
    methods (a subclass's code never runs)."""
    numpy = loaded()
    if numpy is None:
        return None, ()
    read = _readers(numpy)
    ndarray = read.ndarray
    try:
        if not read.hasobject(read.dtype(array)):
            return None, ()
        shape = tuple(read.shape(array))
        plain = array if type(array) is ndarray else ndarray.view(array, ndarray)
        items = ndarray.tolist(ndarray.ravel(plain))
    except Exception:  # NumPy on a user's array (an odd layout)
        return None, ()
    return (items, shape) if type(items) is list else (None, ())
