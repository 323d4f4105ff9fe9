"""The reference walk: from each root into containers, objects' ``__dict__`` and slots,
and the holders of `holders` and `modules`, with a depth limit, cycle detection and a time
budget; each array reached is recorded (`found`) at its `Visit`. See docs/leftovers.md."""

from __future__ import annotations

import itertools
import time
from collections.abc import Collection, Hashable
from operator import attrgetter, itemgetter
from typing import Optional, Union

from ..units import OUTPUT_HISTORY
from . import arrow
from .found import Found
from .graphs import Graphs
from .holders import FrameWalks, HolderWalks, TensorParts
from .kinds import (
    ALWAYS,
    ARRAY,
    ATOMIC,
    MAPPING,
    NAMEDTUPLE,
    NN_MODULE,
    NOT_ATOMIC,
    PANDAS_INDEX,
    PANDAS_MANAGER,
    ROWS_OF_PLAIN,
    SEQUENCE,
    SET,
    SKIP,
    Classifier,
    Kind,
)
from .modules import ModuleWalk
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
from .pandas_frames import PandasWalk
from .plain import all_plain
from .readers import BASE_ITER, instance_dict, own_attribute, slot_values, tensor_readers
from .root_refs import NO_NAME, RootRef
from .rows import Items
from .tally import root_labels
from .visit import Visit

DEFAULT_MAX_DEPTH = 100
# The walk recurses, a few frames a container: it goes this many containers deep at a time,
# then on from where it stopped (`walk_deeper`), each time from the top of the stack.
STRETCH = 10
CHUNK = 2048  # items checked in bulk at a time; the time budget is looked at between them
SMALL = 64  # a chunk holding something is checked again in parts this big

_REQUIRES_GRAD = attrgetter("requires_grad")
_NEW = tuple.__new__


# an alias's fields (`Walker.aliases`) beyond its root, the first visit's node and root
_NODE, _PATH, _HOLDER = itemgetter(1), itemgetter(3), itemgetter(4)


class OutOfTime(Exception):
    """The scan's time budget ran out (caught by the scan; never reaches a user)."""


