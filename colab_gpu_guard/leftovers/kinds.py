"""What a type is to the reference walk: plain values (nothing inside), an array of a
framework, a container to walk into (sequence, named tuple, mapping, set, ``nn.Module``,
an object's ``__dict__``), a holder (function, partial, generator, iterator, exception,
traceback, ``lru_cache``), or machinery never walked. Cached per type for one scan."""

from __future__ import annotations

import collections
import functools
import itertools
import sys
import types
import weakref
from typing import Callable, NamedTuple, Optional

from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import numpy as numpy_support
from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo
from . import arrow, pandas_frames
from .readers import (
    ITERATOR_TYPES,
    LRU_CACHE_TYPE,
    SUSPENDED_TYPES,
    Layout,
    layout_of,
    mro,
    own_attribute,
    type_module,
    written_in_the_notebook,
)

ATOMIC = frozenset(
    {
        int,
        float,
        complex,
        bool,
        str,
        bytes,
        bytearray,
        type(None),
        range,
        slice,
        type(Ellipsis),
        type(NotImplemented),
    }
)
NOT_ATOMIC = dict.fromkeys(ATOMIC, False).get  # (type, default) -> False for atomic types
ALWAYS = itertools.repeat(True)
ROWS = frozenset({list, tuple, dict})
ROWS_OF_PLAIN = ATOMIC | ROWS
_NOT_WALKED = (
    type,
    types.ModuleType,
    types.BuiltinFunctionType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    weakref.ref,
    property,
    staticmethod,
    classmethod,
)
# The shell, a test runner and this package: machinery, not data (walking them would walk
# the kernel).
# Objects of the standard library and of other libraries are walked as the user's are.
_MACHINERY_PACKAGES = frozenset(
    {
        "IPython",
        "ipykernel",
        "ipywidgets",
        "traitlets",
        "jupyter_client",
        "jupyter_core",
        "comm",
        "zmq",
        "tornado",
        "colab_gpu_guard",
        "google",
        "debugpy",
        "pydevd",
        "_pydevd_bundle",
        "_pytest",
        "pytest",
    }
)
# Libraries whose objects keep their memory where no Python object shows it (C++ or Rust
# buffers, not an array type of a framework the scan reads): named as not looked into.
# (pyarrow's arrays, chunked arrays, tables and buffers are read: `arrow`; its types and
# schemas hold no data.)
UNSEEN_PACKAGES = frozenset({"cudf", "dask_cudf", "polars", "tensorflow"})

# what the walk does with a type (Kind.tag)
SKIP, ARRAY, SEQUENCE, NAMEDTUPLE, MAPPING, SET, NN_MODULE, OBJECT = range(8)
FUNCTION, METHOD, PARTIAL, SUSPENDED, CLASS, ITERATOR = range(8, 14)
EXCEPTION, TRACEBACK, LRU_CACHE, OPAQUE = range(14, 18)
# a C type without attributes to read: what its C traversal holds; a type whose memory
# the scan cannot read (`UNSEEN_PACKAGES`): its holder is named as not looked into
REFERENTS, UNSEEN = range(18, 20)
PANDAS_MANAGER = 20  # a pandas frame's or series' blocks: named by column (`pandas_frames`)
PANDAS_INDEX = 21  # a pandas Index: its labels as `df.columns.values` (`pandas_frames`)
_BUILT_IN_BASES = (list, tuple, collections.deque, dict, set, frozenset)


class Kind(NamedTuple):
    """A type's classification: its tag, and for arrays the framework's name and its
    metadata reader; for containers of a subclass of a built-in type, that built-in base
    (read through its C-level accessors); for objects, where their attributes live, and
    whether their class is one the notebook defined (an instance holds its class, and so
    the class's attributes)."""

    tag: int
    framework: Optional[str] = None
    info_of: Optional[Callable[[object], ArrayInfo]] = None
    base: Optional[type] = None
    layout: Optional[Layout] = None
    notebook_class: bool = False


_SKIPPED = Kind(SKIP)


