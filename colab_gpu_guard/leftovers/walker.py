"""The reference walk: from each root into lists, tuples, dicts, sets, named tuples,
``nn.Module`` parameters/buffers/submodules (named like ``named_parameters()``), optimizer
state, dataclasses and plain objects' ``__dict__``, with a depth limit and cycle
detection. Each array reached is recorded (`found.Found`) under its path (`naming`); a
container first reached from another root is an alias: that root reaches what lies under
it too (``aliases``, resolved by `reach_by_root`)."""

from __future__ import annotations

import itertools
from collections.abc import Hashable, Sequence
from operator import attrgetter
from typing import Any

from .found import Found, Ref
from .graphs import Graphs
from .kinds import (
    ALWAYS,
    ARRAY,
    ATOMIC,
    MAPPING,
    NAMEDTUPLE,
    NN_MODULE,
    NOT_ATOMIC,
    OBJECT,
    ROWS,
    ROWS_OF_PLAIN,
    SEQUENCE,
    SET,
    SKIP,
    Classifier,
    Kind,
)
from .naming import ARRAY_KEY, ATTR, DOT, ITEM, KEY, KEY_TEXT, OBJECT_KEY, ROOT, SET_ITEM, key_text

DEFAULT_MAX_DEPTH = 10

_REQUIRES_GRAD = attrgetter("requires_grad")


def _plain_rows(sequence, present: set) -> bool:
    """True when every list/tuple/dict item of ``sequence`` holds plain values only (rows
    of numbers and strings): checked in C, one pass over the rows' items."""
    rows = itertools.compress(sequence, map(ROWS.__contains__, map(type, sequence)))
    if dict in present:
        if list in present or tuple in present:
            return False  # mixed rows: the per-item walk sorts them out
        inner = itertools.chain.from_iterable(map(dict.values, rows))
    else:
        inner = itertools.chain.from_iterable(rows)
    return set(map(type, inner)) <= ATOMIC


class Walker:
    """Walks roots into containers and records the arrays it reaches in ``found``.
    ``first_visit``: id(container) -> (root, path) of its first visit; ``aliases``:
    (root, path) for each later visit from another root."""

    def __init__(self, max_depth: int = DEFAULT_MAX_DEPTH, keep_refs: bool = False) -> None:
        self.max_depth = max_depth
        self.classifier = Classifier()
        self.kinds = self.classifier.kinds
        self.classify = self.classifier.classify
        self.found = Found(keep_refs)
        self.graphs = Graphs(keep_refs)
        self.pending = self.found.pending.append
        self.pending_rows = self.found.pending_rows.append
        self.first_visit: dict[int, tuple] = {}
        self.aliases: list[tuple] = []

    def visit_root(self, label: str, value, holder: str, root: Hashable, depth: int = 0) -> None:
        self.visit(value, (None, ROOT, label), depth, holder, root)

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
        ident = id(obj)
        first = self.first_visit.get(ident)
        if first is not None:
            if first[0] != root:
                self.aliases.append((root, first[1]))
            return
        self.first_visit[ident] = (root, path)
        try:
            if tag == SEQUENCE:
                walk_sequence(self, obj, path, depth + 1, holder, root)
            elif tag == MAPPING:
                self._walk_mapping(obj, path, depth + 1, holder, root)
            elif tag == NN_MODULE:
                self._walk_module(obj, path, depth, holder, root)
            elif tag == NAMEDTUPLE:
                for field, item in zip(type(obj)._fields, obj):
                    self.visit(item, (path, ATTR, field), depth + 1, holder, root)
            elif tag == SET:
                for item in list(obj):
                    self.visit(item, (path, SET_ITEM, None), depth + 1, holder, root)
            elif tag == OBJECT:
                attributes = getattr(obj, "__dict__", None)
                if type(attributes) is dict:
                    self._walk_attributes(attributes, path, depth + 1, holder, root)
        except (RuntimeError, ReferenceError):  # changed size during iteration; dead proxy
            pass

    def _walk_mapping(self, obj, path, depth, holder, root) -> None:
        atomic = ATOMIC
        visit = self.visit
        for key, value in list(obj.items()):
            if type(value) in atomic:
                continue
            key_kind = type(key)
            if key_kind in atomic:
                child = (path, KEY, key)
            elif key_kind is tuple:
                child = (path, KEY_TEXT, key_text(key))  # never keep a key alive
            elif self.classify(key_kind).tag == ARRAY:
                child = (path, ARRAY_KEY, id(key))
            else:
                child = (path, OBJECT_KEY, key_kind.__name__)
            visit(value, child, depth, holder, root)

    def _walk_attributes(self, attributes: dict, path, depth, holder, root) -> None:
        atomic = ATOMIC
        for name, value in list(attributes.items()):
            if type(value) in atomic or type(name) is not str:
                continue
            self.visit(value, (path, ATTR, name), depth, holder, root)

    def _walk_module(self, module, path, depth, holder, root) -> None:
        """Parameters, buffers and submodules named as ``named_parameters()`` names them
        (module nesting does not count against the depth limit)."""
        attributes = getattr(module, "__dict__", {})
        for slot in ("_parameters", "_buffers"):
            for name, tensor in list((attributes.get(slot) or {}).items()):
                if tensor is not None:
                    self.visit(tensor, (path, DOT, name), depth, holder, root)
        for name, child in list((attributes.get("_modules") or {}).items()):
            if child is not None:
                self.visit(child, (path, DOT, name), depth, holder, root)
        rest = {
            name: value
            for name, value in attributes.items()
            if name not in ("_parameters", "_buffers", "_modules")
            and not (name.startswith("_") and name.endswith("hooks"))
        }
        self._walk_attributes(rest, path, depth + 1, holder, root)

    def record(self, array, what: Kind, path, depth, holder, root) -> None:
        self.pending(array)
        self.pending_rows((path, holder, root, depth, what))
        if what.framework == "torch" and array.requires_grad:
            self.visit_grad(array, path, depth, holder, root)

    def visit_grad(self, tensor, path, depth, holder, root) -> None:
        """A leaf tensor's ``.grad``, named ``<path>.grad``; any other tensor that requires
        grad has a ``grad_fn``: what its graph saved is measured after the walk (`graphs`)."""
        if not tensor.is_leaf:
            self.graphs.owners.append(tensor)
        elif depth < self.max_depth:
            grad = tensor.grad
            if grad is not None:
                self.visit(grad, (path, ATTR, "grad"), depth + 1, holder, root)


