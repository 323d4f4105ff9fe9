"""What the walk reads in holders that are not containers (functions, methods, partials,
generators, classes, iterators, exceptions, tracebacks, ``lru_cache``, NumPy object
arrays, ScriptObjects) and in tensors beyond their storage (``.grad``, own attributes).
Read through `readers`: no code of the user's runs. Names: docs/leftovers.md."""

from __future__ import annotations

import functools
import gc
import itertools
import types
from collections.abc import Callable
from itertools import repeat
from operator import is_
from typing import Any, Optional

from ..frameworks import numpy as numpy_support
from ..notebook_refs.frames import (
    executing_frames,
    frame_calls,
    frame_locals,
    is_function_frame,
    traceback_frames_exited,
)
from .found import Found
from .graphs import Graphs
from .kinds import (
    ATOMIC,
    CLASS,
    EXCEPTION,
    FUNCTION,
    ITERATOR,
    LRU_CACHE,
    METHOD,
    OPAQUE,
    PARTIAL,
    REFERENTS,
    SUSPENDED,
    TRACEBACK,
    UNSEEN,
    opaque_module,
)
from .naming import ATTR, CLOSURE, FRAME_LOCAL, HELD, ITEM, Path, library_inside
from .readers import (
    class_attributes,
    closure_values,
    exception_fields,
    frame_module,
    function_defaults,
    function_module,
    iterator_holds,
    lru_cache_entries,
    suspended_locals,
    suspended_module,
    tensor_attributes,
    type_module,
    type_name,
)
from .rows import ROW_FRAMEWORK
from .visit import Visit

TENSOR_CHUNK = 2048  # tensors checked for attributes of their own in one C call
MAX_OPAQUE = 64  # torch ScriptObjects (and objects not looked into) a scan keeps the paths of
# A library's own small array of objects (a frame's few column labels, their lookup engine)
# gets no note: what its objects take beside its pointers is too small to matter.
OBJECT_ITEMS_NOTED = 10_000

_METHOD_SELF = types.MethodType.__dict__["__self__"].__get__
_METHOD_FUNC = types.MethodType.__dict__["__func__"].__get__
_PARTIAL_FIELDS = tuple(
    (name, functools.partial.__dict__[name].__get__) for name in ("func", "args", "keywords")
)

Visitor = Callable[[Any, Visit], None]  # `Walker.visit`
SequenceWalk = Callable[..., None]  # `ItemWalk.walk_sequence(items, at, node=ITEM)`
AttributesWalk = Callable[[dict, Visit], None]  # `Walker.walk_attributes`


