"""PyTorch tensors' metadata for the leftovers scan: shape, dtype, device, bytes and the
storage they share, one tensor at a time or many in one C-level pass.

Part of ``frameworks.torch`` (which exports `array_info` and `array_infos` under the
Framework protocol's names); never imports torch.
"""

from __future__ import annotations

import contextlib
import itertools
import operator
import sys
import weakref
from contextlib import nullcontext
from functools import partial
from operator import attrgetter, methodcaller
from typing import Any, Optional

from .base import ArrayInfo, Extent, extent, short_type_name, storage_key


def _dense_nbytes(tensor) -> int:
    try:
        return tensor.numel() * tensor.element_size()
    except Exception:  # torch: a user's tensor (a subclass may refuse)
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


def no_subclass_dispatch() -> Any:
    """A context in which reading a tensor runs no subclass's ``__torch_function__`` (user
    code): torch's own getters and methods check for one on every call (``.dim()``,
    ``.grad_fn``, ``untyped_storage()``) unless subclass dispatch is switched off, as here
    (torch's C context manager: cheap enough per tensor). Nothing without torch."""
    torch = sys.modules.get("torch")
    disable = getattr(getattr(torch, "_C", None), "DisableTorchFunctionSubclass", None)
    return disable() if disable is not None else nullcontext()


def array_info(tensor) -> ArrayInfo:
    """A tensor's metadata. Views share their base's untyped storage, so they share its
    key. Tensors without a storage (sparse, nested) count their own bytes under a key of
    their own; meta tensors hold no memory and count 0 bytes. A subclass's
    ``__torch_function__`` never runs.
    """
    with no_subclass_dispatch():
        return _array_info(tensor)


def _shape(tensor) -> tuple:
    """A tensor's shape; a nested tensor with torch's older layout has none: its ragged
    dimensions are shown as ``*`` (``2x*x8``)."""
    try:
        return tuple(tensor.shape)
    except RuntimeError:
        if not tensor.is_nested:
            raise
    sizes: list = []
    for dim in range(tensor.dim()):
        try:
            sizes.append(tensor.size(dim))
        except RuntimeError:
            sizes.append("*")
    return tuple(sizes)


def _python_wrapper(tensor) -> bool:
    """A wrapper subclass (``_make_wrapper_subclass``: DTensor, a nested tensor with the
    jagged layout, a quantized weight): no memory of its own, its inner tensors (its
    attributes) hold it."""
    try:
        python = sys.modules["torch"]._C.DispatchKey.Python
        return sys.modules["torch"]._C._dispatch_keys(tensor).has(python)
    except Exception:  # torch: this build's dispatch internals
        return False


def wrapper_kind(tensor) -> Optional[str]:
    """What a wrapper subclass is, as its line says beside its dtype: its layout where
    torch names one other than strided (a nested tensor's ``"jagged"``), else its class's
    name (``"DTensor"``, a quantized weight's); None for any other tensor. Read through
    torch's C descriptor of the layout and the type's own name: no subclass code runs."""
    if not _python_wrapper(tensor):
        return None
    layout = "strided"
    getter = vars(_tensor_base() or object).get("layout")
    if getter is not None:
        with contextlib.suppress(Exception):  # torch: a user's wrapper subclass
            layout = str(getter.__get__(tensor)).rpartition(".")[2]
    return layout if layout != "strided" else short_type_name(type(tensor))


def _array_info(tensor) -> ArrayInfo:
    shape = _shape(tensor)
    dtype = _dtype_name(tensor.dtype)
    device = _device_name(tensor)
    if device == "meta":
        return ArrayInfo(shape, dtype, device, 0, ("meta", id(tensor)), 0, id(tensor))
    nbytes = _dense_nbytes(tensor)
    try:
        storage = tensor.untyped_storage()
        storage_nbytes = storage.nbytes()
        pointer = storage.data_ptr()
    except Exception:  # torch: sparse tensors and wrapper subclasses have no plain storage
        layout_bytes = _sparse_nbytes(tensor)
        if layout_bytes is not None:
            nbytes = layout_bytes
        elif _python_wrapper(tensor):
            nbytes = 0
        return ArrayInfo(shape, dtype, device, nbytes, ("tensor", id(tensor)), nbytes, id(tensor))
    if storage_nbytes == 0 or pointer == 0:
        key = ("tensor", id(tensor))
        return ArrayInfo(shape, dtype, device, nbytes, key, storage_nbytes, id(tensor))
    key = storage_key(device, pointer)
    return ArrayInfo(shape, dtype, device, nbytes, key, storage_nbytes, pointer)