def walk_sequence(walker: Walker, obj, path, depth, holder, root) -> None:
    """A list, tuple or deque: its items by index. The hot loop of a scan (a cached dataset
    is a list of 10^5 tensors), so plain values are skipped in C and the commonest array
    is recorded inline."""
    items = enumerate(obj)
    if len(obj) > 16:
        present = set(map(type, obj))
        if present <= ATOMIC:
            return  # plain values only: a list of 10^6 ints costs one C-level pass
        if len(present) == 1:
            what = walker.classify(next(iter(present)))
            if what.tag == ARRAY:
                _record_items(walker, obj, what, path, depth, holder, root)
                return
        if present <= ROWS_OF_PLAIN and _plain_rows(obj, present):
            return
        # only the items that are not plain values, picked out in C
        items = itertools.compress(items, map(NOT_ATOMIC, map(type, obj), ALWAYS))
    atomic = ATOMIC
    kinds = walker.kinds
    visit = walker.visit
    pending = walker.pending
    pending_rows = walker.pending_rows
    tensor, tensor_what = walker.classifier.tensor_type, walker.classifier.tensor_kind
    for index, item in items:
        kind = type(item)
        if kind is tensor:  # the commonest array first: what the general path does
            child = (path, ITEM, index)
            pending(item)
            pending_rows((child, holder, root, depth, tensor_what))
            if item.requires_grad:
                walker.visit_grad(item, child, depth, holder, root)
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
        what = kinds.get(kind) or walker.classify(kind)
        tag = what.tag
        if tag == ARRAY:
            child = (path, ITEM, index)
            pending(item)  # what record() does, inlined: this loop is the hot one
            pending_rows((child, holder, root, depth, what))
            if what.framework == "torch" and item.requires_grad:
                walker.visit_grad(item, child, depth, holder, root)
        elif tag != SKIP:
            visit(item, (path, ITEM, index), depth, holder, root)


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
            itertools.repeat(what),
        )
    )
    if what.framework == "torch" and any(map(_REQUIRES_GRAD, arrays)):
        for index, array in enumerate(arrays):
            if array.requires_grad:
                walker.visit_grad(array, (path, ITEM, index), depth, holder, root)


def reach_by_root(refs: Sequence[Ref], aliases: Sequence[tuple]) -> dict[Hashable, set]:
    """root -> storage keys it reaches, counting containers first reached elsewhere."""
    reach: dict = {}
    for ref in refs:
        reach.setdefault(ref.root, set()).add(ref.key)
    if aliases:
        node_roots: dict[int, list] = {}
        for root, node in aliases:
            node_roots.setdefault(id(node), []).append(root)
        for ref in refs:
            path: Any = ref.path
            while path is not None:
                roots = node_roots.get(id(path))
                if roots:
                    for root in roots:
                        reach.setdefault(root, set()).add(ref.key)
                path = path[0]
    return reach
