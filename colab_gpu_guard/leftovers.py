"""Who holds which array, by the name a user would type to reach it.

``find_leftovers()`` walks what a notebook keeps alive: the user namespace, IPython's output
history (``Out``, ``_``, ``__``, ``___``, ``_N``, the last cell's result), the last
exception (its ``args``, its traceback frames' locals, exceptions chained to it) and the
post-mortem debugger's frames. It walks into lists, tuples, dicts, sets, ``nn.Module``
parameters/buffers/submodules (named like ``named_parameters()``), optimizer state (keyed
by the parameter's name), dataclasses and plain objects' ``__dict__``, with a depth limit
and cycle detection. Arrays are deduplicated by the memory they live in (torch: untyped
storage; NumPy: the array owning the data; CuPy: the ``Memory`` allocation; JAX: the
device buffer), so a view and its base count once; the other names reaching the same
memory are listed in ``shared_with``.

``deep=True`` also looks for torch/CuPy arrays alive anywhere (``gc.get_objects()``) and
JAX arrays (``jax.live_arrays()``) that no name reaches, and compares the total with torch's
``memory_allocated`` per CUDA device.

No framework is imported here: torch, NumPy, CuPy and JAX are looked up in ``sys.modules``.
"""

from __future__ import annotations

import collections
import collections.abc
import gc
import html
import itertools
import sys
import types
import weakref
from dataclasses import asdict, dataclass, fields
from operator import attrgetter, itemgetter
from typing import Any, Callable, Optional

from . import notebook_refs
from .frameworks import cupy as cupy_support
from .frameworks import jax as jax_support
from .frameworks import numpy as numpy_support
from .frameworks import torch as torch_support
from .units import HOLDERS, OTHER, USER_VARIABLE, format_bytes

_RANK = {holder: rank for rank, holder in enumerate(HOLDERS)}

DEFAULT_MAX_DEPTH = 10
MAX_SHARED_NAMES = 16
_UNNAMED_DESCRIBED = 20  # unnamed storages whose referrers are looked up (deep scan)

