"""What every framework module answers (`Framework`), and the answers they share."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Hashable
from types import ModuleType
from typing import Callable, NamedTuple, Optional, Protocol

# a type's own short name (``"Foo"``), read through ``type``'s descriptor: a metaclass's
# ``__name__`` never runs (the scan's readers and the tensor readers use it)
short_type_name = type.__dict__["__name__"].__get__


class ArrayInfo(NamedTuple):
    """One array's metadata, as every framework reads it.

    ``nbytes`` is what the array spans; ``storage_key`` identifies the memory it lives in
    (views of one storage share it, so they are counted once); ``storage_nbytes`` is that
    memory's size and ``storage_id`` a number for it (its address where there is one).
    """

    shape: tuple
    dtype: str
    device: str
    nbytes: int
    storage_key: Hashable
    storage_nbytes: int
    storage_id: int


class Extent(NamedTuple):
    """Where an array's elements lie in its memory: from address ``low`` to ``high`` (past
    its last byte), taking ``nbytes`` (each element once: a broadcast dimension adds none;
    at most the span where elements overlap otherwise). A dense array (a slice of rows, a
    transpose) fills ``low`` to ``high`` whole; any other has ``steps``: each moving
    dimension's (size, byte stride), sorted, so that two arrays over the same elements (a
    column slice and its transpose) have equal ``low`` and ``steps``, and its ``itemsize``.
    """

    low: int
    high: int
    nbytes: int
    steps: tuple[tuple[int, int], ...] = ()
    itemsize: int = 0


def extent(address: int, shape: tuple, strides: tuple, itemsize: int) -> Extent:
    """The `Extent` of the array whose first element is at ``address`` (strides in bytes,
    negative ones as NumPy has them)."""
    low = high = address
    moving = []
    for size, stride in zip(shape, strides):
        if size == 0:
            return Extent(address, address, 0)
        if size > 1 and stride:
            moving.append((size, abs(stride)))
            if stride < 0:
                low += (size - 1) * stride
            else:
                high += (size - 1) * stride
    moving.sort(key=lambda step: step[1])
    dense, expected, count = True, itemsize, 1
    for size, stride in moving:
        dense = dense and stride == expected
        expected *= size
        count *= size
    high += itemsize
    nbytes = min(count * itemsize, high - low)  # elements that overlap: their span at most
    return (
        Extent(low, high, nbytes) if dense else Extent(low, high, nbytes, tuple(moving), itemsize)
    )


def storage_key(device: str, address: int) -> Hashable:
    """The storage key of the memory at `address` on `device`: host memory ("cpu") by its
    address alone, one key for a tensor's, an ndarray's and an Arrow buffer's (an int:
    made and hashed cheaply, and never gone over by the cyclic collector, for the 10^6
    tensors a notebook may hold); an accelerator's as ``(device, address)``."""
    return address if device == "cpu" else (device, address)


class Framework(Protocol):
    """What each module of this package (``torch``, ``numpy``, ``cupy``, ``jax``,
    ``tensorflow``, ``python_random``) is: ``NAME`` (what reports call it), ``MODULE`` (its
    ``sys.modules`` key), and ``loaded()`` (the module if the user already imported it,
    never importing it), ``installed()`` and ``version()``, made by `presence`.

    Frameworks with a global RNG add ``seed(value) -> str`` (how it was seeded); those with
    caches to empty add ``release_caches() -> list[str]`` (what was done); those with arrays
    add ``array_type() -> Optional[type]`` and ``array_info(array) -> ArrayInfo``.
    """

    NAME: str
    MODULE: str

    def loaded(self) -> Optional[ModuleType]: ...

    def installed(self) -> bool: ...

    def version(self) -> str: ...


def loaded_module(name: str) -> Optional[ModuleType]:
    """The module if it is fully imported already; never imports it."""
    module = sys.modules.get(name)
    if module is None:
        return None
    # A module half-way through its own import has a spec with `_initializing` set.
    spec = getattr(module, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    return module


def is_installed(name: str) -> bool:
    """Whether `import name` would find something, without importing it."""
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def module_version(module: Optional[ModuleType], dist_name: str) -> str:
    """The version of an imported module, or of the installed distribution."""
    version = getattr(module, "__version__", None) if module is not None else None
    if version:
        return str(version)
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        return dist_version(dist_name)
    except (ImportError, PackageNotFoundError, ValueError):
        return "unknown"


def presence(
    module_name: str, dist_name: Optional[str] = None
) -> tuple[Callable[[], Optional[ModuleType]], Callable[[], bool], Callable[[], str]]:
    """``loaded``, ``installed`` and ``version`` for the framework imported as
    `module_name` (installed as `dist_name`, by default the same name)."""

    def loaded() -> Optional[ModuleType]:
        return loaded_module(module_name)

    def installed() -> bool:
        return is_installed(module_name)

    def version() -> str:
        return module_version(loaded(), dist_name or module_name)

    return loaded, installed, version