class Classifier:
    """Types classified for one scan (``kinds``: type -> Kind), and the array types of the
    frameworks the user has imported (none is imported here)."""

    def __init__(self) -> None:
        self.kinds: dict[type, Kind] = {}
        torch = torch_support.loaded()
        self.tensor_type: Optional[type] = torch_support.tensor_type(torch)
        self.nn_module: Optional[type] = torch_support.module_type(torch)
        self.array_types: list[tuple[type, str, Callable[[object], ArrayInfo]]] = []
        if self.tensor_type is not None:
            self.array_types.append((self.tensor_type, "torch", torch_support.array_info))
        for support, name in (
            (numpy_support, "numpy"),
            (cupy_support, "cupy"),
            (jax_support, "jax"),
        ):
            kind = support.array_type()
            if isinstance(kind, type):
                self.array_types.append((kind, name, support.array_info))
        self.tensor_kind = self.classify(self.tensor_type) if self.tensor_type else None

    def classify(self, kind: type) -> Kind:
        cached = self.kinds.get(kind)
        if cached is not None:
            return cached
        result = _SKIPPED
        try:
            result = self._classify(kind)
            if result.tag not in (SKIP, ARRAY) and written_in_the_notebook(kind):
                result = result._replace(notebook_class=True)
        except Exception:  # a user type (its metaclass may run code on isinstance/issubclass)
            result = _SKIPPED
        self.kinds[kind] = result
        return result

    def _classify(self, kind: type) -> Kind:
        if kind in ATOMIC:
            return _SKIPPED
        for array_type, framework, info_of in self.array_types:
            if issubclass(kind, array_type):
                return Kind(ARRAY, framework, info_of)
        bases = mro(kind)
        base = next((item for item in bases if item in _BUILT_IN_BASES), None)
        if base is not None:
            # a subclass is read through its built-in part, and its own attributes
            layout = None if kind is base else layout_of(kind)
            if base is tuple and own_attribute(kind, "_fields") is not None:
                return Kind(NAMEDTUPLE, base=tuple, layout=layout)
            if base is dict:
                return Kind(MAPPING, base=dict, layout=layout)
            if base in (set, frozenset):
                return Kind(SET, base=base, layout=layout)
            return Kind(SEQUENCE, base=base, layout=layout)
        if kind is types.FunctionType:
            return Kind(FUNCTION)
        if kind is types.MethodType:
            return Kind(METHOD)
        if kind in SUSPENDED_TYPES:
            return Kind(SUSPENDED)
        if kind in ITERATOR_TYPES:
            return Kind(ITERATOR)
        if functools.partial in bases:
            return Kind(PARTIAL, layout=layout_of(kind))
        if BaseException in bases:
            return Kind(EXCEPTION, layout=layout_of(kind))
        if kind is types.TracebackType:
            return Kind(TRACEBACK)
        if kind is LRU_CACHE_TYPE:
            return Kind(LRU_CACHE, layout=layout_of(kind))
        if type in bases:  # a class (of any metaclass): its own attributes
            return Kind(CLASS)
        if issubclass(kind, _NOT_WALKED):
            return _SKIPPED
        if _script_object(kind):
            return Kind(OPAQUE)
        if self.nn_module is not None and self.nn_module in bases:
            return Kind(NN_MODULE, layout=layout_of(kind))
        package = type_module(kind).partition(".")[0]
        if package in _MACHINERY_PACKAGES:
            return _SKIPPED
        if package == "pyarrow":  # its data's buffers (`arrow`, `found`); a tensor's are not
            if arrow.holds_arrow_data(kind):
                return Kind(ARRAY, arrow.FRAMEWORK)
            return Kind(UNSEEN) if kind.__name__.endswith("Tensor") else _SKIPPED
        if package in UNSEEN_PACKAGES:
            return Kind(UNSEEN)
        if package == "pandas" and pandas_frames.is_manager(bases):
            return Kind(PANDAS_MANAGER)
        if package == "pandas" and pandas_frames.is_index(bases):
            return Kind(PANDAS_INDEX)
        layout = layout_of(kind)
        if layout.dict_getter is not None or layout.slots:
            return Kind(OBJECT, layout=layout)
        return Kind(REFERENTS)  # what its C traversal holds (a queue's items; none: nothing)

    def saw_numpy(self) -> bool:
        """A NumPy array type was met during the scan."""
        return any(kind.tag == ARRAY and kind.framework == "numpy" for kind in self.kinds.values())


def opaque_module(module: str) -> bool:
    """Code of this module is machinery (the shell, this package): never walked into."""
    return module.partition(".")[0] in _MACHINERY_PACKAGES


def _script_object(kind: type) -> bool:
    """A torch ``ScriptObject`` that is not a script module: C++ state no binding lists
    (the packed weights of ``torch.ao.quantization.quantize_dynamic``'s layers)."""
    torch = sys.modules.get("torch")
    script_object = getattr(torch, "ScriptObject", None)
    script_module = getattr(torch, "ScriptModule", None)
    return (
        isinstance(script_object, type)
        and issubclass(kind, script_object)
        and not (isinstance(script_module, type) and issubclass(kind, script_module))
    )
