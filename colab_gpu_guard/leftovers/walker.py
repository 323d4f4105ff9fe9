"""The reference walk: from each root into lists, tuples, dicts (values, and keys that are
objects), sets, named tuples, ``nn.Module`` parameters/buffers/submodules (named like
``named_parameters()``), optimizer state, objects' ``__dict__`` and slots (and the class
of an object whose class the notebook defines: the object keeps it alive), and the holders
in `holders` (class attributes, closures, bound methods, partials, suspended generators,
iterators, NumPy object arrays, exceptions and tracebacks, module hooks, ``lru_cache``
results), a tensor's own attributes and a retained ``.grad``, with a depth limit, cycle
detection and a time budget. Containers and attributes are read through `readers` (no
code of the user's runs); plain data is skipped in bulk (`plain`). Each array reached is
recorded (`found.Found`) under its path (`naming`); a container first reached from another
root is an alias: that root reaches what lies under it too (``aliases``, resolved by
`reach.Reach`)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Hashable
from operator import attrgetter
from typing import Optional

from ..notebook_refs.frames import executing_frames
from ..units import USER_VARIABLE
from . import holders, modules
from .found import Found
from .graphs import Graphs
from .kinds import (
    ALWAYS,
    ARRAY,
    ATOMIC,
    CLASS,
    EXCEPTION,
    FUNCTION,
    ITERATOR,
    LRU_CACHE,
    MAPPING,
    METHOD,
    NAMEDTUPLE,
    NN_MODULE,
    NOT_ATOMIC,
    OPAQUE,
    PARTIAL,
    SEQUENCE,
    SET,
    SKIP,
    SUSPENDED,
    TRACEBACK,
    Classifier,
    Kind,
)
from .naming import (
    ARRAY_KEY,
    ATTR,
    ITEM,
    KEY,
    KEY_OF,
    KEY_TEXT,
    OBJECT_KEY,
    ROOT,
    SET_ITEM,
    key_text,
)
from .plain import all_plain
from .readers import BASE_ITER, instance_dict, own_attribute, slot_values, tensor_readers

DEFAULT_MAX_DEPTH = 10
CHUNK = 2048  # items checked in bulk at a time; the time budget is looked at between them
SMALL = 64  # a chunk holding something is checked again in parts this big

_REQUIRES_GRAD = attrgetter("requires_grad")


# the holders that are not containers (`holders`), by the kind the classifier gave them
_HOLDER_WALKS = {
    FUNCTION: holders.walk_function,
    METHOD: holders.walk_method,
    PARTIAL: holders.walk_partial,
    SUSPENDED: holders.walk_suspended,
    CLASS: holders.walk_class,
    ITERATOR: holders.walk_iterator,
    EXCEPTION: holders.walk_exception,
    TRACEBACK: holders.walk_traceback,
    LRU_CACHE: holders.walk_lru_cache,
    OPAQUE: holders.note_opaque,
}


class OutOfTime(Exception):
    """The scan's time budget ran out (caught by the scan; never reaches a user)."""