class HolderWalks:
    """The holders that are not containers, walked for what they keep alive; ``opaque``
    collects the paths of the torch ScriptObjects met (no binding lists their tensors),
    ``unseen`` those of objects whose memory the scan cannot read (a cuDF frame), with
    their types, and ``object_arrays`` the paths of NumPy arrays of Python objects (counted
    by their pointers)."""

    def __init__(self, visit: Visitor, walk_sequence: SequenceWalk) -> None:
        self.visit = visit
        self.walk_sequence = walk_sequence
        self.opaque: list[Path] = []
        self.unseen: list[tuple[Path, str, Any]] = []  # (path, type's name, root)
        self.object_arrays: list[tuple[Path, Any]] = []  # (path, root)

    def by_tag(self) -> dict[str, Visitor]:
        """The walk of each holder, by the tag `kinds.Classifier` gives its type."""
        return {
            FUNCTION: self.function,
            METHOD: self.method,
            PARTIAL: self.partial,
            SUSPENDED: self.suspended,
            CLASS: self.cls,
            ITERATOR: self.iterator,
            LRU_CACHE: self.lru_cache,
            OPAQUE: self.note_opaque,
            REFERENTS: self.referents,
            UNSEEN: self.note_unseen,
        }

    def function(self, function, at: Visit) -> None:
        """Closure cells (``fn.<closure 'buf'>``) and defaults."""
        if opaque_module(function_module(function)):
            return
        for name, value in closure_values(function):
            if type(value) not in ATOMIC:
                self.visit(value, at.child(CLOSURE, name))
        defaults, keyword_defaults = function_defaults(function)
        if defaults:
            self.visit(defaults, at.child(ATTR, "__defaults__"))
        if keyword_defaults:
            self.visit(keyword_defaults, at.child(ATTR, "__kwdefaults__"))

    def method(self, method, at: Visit) -> None:
        self.visit(_METHOD_SELF(method), at.child(ATTR, "__self__"))
        self.visit(_METHOD_FUNC(method), at.child(ATTR, "__func__"))

    def partial(self, partial, at: Visit) -> None:
        for name, read in _PARTIAL_FIELDS:
            value = read(partial)
            if value is not None and type(value) not in ATOMIC:
                self.visit(value, at.child(ATTR, name))

    def suspended(self, generator, at: Visit) -> None:
        """A suspended generator's or coroutine's locals (``g.<generator gen() local 'b'>``)."""
        if opaque_module(suspended_module(generator)):
            return
        kind, function, local_vars = suspended_locals(generator)
        for name, value in local_vars.items():
            if type(value) not in ATOMIC and type(name) is str:
                self.visit(value, at.child(FRAME_LOCAL, (kind, f"{function}()", name)))

    def cls(self, cls: type, at: Visit) -> None:
        """A class's own attributes (``Cache.store``), for a class written in Python outside
        the shell and this package."""
        if opaque_module(type_module(cls)):
            return
        for name, value in class_attributes(cls):
            if type(value) not in ATOMIC:
                self.visit(value, at.child(ATTR, name))

    def iterator(self, iterator, at: Visit) -> None:
        """What a built-in iterator or an itertools adaptor holds (``it.<list>[3]``; a
        ``cycle(loader)`` keeps every batch it yielded: ``batches.<list>[0]``)."""
        for value in iterator_holds(iterator):
            kind = type(value)
            if kind not in ATOMIC:
                self.visit(value, at.child(HELD, kind.__name__))

    def lru_cache(self, wrapper, at: Visit) -> None:
        """Cached results (``embed.<lru_cache>[0]``) and the keys holding objects
        (``embed.<lru_cache key>[0]``), for a function outside the shell and this package."""
        module, results, keys = lru_cache_entries(wrapper)
        if opaque_module(module):
            return
        if results:
            self.walk_sequence(results, at.within(HELD, "lru_cache"))
        if keys:
            self.walk_sequence(keys, at.within(HELD, "lru_cache key"))

    def object_array(self, array, at: Visit) -> None:
        """A NumPy array of Python objects: its items, by index (``objarr[3]``,
        ``grid[1, 2]``); its path is kept for the note that such an array is counted by
        its pointers. Read through ndarray's own descriptors and methods on a plain
        ndarray view (a subclass's ``__getattribute__`` or ``__array_finalize__`` never
        runs); a library's own small one (`OBJECT_ITEMS_NOTED`) is left out of the note."""
        items, shape = numpy_support.object_items(array)
        if items is None:
            return
        if len(self.object_arrays) < MAX_OPAQUE and (
            len(items) >= OBJECT_ITEMS_NOTED or not library_inside(at.path)
        ):
            self.object_arrays.append((at.path, at.root))
        if len(shape) == 1:
            self.walk_sequence(items, at)
            return
        for flat, item in enumerate(items):
            if type(item) in ATOMIC:
                continue
            index, rest = [], flat
            for size in reversed(shape):
                rest, position = divmod(rest, size) if size else (0, 0)
                index.append(position)
            self.visit(item, at.child(ITEM, ", ".join(map(str, reversed(index)))))

    def referents(self, obj, at: Visit) -> None:
        """What an object with no attributes to read holds, as its C traversal shows it to
        the garbage collector (``q.<Tensor>``: a ``queue.SimpleQueue``'s items); no code
        of its type's own runs but that traversal."""
        kind = type(obj)
        for value in gc.get_referents(obj):
            held = type(value)
            if held not in ATOMIC and value is not kind:
                self.visit(value, at.child(HELD, held.__name__))

    def note_unseen(self, obj, at: Visit) -> None:
        """An object whose memory the scan cannot read (`kinds.UNSEEN_PACKAGES`): its path
        and type, for the list's "not looked into"."""
        if len(self.unseen) < MAX_OPAQUE:
            self.unseen.append((at.path, type_name(type(obj)), at.root))

    def note_opaque(self, obj, at: Visit) -> None:
        """A torch ScriptObject no binding lists the tensors of: its path, for a note."""
        if len(self.opaque) < MAX_OPAQUE:
            self.opaque.append(at.path)