_ATOMIC = frozenset(
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
_NOT_ATOMIC = dict.fromkeys(_ATOMIC, False).get  # (type, default) -> False for atomic types
_ALWAYS = itertools.repeat(True)
_IS_NONE = type(None).__instancecheck__  # x is None, as a C-level callable
_ROWS = frozenset({list, tuple, dict})
_ROWS_OF_PLAIN = _ATOMIC | _ROWS
_REQUIRES_GRAD = attrgetter("requires_grad")
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

# path node kinds; a path is a linked tuple (parent, kind, key)
_ROOT, _ATTR, _DOT, _ITEM, _KEY, _KEY_TEXT, _ARRAY_KEY, _OBJECT_KEY, _SET_ITEM = range(9)

# type classification for the walker
_SKIP, _ARRAY, _SEQUENCE, _NAMEDTUPLE, _MAPPING, _SET, _NN_MODULE, _OBJECT = range(8)


# ---------------------------------------------------------------- results


@dataclass(frozen=True)
class Leftover:
    """One block of array memory still alive, and who holds it.

    ``nbytes`` is the size of the memory (storage) the array lives in, counted once however
    many views and names reach it; ``array_nbytes`` is what the named array itself spans.
    ``shared_with`` lists the other names reaching the same memory (views, aliases, the
    optimizer's reference to a parameter), at most 16 and then a '(+N more)' entry.
    """

    name: str
    holder: str
    shape: tuple
    dtype: str
    device: str
    nbytes: int
    storage_id: int
    shared_with: tuple[str, ...] = ()
    framework: str = ""
    array_nbytes: int = 0
    holders: tuple[str, ...] = ()

    def __str__(self) -> str:
        shape = "x".join(str(size) for size in self.shape) or "scalar"
        text = (
            f"{format_bytes(self.nbytes):>10}  {self.name}  {self.dtype} [{shape}] "
            f"{self.device}  ({self.holder})"
        )
        if self.shared_with:
            text += f"  also: {', '.join(self.shared_with)}"
        return text

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_LEFTOVER_FIELDS = tuple(spec.name for spec in fields(Leftover))


def _new_leftover(*values) -> Leftover:
    """Leftover(*values) without the frozen dataclass's per-field ``object.__setattr__``
    (a scan builds one per storage: 10^5 of them must stay cheap)."""
    item = object.__new__(Leftover)
    item.__dict__.update(zip(_LEFTOVER_FIELDS, values))
    return item


@dataclass(frozen=True)
class DeviceGap:
    """Array bytes found on a CUDA device vs what torch's allocator says is allocated."""

    device: str
    found: int
    allocated: int

    @property
    def gap(self) -> int:
        return self.allocated - self.found

    def __str__(self) -> str:
        return (
            f"{self.device}: {format_bytes(self.found)} found, torch allocated "
            f"{format_bytes(self.allocated)}, gap {format_bytes(self.gap)} "
            "(held by nothing found here: autograd graphs, C++ references, allocator rounding)"
        )


class LeftoverList(collections.abc.Sequence):
    """A sequence of ``Leftover`` that also prints as a table: biggest first, equal sizes
    in the order found (variables as defined, items by index). It compares equal to a list
    of the same entries; ``list(...)`` gives one.

    A scan's list makes each entry when it is first read (a notebook may hold 10^5 arrays,
    and ``%gpu_status`` shows ten). Each array's path, sizes and metadata are taken during
    the scan, so an entry read later is what the scan saw, not what is alive now.

    ``gaps`` (deep scans): per CUDA device, found bytes vs ``torch.cuda.memory_allocated``.
    ``notes``: what the scan could not see.
    """

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __init__(self, items=(), gaps=(), notes=(), deep: bool = False) -> None:
        self._items: list = list(items)
        self._make: Optional[Callable[[int], Leftover]] = None
        self._sizes: Optional[list[int]] = None
        self._holders: Optional[list[str]] = None
        self.gaps: tuple[DeviceGap, ...] = tuple(gaps)
        self.notes: tuple[str, ...] = tuple(notes)
        self.deep = deep

    @classmethod
    def _made_on_access(
        cls, make: Callable[[int], Leftover], sizes: list[int], holders: list[str], **extra
    ) -> LeftoverList:
        """``make(i)`` builds entry i; ``sizes`` and ``holders`` are its nbytes and holder."""
        made = cls(**extra)
        made._items = [None] * len(sizes)
        made._make, made._sizes, made._holders = make, sizes, holders
        return made

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self._items)))]
        item = self._items[index]
        if item is None and self._make is not None:
            item = self._items[index] = self._make(index % len(self._items))
        return item

    def __iter__(self):
        if self._make is not None:
            self._make_all()
        return iter(self._items)

    def _make_all(self) -> None:
        make, items = self._make, self._items
        # many small objects at once: no collector passes over every live object meanwhile
        collecting = gc.isenabled()
        gc.disable()
        try:
            for index in itertools.compress(range(len(items)), map(_IS_NONE, items)):
                items[index] = make(index)  # type: ignore[misc]
        finally:
            if collecting:
                gc.enable()
        self._make = None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LeftoverList, list)):
            return list(self) == list(other)
        return NotImplemented

    def __reduce__(self):
        return (type(self), (list(self), self.gaps, self.notes, self.deep))

    @property
    def total_bytes(self) -> int:
        if self._sizes is not None:
            return sum(self._sizes)
        return sum(item.nbytes for item in self._items)

    @property
    def freeable_bytes(self) -> int:
        """Bytes held by something other than a user variable (output history, tracebacks,
        ...): what ``%gpu_reset`` can free without deleting a name the user made."""
        if self._sizes is not None and self._holders is not None:
            return sum(itertools.compress(self._sizes, map(USER_VARIABLE.__ne__, self._holders)))
        return sum(item.nbytes for item in self._items if item.holder != USER_VARIABLE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "leftovers": [item.to_dict() for item in self],
            "total_bytes": self.total_bytes,
            "gaps": [{**asdict(gap), "gap": gap.gap} for gap in self.gaps],
            "notes": list(self.notes),
            "deep": self.deep,
        }

    def __str__(self) -> str:
        if not self:
            lines = ["leftovers: no arrays held"]
        else:
            lines = [f"leftovers: {len(self)} block(s), {format_bytes(self.total_bytes)}"]
            lines += [f"  {item}" for item in self]
        lines += [f"  {gap}" for gap in self.gaps]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LeftoverList({list(self)!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self) if not cycle else "LeftoverList(...)")

    def _repr_html_(self) -> str:
        return leftovers_html(self, self.gaps, self.notes)


def leftovers_html(items, gaps=(), notes=()) -> str:
    """An HTML table of leftovers; every name is escaped."""
    esc = html.escape
    rows = []
    for item in items:
        shape = esc("x".join(str(size) for size in item.shape) or "scalar")
        rows.append(
            f"<tr><td>{esc(format_bytes(item.nbytes))}</td><td><code>{esc(item.name)}</code>"
            f"</td><td>{esc(item.holder)}</td><td>{esc(item.dtype)} [{shape}]</td>"
            f"<td>{esc(item.device)}</td><td>{esc(', '.join(item.shared_with))}</td></tr>"
        )
    if not rows:
        rows.append("<tr><td colspan=6>no arrays held</td></tr>")
    extra = "".join(f"<li>{esc(str(gap))}</li>" for gap in gaps)
    extra += "".join(f"<li>{esc(note)}</li>" for note in notes)
    return (
        "<table><tr><th>bytes</th><th>name</th><th>holder</th><th>array</th>"
        f"<th>device</th><th>shared with</th></tr>{''.join(rows)}</table>"
        + (f"<ul>{extra}</ul>" if extra else "")
    )


# ---------------------------------------------------------------- the walker


