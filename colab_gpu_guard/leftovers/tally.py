"""Which group each block belongs to (`root_labels`, from the group of the root its path
starts at) and what each group counts (`tally_roots`), worked per run of one root. See
docs/leftovers.md."""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import compress, islice, repeat
from operator import is_not, itemgetter, ne
from typing import TYPE_CHECKING, Callable, Optional

from .root_refs import RootRef
from .rows import ROW_HOLDER, ROW_PATH, Items

if TYPE_CHECKING:
    from .groups import Blocks

# worked per run when the column has at most one run per this many blocks
BLOCKS_PER_RUN = 8
SAMPLE = 4096  # blocks looked at first, to tell many runs without a pass over them all
LIFTS = 2  # levels up the path a column of parents is lifted to find runs (`d[k][i][0]`)

_PARENT = itemgetter(0)
_KEY = itemgetter(2)

Groups = dict[tuple[str, str], RootRef]  # (a root's label, its holder) -> its group


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


def root_of_path(path: tuple, holder: str, groups: Groups) -> RootRef:
    """The group of the root a path (a walk's linked ``(parent, kind, key)`` tuple) starts
    at; `holder` holds that root."""
    node = path
    while node[0] is not None:
        node = node[0]
    return groups[(node[2], holder)]


def root_of_row(row: tuple, groups: Groups) -> RootRef:
    """The group of the root a found row's path starts at (`root_of_path`)."""
    path = ROW_PATH(row)
    if type(path) is Items:  # its items' paths start where its container's does
        path = path.parent
    return root_of_path(path, ROW_HOLDER(row), groups)


def root_labels(paths: Iterable[tuple], holders: Sequence[str], groups: Groups) -> list[str]:
    """The group of each path (a walk's linked ``(parent, kind, key)`` tuple) held by
    `holders`: that of the root it starts at (`groups`); worked out once per parent node
    (a list's items share one), and per run of one parent where parents come in runs, or
    where their parents (or theirs) do: a node lifted to its parent keeps its root."""
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
        return _labels_per_path(paths, parents, holders, groups)
    ends = starts[1:] + [len(parents)]
    last: dict[int, tuple] = {}  # id(parent) -> (parent, holder of its last path)
    for start, end in zip(starts, ends):
        parent = parents[start]
        last[id(parent)] = (parent, holders[end - 1])
    label_of = _parent_labels(last, groups)
    labels: list[str] = []
    for start, end in zip(starts, ends):
        parent = parents[start]
        if parent is None:  # the root itself is the array
            labels += (
                groups[(key, holder)].name
                for key, holder in zip(map(_KEY, paths[start:end]), holders[start:end])
            )
        else:
            labels += repeat(label_of[id(parent)], end - start)
    return labels


def _labels_per_path(
    paths: list, parents: list, holders: Sequence[str], groups: Groups
) -> list[str]:
    """`root_labels` worked per path (the parents change too often for runs)."""
    keys = list(map(id, parents))
    label_of = _parent_labels(dict(zip(keys, zip(parents, holders))), groups)
    labels = list(map(label_of.get, keys))
    for position in compress(range(len(keys)), map(id(None).__eq__, keys)):
        # the root itself is the array
        labels[position] = groups[(paths[position][2], holders[position])].name
    return labels  # type: ignore[return-value]


def _parent_labels(parents: dict[int, tuple], groups: Groups) -> dict[int, str]:
    """id(parent) -> its root's group, for ``{id(parent): (parent, holder of its last
    path)}``."""
    label_of: dict[int, str] = {}
    for key, (parent, holder) in parents.items():
        if parent is not None:
            label_of[key] = root_of_path(parent, holder, groups).name
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


def tally_roots(blocks: Blocks, wanted: Optional[int]) -> Tally:
    """Each root's holder (that of its first block), block count, bytes, devices (in the
    order first met) and the positions of its first `wanted` blocks (None: all); roots in
    the order first met."""
    roots, sizes, holders, devices = blocks.roots, blocks.sizes, blocks.holders, blocks.devices
    starts = run_starts(roots)
    if starts is None:
        return _tally_per_block(blocks, wanted)
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


def _tally_per_block(blocks: Blocks, wanted: Optional[int]) -> Tally:
    """`tally_roots` worked per block (roots interleaved: too many runs)."""
    roots, sizes, holders, devices = blocks.roots, blocks.sizes, blocks.holders, blocks.devices
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