class Walker:
    """Walks roots into containers and records the arrays it reaches in ``found``.
    ``first_visit``: id(container) -> (root, path) of its first visit; ``aliases``:
    (root, the first visit's path, first root, its own path, its holder) for each later
    visit from another root to a container that reaches an array (or a holder not looked
    into; those reaching none are in ``empty``).
    With a ``budget_s``, the walk raises `OutOfTime` once it is spent, and ``unfinished``
    lists (path, items, items searched) for each container it was inside, innermost
    first. ``too_deep``: (container, its visit) where the walk's depth limit stopped it;
    `walk_deeper` goes on from them, down to ``max_depth``."""

    def __init__(
        self,
        max_depth: int = DEFAULT_MAX_DEPTH,
        keep_refs: Union[bool, str] = False,
        budget_s: Optional[float] = None,
    ) -> None:
        self.max_depth = max_depth
        self.limit = min(STRETCH, max_depth)  # how deep the walk goes before `walk_deeper`
        self.too_deep: list[tuple] = []
        self.stopped_deep = False  # something lay deeper than max_depth (`too_deep_note`)
        self.classifier = classifier = Classifier()
        self.kinds = classifier.kinds
        self.classify = classifier.classify
        readers = {framework: info_of for _type, framework, info_of in classifier.array_types}
        readers[arrow.FRAMEWORK] = arrow.buffer_info
        self.found = Found(keep_refs, readers)
        self.graphs = Graphs(bool(keep_refs))
        self.pending = self.found.pending.append
        self.pending_rows = self.found.pending_rows.append
        self.first_visit: dict[int, tuple] = {}
        self.empty: set[int] = set()  # containers walked that reach no array
        self.aliases: list[tuple] = []
        self.root_keys: dict[Hashable, Hashable] = {}  # a root as rows hold it -> its key
        # (a root's label, its holder) -> the group its arrays are listed under
        self.groups: dict[tuple[str, str], RootRef] = {}
        self.deadline = None if budget_s is None else time.perf_counter() + budget_s
        self.unfinished: list[tuple] = []
        self.ran_out = False
        self.items = ItemWalk(self)
        self.walk_sequence = self.items.walk_sequence
        self.holder_walks = HolderWalks(self.visit, self.walk_sequence)
        self.opaque = self.holder_walks.opaque  # paths to ScriptObjects no binding lists
        # the arrays and the holders not looked into that the walk has met
        self.met = (self.found.pending, self.holder_walks.unseen, self.holder_walks.object_arrays)
        self.modules = ModuleWalk(self.visit, self.walk_attributes)
        self.tensor_parts = TensorParts(
            self.visit,
            self.walk_attributes,
            self.first_entry,
            tensor_readers(classifier.tensor_type),
            self.found,
            self.graphs,
            self.limit,
        )
        pandas_walk = PandasWalk(self.visit, self.found.composites)
        self.walk_holder = {
            **self.holder_walks.by_tag(),
            **FrameWalks(self.visit).by_tag(),
            PANDAS_MANAGER: pandas_walk.manager,
            PANDAS_INDEX: pandas_walk.index,
        }
        tensor_kind = classifier.tensor_kind
        # the commonest array, recorded inline by `walk_sequence`: its type and framework
        self.tensor = (
            classifier.tensor_type,
            tensor_kind.framework if tensor_kind is not None else None,
        )

    def check_time(self) -> None:
        if self.deadline is not None and time.perf_counter() > self.deadline:
            self.ran_out = True
            raise OutOfTime

    def visit_root(
        self, label: str, value, holder: str, root: Hashable, depth: int, group: RootRef
    ) -> None:
        """Walk from one root; ``root`` (its key) is recorded as a plain tuple (see `Row`),
        ``group`` is the group its arrays are listed under."""
        held = tuple(root) if isinstance(root, tuple) else root
        self.root_keys.setdefault(held, root)
        self.groups.setdefault((label, holder), group)
        start = len(self.found.pending)
        self.visit(value, Visit((None, ROOT, label), depth, holder, held))
        self.tensor_parts.attributes_since(start, self.classifier.tensor_type)

    def visit(self, obj, at: Visit) -> None:
        kind = type(obj)
        if kind in ATOMIC:
            return
        what = self.kinds.get(kind) or self.classify(kind)
        tag = what.tag
        if tag == SKIP:
            return
        if tag == ARRAY:
            self.record(obj, what, at)
            return
        if at.depth >= self.limit:
            self.too_deep.append((obj, at))
            return
        # `first_entry`, inline: this runs once per container a scan meets
        ident = id(obj)
        first = self.first_visit.get(ident)
        if first is not None:
            if first[0] != at.root and ident not in self.empty:
                self.met_again(at, first)
            return
        self.first_visit[ident] = (at.root, at.path)
        if self.deadline is not None:
            self.check_time()
        # what the walk has met so far: unchanged over the container's walk, it reaches none
        pending, unseen, object_arrays = self.met
        before = len(pending) + len(unseen) + len(object_arrays)
        try:
            if tag == SEQUENCE:
                items = obj if kind is list or kind is tuple else list(BASE_ITER[what.base](obj))
                self.walk_sequence(items, at)
            elif tag == MAPPING:
                self.items.walk_mapping(obj, at)
            elif tag == NN_MODULE:
                self.modules.walk(obj, what, at)
            elif tag == NAMEDTUPLE:
                fields = own_attribute(kind, "_fields")
                if type(fields) is tuple:
                    for field, item in zip(fields, tuple.__iter__(obj)):
                        if type(field) is str:
                            self.visit(item, at.child(ATTR, field))
            elif tag == SET:
                self.walk_sequence(list(BASE_ITER[what.base](obj)), at, SET_ITEM)
            elif tag in self.walk_holder:
                self.walk_holder[tag](obj, at)
            if what.layout is not None and tag != NN_MODULE:  # a module walks its own
                self.walk_layout(obj, what, at)
            if what.notebook_class:
                self.visit(kind, at.child(ATTR, "__class__"))
        except (RuntimeError, ReferenceError):  # changed size during iteration; dead proxy
            pass
        if len(pending) + len(unseen) + len(object_arrays) == before:
            self.empty.add(ident)

    def walk_deeper(self) -> None:
        """Go on from where the depth limit stopped the walk, `STRETCH` containers deeper
        at a time, down to ``max_depth``; what lies deeper stays in ``too_deep``."""
        tensor_type = self.classifier.tensor_type
        while self.too_deep and self.limit < self.max_depth:
            self.limit = self.tensor_parts.max_depth = min(self.limit + STRETCH, self.max_depth)
            stopped, self.too_deep = self.too_deep, []
            for obj, at in stopped:
                start = len(self.found.pending)
                self.visit(obj, at)
                self.tensor_parts.attributes_since(start, tensor_type)

    def too_deep_note(self) -> Optional[str]:
        """What lay deeper than ``max_depth`` (the roots it hangs from, a few), as a note;
        the containers are let go."""
        if not self.too_deep:
            return None
        roots: dict[str, None] = {}
        for _obj, at in self.too_deep:
            node = at.path
            while node[0] is not None:
                node = node[0]
            roots[node[2]] = None
        self.too_deep = []
        self.stopped_deep = True
        shown = ", ".join(f"`{label}`" for label in list(roots)[:3])
        more = f" (+{len(roots) - 3} more)" if len(roots) > 3 else ""
        return (
            f"not searched deeper than {self.max_depth} containers, inside {shown}{more} "
            f"(find_leftovers(max_depth=...) searches deeper)"
        )

    def met_again(self, at: Visit, first: tuple) -> None:
        """A container another root reached first (`first`: its root and path): the root
        at `at` is an alias of it."""
        # its own path and holder: the group it is listed under (`alias_groups`)
        self.aliases.append((at.root, first[1], first[0], at.path, at.holder))

    def alias_groups(self, dropped: Collection = ()) -> list[tuple]:
        """(group, node, None) for each container a root reached after another root had,
        roots in `dropped` left out: the group its own path is listed under
        (`tally.root_labels`: ``b`` for ``b = {'x': a}``, ``Out[7]`` showing ``model``, a
        traceback local holding it), for `reach.alias_rows`. ``_``, ``__``, ``_N`` are left
        out: the rows name them beside ``Out[N]``."""
        kept = self.aliases
        if dropped:
            kept = [alias for alias in kept if alias[0] not in dropped]
        if not kept:
            return []
        labels = root_labels(list(map(_PATH, kept)), list(map(_HOLDER, kept)), self.groups)
        shown = {
            ref.name
            for ref in self.groups.values()
            if ref.is_output or ref.kind not in (OUTPUT_HISTORY, NO_NAME)
        }
        found = zip(labels, map(_NODE, kept), itertools.repeat(None))
        if shown.issuperset(labels):  # the usual case: made in C
            return list(found)
        return [alias for alias in found if alias[0] in shown]

    def walk_layout(self, obj, what: Kind, at: Visit) -> None:
        """An object's ``__dict__`` and slots, read through the interpreter's descriptors."""
        layout = what.layout
        attributes = instance_dict(layout.dict_getter, obj)  # type: ignore[union-attr]
        if attributes and layout.links:  # type: ignore[union-attr]
            links = layout.links  # type: ignore[union-attr]
            attributes = {k: v for k, v in dict.items(attributes) if k not in links}
        if attributes:
            self.walk_attributes(attributes, at)
        for name, value in slot_values(layout.slots, obj):  # type: ignore[union-attr]
            if type(value) not in ATOMIC:
                self.visit(value, at.child(ATTR, name))

    def walk_attributes(self, attributes: dict, at: Visit) -> None:
        atomic = ATOMIC
        for name, value in list(dict.items(attributes)):
            if type(value) in atomic or type(name) is not str:
                continue
            self.visit(value, at.child(ATTR, name))

    def record(self, array, what: Kind, at: Visit) -> None:
        self.pending(array)
        self.pending_rows((at.path, at.holder, at.root, at.depth, what.framework))
        if what.framework == "torch" and array.requires_grad:
            self.tensor_parts.grad(array, at)
        elif what.framework == "numpy" and at.depth < self.limit:
            self.holder_walks.object_array(array, at)

    def first_entry(self, ident: int, at: Visit) -> bool:
        """Whether this is the walk's first entry into the object `ident` (then recorded);
        met before from another root, that root is an alias of the first."""
        first = self.first_visit.get(ident)
        if first is not None:
            if first[0] != at.root and ident not in self.empty:
                self.met_again(at, first)
            return False
        self.first_visit[ident] = (at.root, at.path)
        return True