class Walker:
    """Walks roots into containers and records the arrays it reaches in ``found``.
    ``first_visit``: id(container) -> (root, path) of its first visit; ``aliases``:
    (root, path, first root) for each later visit from another root. With a ``budget_s``, the walk
    raises `OutOfTime` once it is spent, and ``unfinished`` lists (path, items, items
    searched) for each container it was inside, innermost first."""

    def __init__(
        self,
        max_depth: int = DEFAULT_MAX_DEPTH,
        keep_refs: bool = False,
        budget_s: Optional[float] = None,
    ) -> None:
        self.max_depth = max_depth
        self.classifier = Classifier()
        self.kinds = self.classifier.kinds
        self.classify = self.classifier.classify
        readers = {framework: info_of for _type, framework, info_of in self.classifier.array_types}
        self.found = Found(keep_refs, readers)
        self.graphs = Graphs(keep_refs)
        self.pending = self.found.pending.append
        self.pending_rows = self.found.pending_rows.append
        self.first_visit: dict[int, tuple] = {}
        self.aliases: list[tuple] = []
        self.root_keys: dict[Hashable, Hashable] = {}  # a root as rows hold it -> its key
        self.variables: dict[Hashable, str] = {}  # a user variable's root, as rows hold it -> name
        self.deadline = None if budget_s is None else time.perf_counter() + budget_s
        self.unfinished: list[tuple] = []
        self.ran_out = False
        self.opaque: list = []  # paths to torch ScriptObjects whose tensors no binding lists
        self.tensor_fields = tensor_readers(self.classifier.tensor_type)
        tensor_kind = self.classifier.tensor_kind
        # the commonest array, recorded inline by `_walk_items`: its type and framework
        self.tensor = (
            self.classifier.tensor_type,
            tensor_kind.framework if tensor_kind is not None else None,
        )
        self._executing: Optional[set[int]] = None
        self._frames_read: set[tuple] = set()  # (id(frame), root)

    def check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.ran_out = True
            raise OutOfTime

    def visit_root(self, label: str, value, holder: str, root: Hashable, depth: int = 0) -> None:
        """Walk from one root; ``root`` (its key) is recorded as a plain tuple (see `Row`)."""
        held = tuple(root) if isinstance(root, tuple) else root
        self.root_keys.setdefault(held, root)
        if holder == USER_VARIABLE:
            self.variables[held] = label
        start = len(self.found.pending)
        self.visit(value, (None, ROOT, label), depth, holder, held)
        holders.walk_tensor_attributes(self, start)

    def executing_frames(self) -> set[int]:
        """ids of the frames executing when first asked (in any thread): never read."""
        if self._executing is None:
            self._executing = executing_frames()
        return self._executing

    def enter_frame(self, frame, root) -> bool:
        """True the first time a root reaches a traceback frame (a frame holds no path of
        its own: each root names its locals under the exception that reached them)."""
        key = (id(frame), root)
        if key in self._frames_read:
            return False
        self._frames_read.add(key)
        return True

    def visit(self, obj, path, depth: int, holder: str, root) -> None:
        kind = type(obj)
        if kind in ATOMIC:
            return
        what = self.kinds.get(kind) or self.classify(kind)
        tag = what.tag
        if tag == SKIP:
            return
        if tag == ARRAY:
            self.record(obj, what, path, depth, holder, root)
            return
        if depth >= self.max_depth:
            return
        # `first_entry`, inline: this runs once per container a scan meets
        ident = id(obj)
        first = self.first_visit.get(ident)
        if first is not None:
            if first[0] != root:
                self.aliases.append((root, first[1], first[0]))
            return
        self.first_visit[ident] = (root, path)
        if self.deadline is not None:
            self.check_time()
        try:
            if tag == SEQUENCE:
                items = obj if kind is list or kind is tuple else list(BASE_ITER[what.base](obj))
                walk_sequence(self, items, path, depth + 1, holder, root)
            elif tag == MAPPING:
                self._walk_mapping(obj, path, depth + 1, holder, root)
            elif tag == NN_MODULE:
                modules.walk_module(self, obj, what, path, depth, holder, root)
            elif tag == NAMEDTUPLE:
                fields = own_attribute(kind, "_fields")
                if type(fields) is tuple:
                    for field, item in zip(fields, tuple.__iter__(obj)):
                        if type(field) is str:
                            self.visit(item, (path, ATTR, field), depth + 1, holder, root)
            elif tag == SET:
                items = list(BASE_ITER[what.base](obj))
                walk_sequence(self, items, path, depth + 1, holder, root, SET_ITEM)
            elif tag in _HOLDER_WALKS:
                _HOLDER_WALKS[tag](self, obj, path, depth + 1, holder, root)
            if what.layout is not None and tag != NN_MODULE:  # a module walks its own
                self.walk_layout(obj, what, path, depth + 1, holder, root)
            if what.notebook_class:
                self.visit(kind, (path, ATTR, "__class__"), depth + 1, holder, root)
        except (RuntimeError, ReferenceError):  # changed size during iteration; dead proxy
            pass

    def walk_layout(self, obj, what: Kind, path, depth, holder, root, skip=()) -> None:
        """An object's ``__dict__`` and slots, read through the interpreter's descriptors."""
        layout = what.layout
        attributes = instance_dict(layout.dict_getter, obj)  # type: ignore[union-attr]
        if attributes:
            self.walk_attributes(attributes, path, depth, holder, root, skip)
        for name, value in slot_values(layout.slots, obj):  # type: ignore[union-attr]
            if type(value) not in ATOMIC:
                self.visit(value, (path, ATTR, name), depth, holder, root)

    def _walk_mapping(self, obj, path, depth, holder, root) -> None:
        pairs = list(dict.items(obj))
        if len(pairs) > 16:
            values = list(dict.values(obj))
            keys = list(dict.keys(obj))
            total = len(pairs)
            for start in range(0, total, CHUNK):
                end = start + CHUNK
                try:
                    self.check_time()
                    if all_plain(values[start:end], depth, self.max_depth) and all_plain(
                        keys[start:end], depth, self.max_depth
                    ):
                        continue
                    self._walk_pairs(pairs[start:end], path, depth, holder, root)
                except OutOfTime:
                    self.unfinished.append((path, total, start))
                    raise
            return
        self._walk_pairs(pairs, path, depth, holder, root)

    def _walk_pairs(self, pairs, path, depth, holder, root) -> None:
        atomic = ATOMIC
        visit = self.visit
        for key, value in pairs:
            key_kind = type(key)
            if key_kind not in atomic:
                visit(key, (path, KEY_OF, None), depth, holder, root)  # a key holds its object
            if type(value) in atomic:
                continue
            if key_kind in atomic:
                child = (path, KEY, key)
            elif key_kind is tuple:
                child = (path, KEY_TEXT, key_text(key))  # never keep a key alive
            elif self.classify(key_kind).tag == ARRAY:
                child = (path, ARRAY_KEY, id(key))
            else:
                child = (path, OBJECT_KEY, key_kind.__name__)
            visit(value, child, depth, holder, root)

    def walk_attributes(self, attributes: dict, path, depth, holder, root, skip=()) -> None:
        atomic = ATOMIC
        for name, value in list(dict.items(attributes)):
            if type(value) in atomic or type(name) is not str or name in skip:
                continue
            self.visit(value, (path, ATTR, name), depth, holder, root)

    def record(self, array, what: Kind, path, depth, holder, root) -> None:
        self.pending(array)
        self.pending_rows((path, holder, root, depth, what.framework))
        if what.framework == "torch" and array.requires_grad:
            self.visit_grad(array, path, depth, holder, root)
        elif what.framework == "numpy" and depth < self.max_depth:
            holders.walk_object_array(self, array, path, depth + 1, holder, root)

    def visit_grad(self, tensor, path, depth, holder, root) -> None:
        """A leaf tensor's ``.grad``, named ``<path>.grad``, and a non-leaf's that
        ``retain_grad()`` kept; a non-leaf tensor has a ``grad_fn``: what its graph saved
        is measured after the walk (`graphs`). Read through torch's tensor base's own
        getters (a subclass's properties never run)."""
        if self.tensor_fields is None:
            return
        is_leaf, retains_grad, read_grad = self.tensor_fields
        leaf = is_leaf(tensor)
        if not leaf:
            self.graphs.owners.append(tensor)
        if depth < self.max_depth and (leaf or retains_grad(tensor)):
            grad = read_grad(tensor)
            if grad is not None:
                self.visit(grad, (path, ATTR, "grad"), depth + 1, holder, root)

    def first_entry(self, ident: int, root, path) -> bool:
        """Whether this is the walk's first entry into the object `ident` (then recorded);
        met before from another root, that root is an alias of the first."""
        first = self.first_visit.get(ident)
        if first is not None:
            if first[0] != root:
                self.aliases.append((root, first[1], first[0]))
            return False
        self.first_visit[ident] = (root, path)
        return True

    def walk_tensor_attributes(
        self, ident: int, attributes: Optional[dict], slots: list, row: tuple
    ) -> None:
        """A tensor's own attributes and slots (`holders.walk_tensor_attributes`), under
        its row's path, as an object's are; met before from another root: an alias."""
        path, holder, root, depth, _framework = row
        if depth >= self.max_depth or not self.first_entry(ident, root, path):
            return
        if attributes:
            self.walk_attributes(attributes, path, depth + 1, holder, root)
        for name, value in slots:
            if type(value) not in ATOMIC:
                self.visit(value, (path, ATTR, name), depth + 1, holder, root)