class _Ref:
    """One path from a root to an array."""

    __slots__ = ("path", "holder", "root", "depth", "order", "framework", "info", "weak", "ident")

    def __init__(self, path, holder, root, depth, order, framework, info, weak, ident) -> None:
        self.ident = ident  # id() of the array (valid while the scan runs)
        self.path = path
        self.holder = holder
        self.root = root
        self.depth = depth
        self.order = order
        self.framework = framework
        self.info = info
        self.weak = weak

    @property
    def key(self):
        return self.info[4]

    @property
    def device(self) -> str:
        return self.info[2]

    @property
    def storage_nbytes(self) -> int:
        return self.info[5]


def _weak(array):
    try:
        return weakref.ref(array)
    except TypeError:
        return None


def _info_or_none(info_of, array):
    try:
        return info_of(array)
    except Exception:
        return None


_STORAGE_KEY = itemgetter(4)  # of an info tuple
_WHAT = itemgetter(4)  # of a row: the array type's classification


def _bulk_infos(arrays: list, rows: list) -> list:
    """``info_of(array)`` for every recorded array (None where it failed), in order; torch
    tensors' metadata in one C-level pass per attribute (``torch_support.array_infos``)."""
    whats = set(map(_WHAT, rows))
    what = next(iter(whats)) if len(whats) == 1 else (None, None, None)
    if what[1] == "torch" and what[2] is torch_support.array_info:
        try:
            return torch_support.array_infos(arrays)
        except Exception:
            pass
    return [_info_or_none(row[4][2], array) for row, array in zip(rows, arrays)]


def _key_text(key: object) -> str:
    if type(key) in (str, int, float, bool, bytes, type(None)) or (
        type(key) is tuple and all(type(k) in (str, int, float, bool) for k in key)
    ):
        text = repr(key)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"<{type(key).__name__}>"


def _plain_rows(sequence, present: set) -> bool:
    """True when every list/tuple/dict item of ``sequence`` holds plain values only (rows
    of numbers and strings): checked in C, one pass over the rows' items."""
    rows = itertools.compress(sequence, map(_ROWS.__contains__, map(type, sequence)))
    if dict in present:
        if list in present or tuple in present:
            return False  # mixed rows: the per-item walk sorts them out
        inner = itertools.chain.from_iterable(map(dict.values, rows))
    else:
        inner = itertools.chain.from_iterable(rows)
    return set(map(type, inner)) <= _ATOMIC