# a sparse layout's component tensors, by the name of its layout
_SPARSE_PARTS = {
    "sparse_coo": ("_indices", "_values"),
    "sparse_csr": ("crow_indices", "col_indices", "values"),
    "sparse_bsr": ("crow_indices", "col_indices", "values"),
    "sparse_csc": ("ccol_indices", "row_indices", "values"),
    "sparse_bsc": ("ccol_indices", "row_indices", "values"),
}

SPARSE_LAYOUTS = frozenset(_SPARSE_PARTS)  # as torch names them (`sparse_parts`)


def sparse_parts(tensor) -> Optional[tuple[str, list[tuple[str, Any]]]]:
    """A sparse tensor's layout as torch names it (``"sparse_csr"``) and its component
    tensors, each with the call that gives it (``"_indices()"``, ``"_values()"``; a CSR
    tensor's ``"crow_indices()"``...), read with subclass dispatch off; None for any other
    tensor. Their storages are what the sparse tensor holds, and may be tensors a name
    holds too (``sparse_coo_tensor(i, v)`` keeps ``i`` and ``v`` themselves)."""
    with no_subclass_dispatch():
        try:
            layout = str(tensor.layout).rpartition(".")[2]
            parts = _SPARSE_PARTS.get(layout)
            if parts is None:
                return None
            return layout, [(f"{name}()", getattr(tensor, name)()) for name in parts]
        except Exception:  # torch: a user's sparse tensor
            return None


def _sparse_nbytes(tensor) -> Optional[int]:
    """A sparse tensor's memory: its component tensors' storages (indices and values; a
    CSR tensor's compressed rows too), each counted once; None for another layout."""
    try:
        parts = _SPARSE_PARTS.get(str(tensor.layout).rpartition(".")[2])
        if parts is None:
            return None
        storages = {}
        for name in parts:
            storage = getattr(tensor, name)().untyped_storage()
            storages[storage.data_ptr()] = storage.nbytes()
        return sum(storages.values())
    except Exception:  # torch: a user's sparse tensor
        return None


_SHAPE = attrgetter("shape")
_DIM = methodcaller("dim")
_NUMEL = methodcaller("numel")
_DTYPE = attrgetter("dtype")
_DEVICE = attrgetter("device")
_IS_CPU = attrgetter("is_cpu")
_NBYTES = attrgetter("nbytes")
_UNTYPED_STORAGE = methodcaller("untyped_storage")
_STORAGE_NBYTES = methodcaller("nbytes")
_DATA_PTR = methodcaller("data_ptr")
_NEW_INFO = partial(tuple.__new__, ArrayInfo)


def _tensor_base() -> Any:
    """torch's C base class of tensors (None where this torch names it otherwise)."""
    compiled = getattr(sys.modules.get("torch"), "_C", None)
    return getattr(compiled, "TensorBase", None) or getattr(compiled, "_TensorBase", None)


def _storage_methods() -> tuple:
    """``untyped_storage``, the storage's ``nbytes`` and ``data_ptr``: torch's own C methods,
    called unbound (no bound method is made per tensor, and no Python override of a
    subclass runs); methodcallers where this torch names its C bases otherwise."""
    compiled = getattr(sys.modules.get("torch"), "_C", None)
    tensor_base = _tensor_base()
    storage_base = getattr(compiled, "StorageBase", None)
    methods = (
        getattr(tensor_base, "untyped_storage", None),
        getattr(storage_base, "nbytes", None),
        getattr(storage_base, "data_ptr", None),
    )
    if None in methods:
        return _UNTYPED_STORAGE, _STORAGE_NBYTES, _DATA_PTR
    return methods


