"""What a type is to the reference walk: plain values (nothing inside), an array of a
framework, a container to walk into (sequence, named tuple, mapping, set, ``nn.Module``,
an object's ``__dict__``), or machinery never walked. Cached per type for one scan."""

from __future__ import annotations

import collections
import itertools
import types
import weakref
from typing import Callable, NamedTuple, Optional

from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import numpy as numpy_support
from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo

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
    types.FunctionType,
    types.BuiltinFunctionType,
    types.MethodType,
    types.CodeType,
    types.FrameType,
    types.TracebackType,
    types.GeneratorType,
    types.CoroutineType,
    types.AsyncGeneratorType,
    types.MappingProxyType,
    weakref.ref,
    property,
    staticmethod,
    classmethod,
)
# Objects from these packages are machinery, not data: walking them would walk the shell.
_OPAQUE_PACKAGES = frozenset(
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
        "asyncio",
        "concurrent",
        "threading",
        "multiprocessing",
        "logging",
        "socket",
        "ssl",
        "subprocess",
        "selectors",
        "_io",
        "io",
        "functools",
        "typing",
        "abc",
        "inspect",
        "colab_gpu_guard",
        "google",
        "debugpy",
        "pydevd",
        "_pydevd_bundle",
    }
)

# what the walk does with a type (Kind.tag)
SKIP, ARRAY, SEQUENCE, NAMEDTUPLE, MAPPING, SET, NN_MODULE, OBJECT = range(8)


class Kind(NamedTuple):
    """A type's classification: its tag, and for arrays the framework's name and its
    metadata reader."""

    tag: int
    framework: Optional[str] = None
    info_of: Optional[Callable[[object], ArrayInfo]] = None


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
        except Exception:
            result = _SKIPPED
        self.kinds[kind] = result
        return result

    def _classify(self, kind: type) -> Kind:
        if kind in ATOMIC:
            return _SKIPPED
        for array_type, framework, info_of in self.array_types:
            if issubclass(kind, array_type):
                return Kind(ARRAY, framework, info_of)
        if issubclass(kind, tuple) and hasattr(kind, "_fields"):
            return Kind(NAMEDTUPLE)
        if issubclass(kind, (list, tuple, collections.deque)):
            return Kind(SEQUENCE)
        if issubclass(kind, dict):
            return Kind(MAPPING)
        if issubclass(kind, (set, frozenset)):
            return Kind(SET)
        if issubclass(kind, _NOT_WALKED):
            return _SKIPPED
        if self.nn_module is not None and issubclass(kind, self.nn_module):
            return Kind(NN_MODULE)
        package = (getattr(kind, "__module__", None) or "").partition(".")[0]
        if package in _OPAQUE_PACKAGES:
            return _SKIPPED
        if getattr(kind, "__dictoffset__", 0):
            return Kind(OBJECT)
        return _SKIPPED

    def saw_numpy(self) -> bool:
        """A NumPy array type was met during the scan."""
        return any(kind.tag == ARRAY and kind.framework == "numpy" for kind in self.kinds.values())