class _Scanner:
    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH, keep_refs: bool = False) -> None:
        self.max_depth = max_depth
        self.keep_refs = keep_refs
        # References found, in the order found: ``rows[i]`` is (path, holder, root, depth,
        # what), ``infos[i]`` the array's metadata, ``idents[i]`` its id() and ``weaks[i]`` a
        # weakref to it (keep_refs only); ``refs`` builds the _Ref objects on demand. Arrays
        # wait in ``_pending`` until ``finish()`` reads their metadata in bulk (torch: one
        # C-level pass per attribute instead of a Python call per tensor).
        self.rows: list[tuple] = []
        self.infos: list[tuple] = []
        self.idents: list[int] = []
        self.weaks: list = []
        self._pending: list = []  # arrays awaiting metadata (strong refs until finish())
        self._pending_rows: list[tuple] = []
        self._refs: list[_Ref] = []
        # id(container) -> (root, path) of its first visit; a later visit from another root
        # is an alias: that root reaches what lies under the container too.
        self.first_visit: dict[int, tuple] = {}
        self.aliases: list[tuple] = []
        self._best_path: Optional[dict[int, tuple]] = None  # id(array) -> best path
        self._names: dict[int, str] = {}  # id(path node) -> its text (nodes live as long)
        self.kinds: dict[type, tuple] = {}
        torch = torch_support.loaded()
        self.tensor_type = torch_support.tensor_type(torch)
        self.nn_module = torch_support.module_type(torch)
        self.array_types: list[tuple[type, str, Callable]] = []
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
        self.tensor_what = self.classify(self.tensor_type) if self.tensor_type else None

    # -- classification, cached per type
    def classify(self, kind: type) -> tuple:
        cached = self.kinds.get(kind)
        if cached is not None:
            return cached
        result: tuple = (_SKIP,)
        try:
            result = self._classify(kind)
        except Exception:
            result = (_SKIP,)
        self.kinds[kind] = result
        return result

    def _classify(self, kind: type) -> tuple:
        if kind in _ATOMIC:
            return (_SKIP,)
        for array_type, framework, info in self.array_types:
            if issubclass(kind, array_type):
                return (_ARRAY, framework, info)
        if issubclass(kind, tuple) and hasattr(kind, "_fields"):
            return (_NAMEDTUPLE,)
        if issubclass(kind, (list, tuple, collections.deque)):
            return (_SEQUENCE,)
        if issubclass(kind, dict):
            return (_MAPPING,)
        if issubclass(kind, (set, frozenset)):
            return (_SET,)
        if issubclass(kind, _NOT_WALKED):
            return (_SKIP,)
        if self.nn_module is not None and issubclass(kind, self.nn_module):
            return (_NN_MODULE,)
        package = (getattr(kind, "__module__", None) or "").partition(".")[0]
        if package in _OPAQUE_PACKAGES:
            return (_SKIP,)
        if getattr(kind, "__dictoffset__", 0):
            return (_OBJECT,)
        return (_SKIP,)

    # -- visiting
    def visit(self, obj, path, depth: int, holder: str, root) -> None:
        kind = type(obj)
        if kind in _ATOMIC:
            return
        what = self.kinds.get(kind) or self.classify(kind)
        tag = what[0]
        if tag == _SKIP:
            return
        if tag == _ARRAY:
            self.record(obj, what, path, depth, holder, root)
            return
        if depth >= self.max_depth:
            return
        ident = id(obj)
        first = self.first_visit.get(ident)
        if first is not None:
            if first[0] != root:
                self.aliases.append((root, first[1]))
            return
        self.first_visit[ident] = (root, path)
        try:
            if tag == _SEQUENCE:
                self._walk_sequence(obj, path, depth + 1, holder, root)
            elif tag == _MAPPING:
                self._walk_mapping(obj, path, depth + 1, holder, root)
            elif tag == _NN_MODULE:
                self._walk_module(obj, path, depth, holder, root)
            elif tag == _NAMEDTUPLE:
                for field, item in zip(type(obj)._fields, obj):
                    self.visit(item, (path, _ATTR, field), depth + 1, holder, root)
            elif tag == _SET:
                for item in list(obj):
                    self.visit(item, (path, _SET_ITEM, None), depth + 1, holder, root)
            elif tag == _OBJECT:
                attributes = getattr(obj, "__dict__", None)
                if type(attributes) is dict:
                    self._walk_attributes(attributes, path, depth + 1, holder, root)
        except (RuntimeError, ReferenceError):  # changed size during iteration; dead proxy
            pass

    def _walk_sequence(self, obj, path, depth, holder, root) -> None:
        items = enumerate(obj)
        if len(obj) > 16:
            present = set(map(type, obj))
            if present <= _ATOMIC:
                return  # plain values only: a list of 10^6 ints costs one C-level pass
            if len(present) == 1:
                what = self.classify(next(iter(present)))
                if what[0] == _ARRAY:
                    self._record_items(obj, what, path, depth, holder, root)
                    return
            if present <= _ROWS_OF_PLAIN and _plain_rows(obj, present):
                return
            # only the items that are not plain values, picked out in C
            items = itertools.compress(items, map(_NOT_ATOMIC, map(type, obj), _ALWAYS))
        atomic = _ATOMIC
        kinds = self.kinds
        visit = self.visit
        pending = self._pending.append
        pending_rows = self._pending_rows.append
        tensor, tensor_what = self.tensor_type, self.tensor_what
        for index, item in items:
            kind = type(item)
            if kind is tensor:  # the commonest array first: what the general path does
                child = (path, _ITEM, index)
                pending(item)
                pending_rows((child, holder, root, depth, tensor_what))
                if item.requires_grad:
                    self._visit_grad(item, child, depth, holder, root)
                continue
            if kind in atomic:
                continue
            if kind is list or kind is tuple:
                # rows of plain values: nothing to find, nothing to register for cycles
                for inner in item:
                    if type(inner) not in atomic:
                        break
                else:
                    continue
            elif kind is dict:
                for inner in item.values():
                    if type(inner) not in atomic:
                        break
                else:
                    continue
            what = kinds.get(kind) or self.classify(kind)
            tag = what[0]
            if tag == _ARRAY:
                child = (path, _ITEM, index)
                pending(item)  # what record() does, inlined: this loop is the hot one
                pending_rows((child, holder, root, depth, what))
                if what[1] == "torch" and item.requires_grad:
                    self._visit_grad(item, child, depth, holder, root)
            elif tag != _SKIP:
                visit(item, (path, _ITEM, index), depth, holder, root)

    def _record_items(self, arrays, what, path, depth, holder, root) -> None:
        """``record`` for every item of a sequence holding arrays of one type only, the
        bookkeeping done in C (a list of 10^5 tensors is common: a cached dataset)."""
        count = len(arrays)
        self._pending.extend(arrays)
        paths = zip(itertools.repeat(path), itertools.repeat(_ITEM), range(count))
        self._pending_rows.extend(
            zip(
                paths,
                itertools.repeat(holder),
                itertools.repeat(root),
                itertools.repeat(depth),
                itertools.repeat(what),
            )
        )
        if what[1] == "torch" and any(map(_REQUIRES_GRAD, arrays)):
            for index, array in enumerate(arrays):
                if array.requires_grad:
                    self._visit_grad(array, (path, _ITEM, index), depth, holder, root)

    def _walk_mapping(self, obj, path, depth, holder, root) -> None:
        atomic = _ATOMIC
        visit = self.visit
        for key, value in list(obj.items()):
            if type(value) in atomic:
                continue
            key_kind = type(key)
            if key_kind in atomic:
                child = (path, _KEY, key)
            elif key_kind is tuple:
                child = (path, _KEY_TEXT, _key_text(key))  # never keep a key alive
            elif self.classify(key_kind)[0] == _ARRAY:
                child = (path, _ARRAY_KEY, id(key))
            else:
                child = (path, _OBJECT_KEY, key_kind.__name__)
            visit(value, child, depth, holder, root)

    def _walk_attributes(self, attributes: dict, path, depth, holder, root) -> None:
        atomic = _ATOMIC
        for name, value in list(attributes.items()):
            if type(value) in atomic or type(name) is not str:
                continue
            self.visit(value, (path, _ATTR, name), depth, holder, root)

    def _walk_module(self, module, path, depth, holder, root) -> None:
        """Parameters, buffers and submodules named as ``named_parameters()`` names them
        (module nesting does not count against the depth limit)."""
        attributes = getattr(module, "__dict__", {})
        for slot in ("_parameters", "_buffers"):
            for name, tensor in list((attributes.get(slot) or {}).items()):
                if tensor is not None:
                    self.visit(tensor, (path, _DOT, name), depth, holder, root)
        for name, child in list((attributes.get("_modules") or {}).items()):
            if child is not None:
                self.visit(child, (path, _DOT, name), depth, holder, root)
        rest = {
            name: value
            for name, value in attributes.items()
            if name not in ("_parameters", "_buffers", "_modules")
            and not (name.startswith("_") and name.endswith("hooks"))
        }
        self._walk_attributes(rest, path, depth + 1, holder, root)

    def record(self, array, what, path, depth, holder, root) -> None:
        self._pending.append(array)
        self._pending_rows.append((path, holder, root, depth, what))
        if what[1] == "torch" and array.requires_grad:
            self._visit_grad(array, path, depth, holder, root)

    def _visit_grad(self, tensor, path, depth, holder, root) -> None:
        """A leaf tensor's ``.grad``, named ``<path>.grad``."""
        if tensor.is_leaf and depth < self.max_depth:
            grad = tensor.grad
            if grad is not None:
                self.visit(grad, (path, _ATTR, "grad"), depth + 1, holder, root)

    def finish(self) -> None:
        """Read the metadata of the arrays recorded since the last call; drop the arrays."""
        arrays, pending = self._pending, self._pending_rows
        if not arrays:
            return
        self._pending, self._pending_rows = [], []
        try:
            infos = _bulk_infos(arrays, pending)
            idents = list(map(id, arrays))
            weaks = [_weak(array) for array in arrays] if self.keep_refs else []
            if None in infos:  # arrays whose metadata could not be read are left out
                kept = [info is not None for info in infos]
                pending = list(itertools.compress(pending, kept))
                infos = list(itertools.compress(infos, kept))
                idents = list(itertools.compress(idents, kept))
                weaks = list(itertools.compress(weaks, kept))
            self.rows += pending
            self.infos += infos
            self.idents += idents
            self.weaks += weaks
        finally:
            del arrays[:]  # never keep an array alive past the scan

    @property
    def refs(self) -> list[_Ref]:
        """One _Ref per reference found, in the order found (built on first use)."""
        built = self._refs
        start = len(built)
        if start < len(self.rows):
            weaks = self.weaks if self.keep_refs else itertools.repeat(None)
            rows = zip(
                itertools.count(start),
                self.rows[start:],
                self.infos[start:],
                itertools.islice(weaks, start, None),
                self.idents[start:],
            )
            built += [
                _Ref(row[0], row[1], row[2], row[3], order, row[4][1], info, weak, ident)
                for order, row, info, weak, ident in rows
            ]
        return built

    # -- roots
    def visit_root(self, name: str, value, holder: str, root) -> None:
        self.visit(value, (None, _ROOT, name), 0, holder, root)

    def best_paths(self) -> dict[int, tuple]:
        """id(array) -> the path a user would type first (for arrays used as dict keys)."""
        if self._best_path is None:
            best: dict[int, tuple] = {}
            for ref in self.refs:
                rank = (_RANK[ref.holder], ref.depth, ref.order)
                current = best.get(ref.ident)
                if current is None or rank < current[0]:
                    best[ref.ident] = (rank, ref.path)
            self._best_path = {ident: entry[1] for ident, entry in best.items()}
        return self._best_path

    def reach_by_root(self) -> dict:
        """root -> storage keys it reaches, counting containers first reached elsewhere."""
        reach: dict = {}
        for ref in self.refs:
            reach.setdefault(ref.root, set()).add(ref.key)
        if self.aliases:
            node_roots: dict[int, list] = {}
            for root, node in self.aliases:
                node_roots.setdefault(id(node), []).append(root)
            for ref in self.refs:
                path = ref.path
                while path is not None:
                    roots = node_roots.get(id(path))
                    if roots:
                        for root in roots:
                            reach.setdefault(root, set()).add(ref.key)
                    path = path[0]
        return reach

    # -- naming
    def name_of(self, path, guard: int = 0) -> str:
        """The text of a path; names of shared prefixes are memoised for this scan."""
        cache = self._names
        if path[1] == _ITEM:  # the common leaf, list[i], under an already named container
            text = cache.get(id(path[0]))
            if text is not None:
                return f"{text}[{path[2]}]"
        pending = []
        node = path
        while node is not None:
            known = cache.get(id(node))
            if known is not None:
                text = known
                break
            pending.append(node)
            node = node[0]
        else:
            text = ""
        for node in reversed(pending):
            _parent, kind, key = node
            if kind == _ROOT:
                text = key
            elif kind == _ITEM:
                text = f"{text}[{key}]"
            elif kind in (_ATTR, _DOT):
                text = f"{text}.{key}"
            elif kind == _KEY:
                text = f"{text}[{_key_text(key)}]"
            elif kind == _KEY_TEXT:
                text = f"{text}[{key}]"
            elif kind == _ARRAY_KEY:
                best = self.best_paths().get(key)
                key_name = self.name_of(best, guard + 1) if best and guard < 4 else "<array>"
                text = f"{text}[{key_name}]"
            elif kind == _OBJECT_KEY:
                text = f"{text}[<{key}>]"
            elif kind == _SET_ITEM:
                text = f"{text}{{item}}"
            cache[id(node)] = text
        return text