class ItemWalk:
    """The items of the walker's lists, tuples, sets and dicts: the hot loops of a scan."""

    def __init__(self, walker: Walker) -> None:
        self.walker = walker

    def walk_mapping(self, obj, at: Visit) -> None:
        walker = self.walker
        pairs = list(dict.items(obj))
        if len(pairs) <= 16:
            self._walk_pairs(pairs, at)
            return
        values, keys = list(dict.values(obj)), list(dict.keys(obj))
        total = len(pairs)
        for start in range(0, total, CHUNK):
            end = start + CHUNK
            try:
                walker.check_time()
                if all_plain(values[start:end]) and all_plain(keys[start:end]):
                    continue
                self._walk_pairs(pairs[start:end], at)
            except OutOfTime:
                walker.unfinished.append((at.path, total, start))
                raise

    def _walk_pairs(self, pairs, at: Visit) -> None:
        walker = self.walker
        atomic, visit, child = ATOMIC, walker.visit, at.child
        for key, value in pairs:
            key_kind = type(key)
            if key_kind not in atomic:
                visit(key, child(KEY_OF, None))  # a key holds its object
            if type(value) in atomic:
                continue
            if key_kind in atomic:
                visit(value, child(KEY, key))
            elif key_kind is tuple:
                visit(value, child(KEY_TEXT, key_text(key)))  # never keep a key alive
            elif walker.classify(key_kind).tag == ARRAY:
                walker.found.array_keys = True  # its path is named by the key's id()
                visit(value, child(ARRAY_KEY, id(key)))
            else:
                visit(value, child(OBJECT_KEY, key_kind.__name__))

    def walk_sequence(self, items, at: Visit, node: int = ITEM) -> None:
        """The items of the list or tuple `items` (other sequences and sets are first
        copied into a list), by index. The hot loop of a scan: a cached dataset is a list
        of 10^5 tensors, a table 10^6 records; so plain values are skipped in C a chunk at
        a time, arrays of one type recorded in bulk, and the commonest array inline."""
        walker = self.walker
        total = len(items)
        if total <= 16:
            self._walk_items(enumerate(items), at, node)
            return
        present = set(map(type, items))
        if present <= ATOMIC:
            return  # plain values only: a list of 10^6 ints costs one C-level pass
        if len(present) == 1 and node == ITEM:
            what = walker.classify(next(iter(present)))
            if what.tag == ARRAY:
                self._record_items(items, what, at)
                return
        rows = present <= ROWS_OF_PLAIN  # records of plain values: their types known
        for start in range(0, total, CHUNK):
            chunk = items[start : start + CHUNK]
            try:
                walker.check_time()
                if all_plain(chunk, rows):
                    continue
                for part in range(0, len(chunk), SMALL):
                    small = chunk[part : part + SMALL]
                    if all_plain(small):
                        continue
                    # only the items that are not plain values, picked out in C
                    numbered = zip(itertools.count(start + part), small)
                    types = map(NOT_ATOMIC, map(type, small), ALWAYS)
                    self._walk_items(itertools.compress(numbered, types), at, node)
            except OutOfTime:
                walker.unfinished.append((at.path, total, start))
                raise

    def _walk_items(self, items, at: Visit, node: int) -> None:
        """Each (index, item) of the container visited at `at`. The innermost loop of a
        scan (once per item of every list walked): the item's visit is made from plain
        locals, and only for what is visited (a tensor is recorded inline, a plain value
        skipped), where `at.child` would cost a call per item."""
        walker = self.walker
        atomic, kinds, classify, visit = ATOMIC, walker.kinds, walker.classify, walker.visit
        pending, pending_rows = walker.pending, walker.pending_rows
        grad, record = walker.tensor_parts.grad, walker.record
        tensor, tensor_framework = walker.tensor
        path, holder, root = at.path, at.holder, at.root
        depth = at.depth + 1
        for index, item in items:
            kind = type(item)
            if kind is tensor:  # the commonest array first: what `record` does
                child = (path, node, index)
                pending(item)
                pending_rows((child, holder, root, depth, tensor_framework))
                if item.requires_grad:
                    grad(item, _NEW(Visit, (child, depth, holder, root)))
                continue
            if kind in atomic:
                continue
            what = kinds.get(kind) or classify(kind)
            tag = what.tag
            if tag == ARRAY:
                record(item, what, _NEW(Visit, ((path, node, index), depth, holder, root)))
            elif tag != SKIP:
                visit(item, _NEW(Visit, ((path, node, index), depth, holder, root)))

    def _record_items(self, arrays, what: Kind, at: Visit) -> None:
        """`record` for every item of a sequence holding arrays of one type only, the
        bookkeeping done in C (a list of 10^5 tensors is common: a cached dataset)."""
        walker = self.walker
        path, depth, holder, root = at.path, at.depth + 1, at.holder, at.root
        count = len(arrays)
        found = walker.found
        # one row for all: item i's path is (path, ITEM, i) (`Items`)
        run = Items(path, len(found.pending), count)
        found.pending_runs.append(run)
        found.pending.extend(arrays)
        row = (run, holder, root, depth, what.framework)
        found.pending_rows.extend(itertools.repeat(row, count))
        if what.framework == "torch" and any(map(_REQUIRES_GRAD, arrays)):
            for index, array in enumerate(arrays):
                if array.requires_grad:
                    walker.tensor_parts.grad(array, at.child(ITEM, index))
        elif what.framework == "numpy" and depth < walker.limit:
            for index, array in enumerate(arrays):
                walker.holder_walks.object_array(array, at.child(ITEM, index))
