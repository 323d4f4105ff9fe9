"""Which group each block belongs to (`root_of`, `root_labels`) and what each group counts
(`tally_roots`), worked per run of one root. See docs/leftovers.md."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import is_not, itemgetter, ne
from typing import Callable, Optional

from ..units import OUTPUT_HISTORY, TRACEBACK_FRAME, USER_VARIABLE

UNNAMED = "<no name>"  # the group of a deep scan's unnamed blocks
# worked per run when the column has at most one run per this many blocks
BLOCKS_PER_RUN = 8
SAMPLE = 4096  # blocks looked at first, to tell many runs without a pass over them all
LIFTS = 2  # levels up the path a column of parents is lifted to find runs (`d[k][i][0]`)

_VARIABLE_ROOT = re.compile(r"Out\[-?\d+\]|[^.\[{]+")
_OUTPUT_ROOT = re.compile(
    r"Out\[-?\d+\]|_+|_\d+|<displayhook\..*|<user_ns_hidden.*|<last cell result>"
)
_PARENT = itemgetter(0)
_KEY = itemgetter(2)


def root_of(name: str, holder: Optional[str] = None) -> str:
    """The group of a leftover's name: ``model.0.weight`` -> ``model``, ``Out[3][0]`` ->
    ``Out[3]``, ``<traceback: f() local 'x'>[0]`` -> ``<traceback: f() local 'x'>``,
    ``<exception E>.args[0]`` -> ``<exception E>``, every ``<unnamed ...>`` -> UNNAMED.
    A user variable's name is never read as one of those labels (``<b>`` is a name); a
    dict's key belongs to the dict's root, whoever holds it (``<key of opt.state>`` ->
    ``opt``)."""
    if name.startswith("<"):
        label = _label(name)
        if name.startswith("<key of ") and label.endswith(">"):  # `<key of opt.state>.grad`
            return root_of(label[len("<key of ") : -1], holder)
        if holder != USER_VARIABLE:
            return UNNAMED if name.startswith("<unnamed") else label
    match = _VARIABLE_ROOT.match(name)
    return match.group(0) if match else name


def _label(name: str) -> str:
    """The leading ``<...>`` of a name, nested brackets included."""
    depth = 0
    for index, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
            if depth == 0:
                return name[: index + 1]
    return name


def holder_of_root(root: str) -> str:
    """The holder of a root known only by name (one that owns no block)."""
    if _OUTPUT_ROOT.fullmatch(root):
        return OUTPUT_HISTORY
    if root.startswith("<traceback") or root.startswith("<debugger"):
        return TRACEBACK_FRAME
    if root.startswith("<"):
        return "other"
    return USER_VARIABLE


def run_starts(
    column: Sequence, differ: Callable[[object, object], bool] = ne
) -> Optional[list[int]]:
    """Where each run of neighbours that do not `differ` starts in `column` (0 first), or
    None where there are more runs than one per BLOCKS_PER_RUN blocks: in its first
    SAMPLE blocks (a look that costs next to nothing), or in all (the search stops
    there). ``ne``: runs of equal values (strings); ``is_not``: runs of one object."""
    count = len(column)
    if not count:
        return []
    if differ is ne and _one_value(column):
        return [0]
    if (
        differ is is_not
        and column[-1] is column[0]
        and not any(map(is_not, islice(column, 1, None), column))
    ):
        return [0]
    head = min(count, SAMPLE)
    if sum(map(differ, islice(column, 1, head), column)) + 1 > max(1, head // BLOCKS_PER_RUN):
        return None
    most = max(1, count // BLOCKS_PER_RUN)
    starts = [0]
    starts += islice(compress(range(1, count), map(differ, islice(column, 1, None), column)), most)
    return None if len(starts) > most else starts


def _one_value(column: Sequence) -> bool:
    """Whether every value in `column` equals the first (strings), seen in C: list.count
    compares at identity speed, after a look at the first and last SAMPLE values."""
    if not column:
        return False
    first = column[0]
    head, tail = column[:SAMPLE], column[-SAMPLE:]
    return (
        head.count(first) == len(head)
        and tail.count(first) == len(tail)
        and column.count(first) == len(column)
    )


def root_labels(paths: Iterable[tuple], holders: Sequence[str]) -> list[str]:
    """The group of each path (a walk's linked ``(parent, kind, key)`` tuple) held by
    `holders`: a user variable's root label, or another root's label through `root_of`;
    worked out once per parent node (a list's items share one), and per run of one parent
    where parents come in runs, or where their parents (or theirs) do: a node lifted to its
    parent keeps its root."""
    paths = paths if isinstance(paths, list) else list(paths)
    parents = list(map(_PARENT, paths))
    starts = run_starts(parents, is_not)
    for _ in range(LIFTS):
        if starts is not None:
            break
        # `pairs[i][0]`: each pair is its own parent, but their parents are one list
        lifted = [node if node is None or node[0] is None else node[0] for node in parents]
        if not any(map(is_not, lifted, parents)):
            break  # every node is a root's or an array's own: nothing above to share
        parents = lifted
        starts = run_starts(parents, is_not)
    if starts is None:
        return _labels_per_path(paths, parents, holders)
    ends = starts[1:] + [len(parents)]
    last: dict[int, tuple] = {}  # id(parent) -> (parent, holder of its last path)
    for start, end in zip(starts, ends):
        parent = parents[start]
        last[id(parent)] = (parent, holders[end - 1])
    label_of = _parent_labels(last)
    labels: list[str] = []
    for start, end in zip(starts, ends):
        parent = parents[start]
        if parent is None:  # the root itself is the array
            labels += map(root_of, map(_KEY, paths[start:end]), holders[start:end])
        else:
            labels += repeat(label_of[id(parent)], end - start)
    return labels


def _labels_per_path(paths: list, parents: list, holders: Sequence[str]) -> list[str]:
    """`root_labels` worked per path (the parents change too often for runs)."""
    keys = list(map(id, parents))
    label_of = _parent_labels(dict(zip(keys, zip(parents, holders))))
    labels = list(map(label_of.get, keys))
    for position in compress(range(len(keys)), map(id(None).__eq__, keys)):
        # the root itself is the array
        labels[position] = root_of(paths[position][2], holders[position])
    return labels  # type: ignore[return-value]


def _parent_labels(parents: dict[int, tuple]) -> dict[int, str]:
    """id(parent) -> its root's label, for ``{id(parent): (parent, holder of its last
    path)}`` in the order first met: a label is read (`root_of`) with the holder of the
    first parent under it."""
    by_label: dict[str, str] = {}
    label_of: dict[int, str] = {}
    for key, (parent, holder) in parents.items():
        if parent is None:
            continue
        node = parent
        while node[0] is not None:
            node = node[0]
        root = by_label.get(node[2])
        if root is None:
            root = by_label[node[2]] = root_of(node[2], holder)
        label_of[key] = root
    return label_of


@dataclass(slots=True)
class RootTally:
    """What one group counts: its holder (that of its first block), its blocks, their
    bytes, their devices (a dict as an ordered set, in the order first met) and the
    positions of the blocks it lists."""

    holder: str
    count: int = 0
    nbytes: int = 0
    devices: dict[str, None] = field(default_factory=dict)
    positions: list[int] = field(default_factory=list)


Tally = dict[str, RootTally]  # root -> its tally, roots in the order first met


def tally_roots(
    roots: Sequence[str],
    sizes: Sequence[int],
    holders: Sequence[str],
    devices: Sequence[str],
    wanted: Optional[int],
) -> Tally:
    """Each root's holder (that of its first block), block count, bytes, devices (in the
    order first met) and the positions of its first `wanted` blocks (None: all); roots in
    the order first met."""
    starts = run_starts(roots)
    if starts is None:
        return _tally_per_block(roots, sizes, holders, devices, wanted)
    tally: Tally = {}
    for start, end in zip(starts, starts[1:] + [len(roots)]):
        root = roots[start]
        row = tally.get(root)
        if row is None:
            row = tally[root] = RootTally(holders[start])
        row.count += end - start
        row.nbytes += sum(sizes[start:end])
        seen = devices[start:end]
        if seen.count(seen[0]) == len(seen):  # one device (in C, at identity speed)
            row.devices[seen[0]] = None
        else:
            row.devices.update(dict.fromkeys(seen))
        positions = row.positions
        more = end - start if wanted is None else wanted - len(positions)
        if more > 0:
            positions += range(start, min(end, start + more))
    return tally


def _tally_per_block(
    roots: Sequence[str],
    sizes: Sequence[int],
    holders: Sequence[str],
    devices: Sequence[str],
    wanted: Optional[int],
) -> Tally:
    """`tally_roots` worked per block (roots interleaved: too many runs)."""
    counts = collections.Counter(roots)
    totals = dict.fromkeys(counts, 0)
    for root, size in zip(roots, sizes):
        totals[root] += size
    if _one_value(devices):  # one device: no (root, device) pairs
        seen = {root: {devices[0]: None} for root in counts}
    else:
        seen = {root: {} for root in counts}
        for root, device in dict.fromkeys(zip(roots, devices)):
            seen[root][device] = None
    first = dict(zip(reversed(roots), range(len(roots) - 1, -1, -1)))  # first position
    tally: Tally = {}
    for root in sorted(first, key=first.__getitem__):
        count = counts[root]
        if wanted is None or wanted >= count:
            positions = list(compress(range(len(roots)), map(root.__eq__, roots)))
        else:
            start = first[root]
            positions = list(
                islice(
                    compress(
                        range(start, len(roots)), map(root.__eq__, islice(roots, start, None))
                    ),
                    wanted,
                )
            )
        tally[root] = RootTally(holders[first[root]], count, totals[root], seen[root], positions)
    return tally