# ---------------------------------------------------------------- roots a notebook holds


def _scan_roots(scanner: _Scanner, shell, namespace: Optional[dict]) -> None:
    for root in notebook_refs.roots(shell, namespace if namespace is not None else {}):
        scanner.visit(root.value, (None, _ROOT, root.label), root.depth, root.holder, root.key)


# ---------------------------------------------------------------- results assembly


class _Scan:
    """The raw result: references grouped by storage, plus the public list."""

    def __init__(self, scanner: _Scanner, leftovers: LeftoverList) -> None:
        self.scanner = scanner
        self.leftovers = leftovers
        self._groups: Optional[dict] = None

    @property
    def groups(self) -> dict:
        """storage key -> list[_Ref] (built on first use)."""
        if self._groups is None:
            self._groups = group_refs(self.scanner.refs)
        return self._groups


def _device_matches(device: str, wanted) -> bool:
    if wanted is None:
        return True
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        wanted = f"cuda:{wanted}"
    wanted = str(wanted)
    if ":" in wanted:
        return device == wanted or wanted in device.split("+")
    return any(part.split(":")[0] == wanted for part in device.split("+"))


def _leftover_for(scanner: _Scanner, refs: list[_Ref]) -> Leftover:
    if len(refs) == 1:
        ref = refs[0]
        shape, dtype, device, nbytes, _key, storage_nbytes, storage_id = ref.info
        return _new_leftover(
            scanner.name_of(ref.path),
            ref.holder,
            tuple(shape),
            dtype,
            device,
            storage_nbytes,
            storage_id,
            (),
            ref.framework,
            nbytes,
            (ref.holder,),
        )
    refs = sorted(refs, key=lambda ref: (_RANK[ref.holder], ref.depth, ref.order))
    primary = refs[0]
    shape, dtype, device, nbytes, _key, storage_nbytes, storage_id = primary.info
    name = scanner.name_of(primary.path)
    others: list[str] = []
    seen = {name}
    extra = 0
    for ref in refs[1:]:
        if len(others) >= MAX_SHARED_NAMES:
            extra += 1
            continue
        other = scanner.name_of(ref.path)
        if other not in seen:
            seen.add(other)
            others.append(other)
    if extra:
        others.append(f"(+{extra} more)")
    holders = tuple(h for h in HOLDERS if any(ref.holder == h for ref in refs))
    return Leftover(
        name=name,
        holder=primary.holder,
        shape=tuple(shape),
        dtype=dtype,
        device=device,
        nbytes=storage_nbytes,
        storage_id=storage_id,
        shared_with=tuple(others),
        framework=primary.framework,
        array_nbytes=nbytes,
        holders=holders,
    )