class _Shapes(dict):
    """Shape tuples of 0-d and 1-d tensors by element count (-1: a 0-d tensor), each made
    once: a notebook's 10^6 scalars and vectors share a few tuples."""

    def __missing__(self, count: int) -> tuple:
        shape = self[count] = () if count < 0 else (count,)
        return shape


def _shapes(tensors: list, nbytes: list, dtypes: list, kinds: set) -> list[tuple]:
    """Each tensor's shape as a tuple. Reading ``.shape`` builds a torch.Size per tensor
    (about 0.8 µs, and an object the cyclic collector then goes over); a 0-d or 1-d
    tensor's shape is known from its dim() and its element count: its bytes (``nbytes``)
    over its dtype's item size. ``kinds``: the dtypes among `dtypes`."""
    tensor_base = _tensor_base()
    dims = list(map(getattr(tensor_base, "dim", _DIM), tensors))
    sizes = {dtype: dtype.itemsize for dtype in kinds}
    vectors = _one_value(dims) and dims[0] == 1
    if vectors and len(sizes) == 1 and _one_value(nbytes):
        # vectors of one dtype and one length (a dataset's samples): one shape for all
        return [(nbytes[0] // next(iter(sizes.values())),)] * len(tensors)
    if not vectors and min(dims, default=0) > 1:
        return list(map(tuple, map(_SHAPE, tensors)))
    if len(sizes) == 1:  # one dtype (a list of 10^6 tensors): one item size
        items = itertools.repeat(next(iter(sizes.values())))
    else:
        items = map(sizes.__getitem__, dtypes)
    counts = list(map(operator.floordiv, nbytes, items))
    made = _Shapes()
    shapes = list(map(made.__getitem__, counts))  # as if each were 1-d
    if dims.count(1) == len(dims):
        return shapes
    # the others (a model's weights among 10^5 vectors) put right one by one
    for index in itertools.compress(itertools.count(), map((1).__ne__, dims)):
        shapes[index] = made[-1] if dims[index] == 0 else tuple(tensors[index].shape)
    return shapes


def _one_value(values: list) -> bool:
    """Whether every value in `values` (small ints: dims, sizes) is the first, seen in C."""
    return bool(values) and values.count(values[0]) == len(values)


def _device_texts(tensors: list) -> list[str]:
    """Each tensor's device name; on a CPU notebook without a torch.device per tensor."""
    if tensors and tensors[0].is_cpu and all(map(_IS_CPU, tensors)):
        return ["cpu"] * len(tensors)
    devices = list(map(_DEVICE, tensors))
    names = {device: str(device) for device in set(devices)}
    if "meta" in names.values():
        raise ValueError("meta tensors")  # array_info handles them
    return list(map(names.__getitem__, devices))


def array_columns(tensors: list) -> tuple[list, ...]:
    """`_array_columns`, running no subclass's ``__torch_function__``."""
    with no_subclass_dispatch():
        return _array_columns(tensors)


def _array_columns(tensors: list) -> tuple[list, ...]:
    """``array_info`` of many tensors as columns, in `ArrayInfo`'s field order (shapes,
    dtypes, devices, nbytes, storage keys, storage nbytes, storage ids): one C-level pass
    per attribute (``map`` with ``attrgetter``/``methodcaller``; a notebook may hold 10^6
    tensors), and no record per tensor. Raises where any tensor is unusual (meta, sparse or
    nested, an attribute that raises): the caller then reads them one at a time with
    ``array_info``.
    """
    device_texts = _device_texts(tensors)
    dtypes = list(map(_DTYPE, tensors))
    kinds = set(dtypes)
    dtype_names = {dtype: _dtype_name(dtype) for dtype in kinds}
    nbytes = list(map(_NBYTES, tensors))  # numel() * element_size(), in C
    shapes = _shapes(tensors, nbytes, dtypes, kinds)
    untyped_storage, storage_nbytes_of, data_ptr = _storage_methods()
    storages = list(map(untyped_storage, tensors))
    storage_nbytes = list(map(storage_nbytes_of, storages))
    pointers = list(map(data_ptr, storages))
    del storages
    if device_texts.count("cpu") == len(device_texts):  # host memory: its address
        keys = pointers  # the ids too: one list (`Found.finish` parts them before adding)
    else:
        keys = list(map(storage_key, device_texts, pointers))
    ids = pointers
    if 0 in pointers or 0 in storage_nbytes:  # empty storages: a key of their own
        ids = list(pointers)
        keys = list(keys)
        for index, (size, pointer) in enumerate(zip(storage_nbytes, pointers)):
            if size == 0 or pointer == 0:
                ident = id(tensors[index])
                keys[index], ids[index] = ("tensor", ident), ident
    if len(dtype_names) == 1:  # one dtype: one name
        dtype_texts = [next(iter(dtype_names.values()))] * len(dtypes)
    else:
        dtype_texts = list(map(dtype_names.__getitem__, dtypes))
    return shapes, dtype_texts, device_texts, nbytes, keys, storage_nbytes, ids


def array_infos(tensors: list) -> list[ArrayInfo]:
    """``array_info`` of many tensors (`array_columns`, one record per tensor)."""
    return list(map(_NEW_INFO, zip(*array_columns(tensors))))


def array_spans(
    tensors: list, nbytes: list[int]
) -> tuple[list[bool], list[int], list[int], list[Optional[Extent]]]:
    """Where tensors' elements lie (`nbytes`: their `ArrayInfo`'s), through torch's own C
    methods, no subclass's code running: which are contiguous (a slice of rows, the common
    view), their start and end addresses (10^5 of them in C), and the `base.Extent` of
    each other one, from its sizes and strides (None where a tensor has none)."""
    tensor_base = _tensor_base()
    if tensor_base is None:
        return [False] * len(tensors), [], [], [None] * len(tensors)
    with no_subclass_dispatch():
        try:
            pointers = list(map(tensor_base.data_ptr, tensors))
            contiguous = list(map(tensor_base.is_contiguous, tensors))
        except Exception:  # torch: an unusual tensor among them, so one by one
            others = [_extent(tensor_base, tensor) for tensor in tensors]
            return [False] * len(tensors), [], [], others
        if False not in contiguous:
            return contiguous, pointers, list(map(operator.add, pointers, nbytes)), []
        starts = list(itertools.compress(pointers, contiguous))
        ends = list(map(operator.add, starts, itertools.compress(nbytes, contiguous)))
        others = itertools.compress(tensors, map(operator.not_, contiguous))
        return contiguous, starts, ends, [_extent(tensor_base, tensor) for tensor in others]


def _extent(tensor_base, tensor) -> Optional[Extent]:
    try:
        size = tensor_base.element_size(tensor)
        strides = tuple(stride * size for stride in tensor_base.stride(tensor))
        shape = tuple(tensor_base.size(tensor))
        return extent(tensor_base.data_ptr(tensor), shape, strides, size)
    except Exception:  # torch: a tensor without strides (sparse, nested)
        return None


def _storage_weakref(untyped_storage, tensor) -> Optional[weakref.ref]:
    try:
        return weakref.ref(untyped_storage(tensor))
    except Exception:  # torch: a storage that takes no weakref
        return None


def storage_weakrefs(tensors: list) -> list[Optional[weakref.ref]]:
    """A weakref to each tensor's storage (torch's own C method: no subclass override runs).

    torch keeps a storage's Python object alive while its memory lives, so the weakref
    dies only once no tensor - a view held anywhere included - uses that memory: unlike a
    weakref to the tensor, it proves the memory was freed. None where no such weakref can
    be taken, or where this torch does not keep the storage's object (the weakref is dead
    at once, while the tensor lives)."""
    untyped_storage = _storage_methods()[0]
    with no_subclass_dispatch():
        try:
            weaks = list(map(weakref.ref, map(untyped_storage, tensors)))
        except Exception:  # torch: one refused, so one by one
            weaks = [_storage_weakref(untyped_storage, tensor) for tensor in tensors]
    return [weak if weak is not None and weak() is not None else None for weak in weaks]