def walk_sequence(walker: Walker, items, path, depth, holder, root, node=ITEM) -> None:
    """The items of a list or tuple (``items``; other sequences and sets are first copied
    into a list), by index. The hot loop of a scan: a cached dataset is a list of 10^5
    tensors, a table 10^6 records; so plain values are skipped in C a chunk at a time,
    arrays of one type recorded in bulk, and the commonest array recorded inline."""
    total = len(items)
    if total <= 16:
        _walk_items(walker, enumerate(items), path, depth, holder, root, node)
        return
    present = set(map(type, items))
    if present <= ATOMIC:
        return  # plain values only: a list of 10^6 ints costs one C-level pass
    if len(present) == 1 and node == ITEM:
        what = walker.classify(next(iter(present)))
        if what.tag == ARRAY:
            _record_items(walker, items, what, path, depth, holder, root)
            return
    max_depth = walker.max_depth
    for start in range(0, total, CHUNK):
        chunk = items[start : start + CHUNK]
        try:
            walker.check_time()
            if all_plain(chunk, depth, max_depth):
                continue
            for part in range(0, len(chunk), SMALL):
                small = chunk[part : part + SMALL]
                if all_plain(small, depth, max_depth):
                    continue
                # only the items that are not plain values, picked out in C
                numbered = zip(itertools.count(start + part), small)
                numbered = itertools.compress(numbered, map(NOT_ATOMIC, map(type, small), ALWAYS))
                _walk_items(walker, numbered, path, depth, holder, root, node)
        except OutOfTime:
            walker.unfinished.append((path, total, start))
            raise