class _Blocks:
    """One block of memory per storage, in the order each storage was first reached: the
    columns the list is filtered, sorted and totalled by, and ``entry(i)`` for the entry of
    the i-th block in ``order``.

    ``entry(i)`` gives what ``_leftover_for`` gives for the storage's references; a storage
    reached once (the common case) needs no _Ref, and its entry and name are made from its
    row when read (the row's path and metadata were taken during the scan).
    """

    def __init__(self, scanner: _Scanner) -> None:
        rows, infos = scanner.rows, scanner.infos
        self.rows, self.infos = rows, infos
        self.scanner = scanner  # names paths on demand; it holds no array
        self.shared: dict[int, Leftover] = {}  # block -> its entry, made now
        self.order: list[int] = []  # blocks in the order of the list
        keys = list(map(_STORAGE_KEY, infos))
        if len(dict.fromkeys(keys)) == len(keys):
            self.row_of: Any = range(len(rows))
            self.sizes = list(map(_STORAGE_NBYTES, infos))
            self.holders = list(map(_HOLDER, rows))
            self.devices = list(map(_DEVICE_TEXT, infos))
            return
        counts = collections.Counter(keys)
        refs = scanner.refs
        groups: dict = {}
        for index, key in enumerate(keys):
            if counts[key] > 1:
                groups.setdefault(key, []).append(refs[index])
        self.row_of, self.sizes, self.holders, self.devices = [], [], [], []
        for index, key in enumerate(keys):
            if counts[key] > 1:
                group = groups.pop(key, None)
                if group is None:
                    continue  # a later reference to a storage already listed
                item = self.shared[len(self.row_of)] = _leftover_for(scanner, group)
                size, holder, device = item.nbytes, item.holder, item.device
            else:
                info = infos[index]
                size, holder, device = info[5], rows[index][1], info[2]
            self.row_of.append(index)
            self.sizes.append(size)
            self.holders.append(holder)
            self.devices.append(device)

    def entry(self, position: int) -> Leftover:
        """The entry at ``position`` of ``order`` (set by the caller: blocks, sorted)."""
        block = self.order[position]
        item = self.shared.get(block)
        if item is not None:
            return item
        index = self.row_of[block]
        row, info = self.rows[index], self.infos[index]
        path, holder = row[0], row[1]
        name = None
        if path[1] == _ITEM:  # list[i] under an already named container: no call
            name = self.scanner._names.get(id(path[0]))
            if name is not None:
                name = f"{name}[{path[2]}]"
        item = _NEW(Leftover)
        item.__dict__.update(
            {
                "name": name if name is not None else self.scanner.name_of(path),
                "holder": holder,
                "shape": tuple(info[0]),
                "dtype": info[1],
                "device": info[2],
                "nbytes": info[5],
                "storage_id": info[6],
                "shared_with": (),
                "framework": row[4][1],
                "array_nbytes": info[3],
                "holders": _HOLDER_TUPLES.get(holder) or (holder,),
            }
        )
        return item