class FrameWalks:
    """Exceptions and tracebacks: a finished function frame's locals, named under the
    exception or traceback that reached them; frames still executing, module and class
    frames (their locals are a namespace) and frames of the shell or of this package are
    not read. A frame is read once per root."""

    def __init__(self, visit: Visitor) -> None:
        self.visit = visit
        self._executing: Optional[set[int]] = None
        self._read: set[tuple] = set()  # (id(frame), root)

    def by_tag(self) -> dict[str, Visitor]:
        return {EXCEPTION: self.exception, TRACEBACK: self.traceback}

    def executing(self) -> set[int]:
        """ids of the frames executing when first asked (in any thread): never read."""
        if self._executing is None:
            self._executing = executing_frames()
        return self._executing

    def exception(self, exception: BaseException, at: Visit) -> None:
        """``args`` (``err.args[1]``), the traceback's frames' locals, the exceptions
        chained (``err.__context__``) and an exception group's ``exceptions``; its
        ``__dict__`` (``__notes__``) is walked as an object's. Read through
        BaseException's own descriptors (a subclass's properties never run)."""
        args, traceback, cause, context, group = exception_fields(exception)
        if group:  # before args, which hold the same exceptions: named as a user types them
            self.visit(group, at.child(ATTR, "exceptions"))
        if args:
            self.visit(args, at.child(ATTR, "args"))
        if traceback is not None:
            self.traceback(traceback, at)
        if cause is not None:
            self.visit(cause, at.child(ATTR, "__cause__"))
        if context is not None and context is not cause:
            self.visit(context, at.child(ATTR, "__context__"))

    def traceback(self, traceback: types.TracebackType, at: Visit) -> None:
        """The locals of the finished function frames (``tb.<traceback: f() local 'x'>``)."""
        executing, read = self.executing(), self._read
        frames = [
            frame
            for frame, _exited in traceback_frames_exited([traceback])
            if is_function_frame(frame) and not opaque_module(frame_module(frame))
        ]
        for frame, call in zip(frames, frame_calls(frames)):  # `f() #2`: a function met again
            key = (id(frame), at.root)
            if id(frame) in executing or key in read:
                continue
            read.add(key)
            for name, value in frame_locals(frame).items():
                if type(value) not in ATOMIC and type(name) is str:
                    self.visit(value, at.child(FRAME_LOCAL, ("traceback:", call, name)))


class TensorParts:
    """What a tensor holds beyond its storage: a retained ``.grad`` and the attributes set
    on it (``a.extra``, a wrapper subclass's inner tensors: ``w.data_int8``), named like an
    object's; read through torch's tensor base's own getters. A non-leaf tensor's graph is
    measured after the walk: it goes to ``graphs.owners``."""

    def __init__(
        self,
        visit: Visitor,
        walk_attributes: AttributesWalk,
        first_entry: Callable[[int, Visit], bool],
        readers: Optional[tuple[Callable, ...]],
        found: Found,
        graphs: Graphs,
        max_depth: int,
    ) -> None:
        self.visit = visit
        self.walk_attributes = walk_attributes
        self.first_entry = first_entry
        self.readers = readers  # `readers.tensor_readers`: None without torch
        self.found = found
        self.graphs = graphs
        self.max_depth = max_depth

    def grad(self, tensor, at: Visit) -> None:
        """A leaf tensor's ``.grad`` (``<path>.grad``), and a non-leaf's that
        ``retain_grad()`` kept."""
        if self.readers is None:
            return
        is_leaf, retains_grad, read_grad = self.readers
        leaf = is_leaf(tensor)
        if not leaf:
            self.graphs.owners.append(tensor)
        if at.depth < self.max_depth and (leaf or retains_grad(tensor)):
            grad = read_grad(tensor)
            if grad is not None:
                self.visit(grad, at.child(ATTR, "grad"))

    def attributes_since(self, start: int, tensor_type: Optional[type]) -> None:
        """The attributes of the tensors recorded since ``start`` (tensors recorded
        meanwhile too); a chunk of tensors without any is passed over in bulk."""
        pending, rows = self.found.pending, self.found.pending_rows
        if tensor_type is None:
            return
        while start < len(pending):
            end = min(len(pending), start + TENSOR_CHUNK)
            held_only = gc.get_referents(*pending[start:end])
            if len(held_only) == end - start and all(map(is_, held_only, repeat(tensor_type))):
                start = end  # each holds its class only: the common case, checked in C
                continue
            torch_rows = list(map("torch".__eq__, map(ROW_FRAMEWORK, rows[start:end])))
            if not any(torch_rows):
                start = end
                continue
            tensors = list(itertools.compress(pending[start:end], torch_rows))
            held = list(itertools.compress(range(start, end), torch_rows))
            start = end
            for tensor, attributes, index in zip(tensors, tensor_attributes(tensors), held):
                if attributes:
                    self._own_attributes(id(tensor), *attributes, index)

    def _own_attributes(
        self, ident: int, attributes: Optional[dict], slots: list, index: int
    ) -> None:
        """One tensor's attributes and slots, under the path of its row (pending row
        `index`); met before from another root: an alias."""
        _path, holder, root, depth, _framework = self.found.pending_rows[index]
        at = Visit(self.found.pending_path(index), depth, holder, root)
        if depth >= self.max_depth or not self.first_entry(ident, at):
            return
        if attributes:
            self.walk_attributes(attributes, at)
        for name, value in slots:
            if type(value) not in ATOMIC:
                self.visit(value, at.child(ATTR, name))