def _walk_items(walker: Walker, items, path, depth, holder, root, node) -> None:
    atomic = ATOMIC
    kinds = walker.kinds
    visit = walker.visit
    pending = walker.pending
    pending_rows = walker.pending_rows
    tensor, tensor_framework = walker.tensor
    for index, item in items:
        kind = type(item)
        if kind is tensor:  # the commonest array first: what the general path does
            child = (path, node, index)
            pending(item)
            pending_rows((child, holder, root, depth, tensor_framework))
            if item.requires_grad:
                walker.visit_grad(item, child, depth, holder, root)
            continue
        if kind in atomic:
            continue
        what = kinds.get(kind) or walker.classify(kind)
        tag = what.tag
        if tag == ARRAY:
            walker.record(item, what, (path, node, index), depth, holder, root)
        elif tag != SKIP:
            visit(item, (path, node, index), depth, holder, root)


def _record_items(walker: Walker, arrays, what: Kind, path, depth, holder, root) -> None:
    """``record`` for every item of a sequence holding arrays of one type only, the
    bookkeeping done in C (a list of 10^5 tensors is common: a cached dataset)."""
    count = len(arrays)
    walker.found.pending.extend(arrays)
    paths = zip(itertools.repeat(path), itertools.repeat(ITEM), range(count))
    walker.found.pending_rows.extend(
        zip(
            paths,
            itertools.repeat(holder),
            itertools.repeat(root),
            itertools.repeat(depth),
            itertools.repeat(what.framework),
        )
    )
    if what.framework == "torch" and any(map(_REQUIRES_GRAD, arrays)):
        for index, array in enumerate(arrays):
            if array.requires_grad:
                walker.visit_grad(array, (path, ITEM, index), depth, holder, root)
    elif what.framework == "numpy" and depth < walker.max_depth:
        for index, array in enumerate(arrays):
            holders.walk_object_array(walker, array, (path, ITEM, index), depth + 1, holder, root)