_STORAGE_NBYTES = itemgetter(5)  # of an info tuple
_DEVICE_TEXT = itemgetter(2)  # of an info tuple
_HOLDER = itemgetter(1)  # of a row
_HOLDER_TUPLES = {holder: (holder,) for holder in HOLDERS}
_NEW = object.__new__


def group_refs(refs: list[_Ref]) -> dict:
    groups: dict = {}
    for ref in refs:
        key = ref.info[4]
        group = groups.get(key)
        if group is None:
            groups[key] = [ref]
        else:
            group.append(ref)
    return groups


def scan(
    *,
    device=None,
    namespace: Optional[dict] = None,
    deep: bool = False,
    shell: Any = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    keep_refs: bool = False,
) -> _Scan:
    """The scan behind ``find_leftovers``; ``keep_refs`` keeps a weakref per reference."""
    shell, namespace = notebook_refs.resolve_namespace(shell, namespace)
    scanner = _Scanner(max_depth=max_depth, keep_refs=keep_refs)
    notes: list[str] = []
    gaps: list[DeviceGap] = []
    # The walk builds many small tuples and no cycles: keep the cyclic collector from
    # running over every live object again and again meanwhile.
    collecting = gc.isenabled()
    gc.disable()
    try:
        _scan_roots(scanner, shell, namespace)
        scanner.finish()
        if deep:
            _scan_unnamed(scanner, notes)
            scanner.finish()
        blocks = _Blocks(scanner)
    finally:
        if collecting:
            gc.enable()
    if deep:
        gaps = _allocator_gaps(blocks.devices, blocks.sizes)
    order: Any = range(len(blocks.sizes))
    if device is not None:
        order = [j for j in order if _device_matches(blocks.devices[j], device)]
        gaps = [gap for gap in gaps if _device_matches(gap.device, device)]
    # biggest first; equal sizes in the order found (variables as defined, items by index)
    order = blocks.order = sorted(order, key=blocks.sizes.__getitem__, reverse=True)
    if not scanner.array_types:
        notes.append("no array framework (torch, NumPy, CuPy, JAX) is imported")
    if any(kind[0] == _ARRAY and kind[1] == "numpy" for kind in scanner.kinds.values()) and deep:
        notes.append(
            "NumPy arrays are found by name only (the garbage collector does not track them)"
        )
    leftovers = LeftoverList._made_on_access(
        blocks.entry,
        list(map(blocks.sizes.__getitem__, order)),
        list(map(blocks.holders.__getitem__, order)),
        gaps=gaps,
        notes=notes,
        deep=deep,
    )
    return _Scan(scanner, leftovers)


def find_leftovers(
    device=None,
    namespace: Optional[dict] = None,
    deep: bool = False,
    *,
    shell: Any = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
) -> LeftoverList:
    """Arrays still alive, by the name a user would type to reach them; biggest first.

    device: None (all), ``"cuda"``, ``"cuda:0"``, ``0`` (cuda:0) or ``"cpu"``.
    namespace: the dict to scan as user variables; by default the running IPython shell's
        ``user_ns`` (then its output history and post-mortem debugger are scanned too, and
        IPython's own names are not taken for user variables; passing that same dict does
        the same), or ``__main__``'s globals outside IPython. The last exception
        (``sys.last_value`` & co.) is always scanned.
    deep: also report arrays alive that no name reaches (torch and CuPy via
        ``gc.get_objects()``, JAX via ``jax.live_arrays()``) as ``<unnamed ...>`` entries,
        and the gap between what was found and ``torch.cuda.memory_allocated`` per device.
    max_depth: how many containers/attributes deep to walk from each root (module nesting
        is free).

    Each entry is one block of memory (views and aliases deduplicated; the other names in
    ``shared_with``). Nothing is imported, changed or kept alive.
    """
    if not isinstance(deep, bool):
        raise TypeError("deep must be True or False")
    if namespace is not None and not isinstance(namespace, dict):
        raise TypeError(f"namespace must be a dict, not {type(namespace).__name__}")
    return scan(
        device=device, namespace=namespace, deep=deep, shell=shell, max_depth=max_depth
    ).leftovers


