"""Which roots reach which blocks of memory, worked out in bulk from a scan's rows."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Optional

from .graphs import Graphs
from .rows import ROW_PATH, ROW_ROOT, Items

_PARENT = operator.itemgetter(0)


def _parent(path: Any) -> Any:
    """A row's path's parent (the container's, for items recorded in bulk: `Items`)."""
    return path.parent if type(path) is Items else _PARENT(path)


Run = tuple  # (root, first row, end row)


def runs_of(roots: list) -> list[Run]:
    """``roots`` (one per row) as runs of one root: (root, start, end)."""
    count = len(roots)
    if not count:
        return []
    starts = [0]
    starts += itertools.compress(range(1, count), map(operator.is_not, roots[1:], roots[:-1]))
    ends = starts[1:] + [count]
    return list(zip(map(roots.__getitem__, starts), starts, ends))


def alias_rows(rows: Sequence[tuple], aliases: Iterable[tuple]) -> dict[Hashable, list[int]]:
    """Alias root -> the rows found under a container that root met after another root
    had reached it first. Worked out once per parent node (a list's items share one)."""
    node_roots: dict[int, tuple] = {}
    for root, node, *_rest in aliases:
        node_roots[id(node)] = node_roots.get(id(node), ()) + (root,)
    memo: dict[int, tuple] = {id(None): ()}

    def roots_above(node) -> tuple:
        pending = []
        while id(node) not in memo:
            pending.append(node)
            node = node[0]
        found = memo[id(node)]
        for item in reversed(pending):
            found = found + node_roots.get(id(item), ())
            memo[id(item)] = found
        return found

    parents = list(map(_parent, map(ROW_PATH, rows)))
    idents = list(map(id, parents))
    for parent in dict(zip(idents, parents)).values():
        roots_above(parent)
    by_root: dict[Hashable, list[int]] = {}
    above = list(map(memo.__getitem__, idents))
    for index in itertools.compress(range(len(above)), above):
        for root in above[index]:
            by_root.setdefault(root, []).append(index)
    return by_root


def root_runs(rows: Sequence[tuple], items: Sequence[Items] = ()) -> list[Run]:
    """The rows' roots as runs of one root (`runs_of`); the rows of each of `items` (a
    container's items recorded in bulk, in order) share one root, taken once."""
    if not items:
        return runs_of(list(map(ROW_ROOT, rows)))
    roots: list = []
    places: list[int] = []  # the row of each of `roots`
    at = 0
    for run in items:
        roots += map(ROW_ROOT, rows[at : run.start])
        places += range(at, run.start)
        roots.append(ROW_ROOT(rows[run.start]))
        places.append(run.start)
        at = run.start + run.count
    roots += map(ROW_ROOT, rows[at:])
    places += range(at, len(rows))
    places.append(len(rows))
    return [(root, places[start], places[end]) for root, start, end in runs_of(roots)]


class Reach:
    """Which roots reach which blocks: ``keys[i]`` is row i's block (storage key). Roots
    are given and answered as their keys (`notebook_refs.RootKey`); the rows hold them as
    plain tuples, equal to the keys. ``items``: the rows' `Items` (`Found.runs`)."""

    def __init__(
        self,
        rows: Sequence[tuple],
        keys: list,
        aliases: Sequence[tuple],
        graphs: Graphs,
        root_keys: Optional[dict] = None,
        items: Sequence[Items] = (),
    ) -> None:
        self.keys = keys
        self.root_keys = root_keys or {}  # a root as the rows hold it -> its key
        self.graphs = graphs
        self.aliases = aliases
        self.runs = root_runs(rows, items)
        self._rows = rows
        self._aliased: Optional[dict[Hashable, list[int]]] = None

    def aliased(self) -> dict[Hashable, list[int]]:
        """Root -> the rows it reaches through containers another root reached first."""
        if self._aliased is None:
            self._aliased = alias_rows(self._rows, self.aliases) if self.aliases else {}
        return self._aliased

    def holding(self) -> set:
        """The roots that reach at least one block."""
        held = {root for root, _start, _end in self.runs}
        held.update(root for root, rows in self.aliased().items() if rows)
        return set(map(self._key, held))

    def _key(self, root: Hashable) -> Hashable:
        return self.root_keys.get(root, root)

    def _parts(self, roots: set, inside: bool) -> list:
        """The keys (per run and alias) of the roots in `roots` (or, not `inside`, the others)."""
        keys = self.keys
        parts: list = [
            keys[start:end] for root, start, end in self.runs if (root in roots) == inside
        ]
        for root, rows in self.aliased().items():
            if (root in roots) == inside:
                parts.append(list(map(keys.__getitem__, rows)))
        return parts

    def keys_reached(self, roots: set, inside: bool = True, within: Optional[set] = None) -> set:
        """The blocks the roots in `roots` reach (not `inside`: the other roots), counting
        what their blocks' autograd graphs saved; with `within`, only those among it."""
        parts = self._parts(roots, inside)
        reached: set = set()
        for part in parts:
            reached.update(part if within is None else within.intersection(part))
        by_owner = self.graphs.keys_by_block
        if by_owner:
            owners: set = set()
            for part in parts:
                owners.update(by_owner.keys() & set(part))
            for owner in owners:
                for saved in self.graphs.saved_by(owner):
                    reached.update(saved if within is None else saved & within)
        return reached

    def only_through(self, roots: set) -> set:
        """The blocks reached through `roots` and no other root: what dropping them frees."""
        reached = self.keys_reached(roots)
        if reached:
            reached -= self.keys_reached(roots, inside=False, within=reached)
        return reached

    def by_root(self, named_saved: bool = True) -> dict[Hashable, set]:
        """Root -> every block it reaches (with what its graphs saved; not `named_saved`:
        without the blocks a name reaches that they saved, a model's weights say)."""
        keys = self.keys
        reach: dict = {}
        for root, start, end in self.runs:
            reach.setdefault(self._key(root), set()).update(keys[start:end])
        for root, rows in self.aliased().items():
            reach.setdefault(self._key(root), set()).update(map(keys.__getitem__, rows))
        self.graphs.add_reach(reach, named_saved)
        return reach

    def spans(self, roots: set) -> list[tuple[int, int]]:
        """The rows whose root is among `roots`, as (start, end) spans, in order."""
        return [(start, end) for root, start, end in self.runs if root in roots]

    def dropped_rows(self, roots: set) -> Optional[list[bool]]:
        """Per row, whether its root is among `roots`; None when none is."""
        chosen = self.spans(roots)
        if not chosen:
            return None
        mask = [False] * len(self.keys)
        for start, end in chosen:
            mask[start:end] = [True] * (end - start)
        return mask

    def crosses_into(self, roots: set) -> bool:
        """Whether a root not among `roots` met a container one of `roots` reached first
        (its blocks are listed under that root's path, not its own)."""
        return any(
            first in roots and root not in roots for root, _node, first, *_rest in self.aliases
        )