# ---------------------------------------------------------------- deep scan


def _describe_referrer(referrer) -> str:
    if isinstance(referrer, types.FrameType):
        return f"frame of {notebook_refs.frame_function(referrer)}()"
    if isinstance(referrer, dict):
        return f"a dict of {len(referrer)} entries"
    if isinstance(referrer, (list, tuple, set)):
        return f"a {type(referrer).__name__} of {len(referrer)} items"
    return f"a {type(referrer).__module__}.{type(referrer).__qualname__}"


def _scan_unnamed(scanner: _Scanner, notes: list[str]) -> None:
    """Arrays alive that no name reached: recorded with holder 'other'."""
    named = set(map(_STORAGE_KEY, scanner.infos))
    found: dict = {}  # storage key -> (what, [arrays])
    if scanner.tensor_type is not None or cupy_support.array_type() is not None:
        kinds = scanner.kinds
        classify = scanner.classify
        objects = gc.get_objects()
        try:
            for obj in objects:
                kind = type(obj)
                if kind in _ATOMIC:
                    continue
                what = kinds.get(kind) or classify(kind)
                if what[0] != _ARRAY or what[1] == "numpy":
                    continue
                try:
                    key = what[2](obj)[4]
                except Exception:
                    continue
                if key not in named:
                    found.setdefault(key, (what, []))[1].append(obj)
        finally:
            del objects
            obj = None
    if jax_support.loaded() is not None:
        jax_what = scanner.classify(jax_support.array_type() or type(None))
        for array in jax_support.live_arrays():
            if jax_what[0] != _ARRAY:
                break
            try:
                key = jax_support.array_info(array)[4]
            except Exception:
                continue
            if key not in named:
                found.setdefault(key, (jax_what, []))[1].append(array)
        array = None
    if not found:
        return
    by_size = sorted(found.items(), key=lambda item: -_safe_info(item[1])[5])
    described = _referrer_descriptions(
        [arrays for _key, (_what, arrays) in by_size[:_UNNAMED_DESCRIBED]], found
    )
    for index, (_key, (what, arrays)) in enumerate(by_size):
        held_by = described.get(index)
        if held_by is None:
            label = f"<unnamed #{index + 1}>"
        elif held_by:
            label = f"<unnamed #{index + 1}: referenced by {', '.join(held_by)}>"
        else:
            label = f"<unnamed #{index + 1}: no Python referrer (held from C++, e.g. autograd)>"
        scanner.record(arrays[0], what, (None, _ROOT, label), 0, OTHER, ("unnamed",))
    notes.append(f"{len(found)} block(s) are alive but reached by no name in the notebook")


def _safe_info(entry) -> tuple:
    what, arrays = entry
    try:
        return what[2](arrays[0])
    except Exception:
        return ((), "", "", 0, None, 0, 0)


def _referrer_descriptions(array_lists: list[list], found: dict) -> dict[int, list[str]]:
    """For the biggest unnamed blocks: what kind of object refers to them (one gc pass)."""
    targets: dict[int, int] = {}
    for index, arrays in enumerate(array_lists):
        for array in arrays:
            targets[id(array)] = index
    own = {id(found), id(targets), id(array_lists), id(sys._getframe())}
    own.update(id(arrays) for arrays in array_lists)
    own.update(id(entry) for entry in found.values())
    all_arrays = [array for arrays in array_lists for array in arrays]
    own.add(id(all_arrays))
    descriptions: dict[int, list[str]] = {index: [] for index in range(len(array_lists))}
    try:
        referrers = gc.get_referrers(*all_arrays)
    except Exception:
        return {}
    for referrer in referrers:
        if id(referrer) in own:
            continue
        try:
            referents = gc.get_referents(referrer)
        except Exception:
            continue
        hit = {targets[id(obj)] for obj in referents if id(obj) in targets}
        for index in hit:
            text = _describe_referrer(referrer)
            if text not in descriptions[index] and len(descriptions[index]) < 3:
                descriptions[index].append(text)
    return descriptions


def _allocator_gaps(devices: list[str], sizes: list[int]) -> list[DeviceGap]:
    try:
        stats = torch_support.allocator_stats()
    except Exception:
        return []
    gaps = []
    for stat in stats:
        device = f"cuda:{stat.device}"
        found = sum(size for size, where in zip(sizes, devices) if where == device)
        gaps.append(DeviceGap(device, found, stat.allocated))
    return gaps
