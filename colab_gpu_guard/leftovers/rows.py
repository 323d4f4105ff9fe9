"""The rows a walk records, one per path to an array: `Row`'s layout and its getters, and
`Items`, the one row the items of a container recorded in bulk share."""

from __future__ import annotations

import itertools
from collections.abc import Hashable
from operator import itemgetter
from typing import Any, NamedTuple

from .naming import ITEM


class Row(NamedTuple):
    """Where an array was found: its path, who holds the root, the root (its key as a
    plain tuple: `Walker.root_keys` maps it back), how deep below it, and the array's
    framework.

    The walk records rows as plain tuples in this layout (a NamedTuple per reference would
    cost a Python call each in the hot loop); read them with the getters below, or unpack
    them as ``path, holder, root, depth, framework = row``. Plain tuples of plain values:
    the cyclic collector stops tracking them after its first pass (a notebook may hold
    10^6 arrays; every later collection would go over each row otherwise).
    """

    path: tuple
    holder: str
    root: Hashable
    depth: int
    framework: str


class Items:
    """The path in the one row that the `count` items of a container recorded in bulk
    share (`Walker._record_items`: a list of 10^6 tensors): item i's path is ``(parent,
    ITEM, i)`` and its row is the one at ``start + i`` of its list (`Found.path` and
    `Found.paths` give the paths). 10^6 rows and paths made per item would be 2x10^6 tuples
    that ``gpu_reset``'s gc.collect() goes over while the scan is held; the paths are made
    when names are (for the entries shown), the rows not at all. Not a tuple: code reading
    a row's path without `Found` fails rather than names something else."""

    __slots__ = ("parent", "start", "count")

    def __init__(self, parent: tuple, start: int, count: int) -> None:
        self.parent = parent
        self.start = start  # in the list its rows are in (pending, then rows)
        self.count = count

    def paths(self, start: int, end: int):
        """The paths of items ``start`` to ``end`` (lazily, in C)."""
        return zip(itertools.repeat(self.parent), itertools.repeat(ITEM), range(start, end))


def real_path(path: Any, index: int) -> tuple:
    """The path of the row at `index` of its list, whose path field is `path`."""
    if type(path) is Items:
        return (path.parent, ITEM, index - path.start)
    return path


def expanded(rows: list, runs: list[Items]) -> list[tuple]:
    """`rows` with the rows of each run (`Items`, in order) made one per item."""
    if not runs:
        return rows
    made: list = []
    at = 0
    for run in runs:
        made += rows[at : run.start]
        _items, holder, root, depth, framework = rows[run.start]
        made += zip(
            run.paths(0, run.count),
            itertools.repeat(holder),
            itertools.repeat(root),
            itertools.repeat(depth),
            itertools.repeat(framework),
        )
        at = run.start + run.count
    made += rows[at:]
    return made


# a Row-layout tuple's fields, read in C
ROW_PATH = itemgetter(Row._fields.index("path"))
ROW_HOLDER = itemgetter(Row._fields.index("holder"))
ROW_ROOT = itemgetter(Row._fields.index("root"))
ROW_DEPTH = itemgetter(Row._fields.index("depth"))
ROW_FRAMEWORK = itemgetter(Row._fields.index("framework"))


def frameworks_of(rows: list, runs: list[Items]) -> set[str]:
    """The frameworks of `rows`; the rows of each of `runs` (in order) are one row, read once."""
    found: set[str] = set()
    at = 0
    for run in runs:
        found.update(map(ROW_FRAMEWORK, rows[at : run.start + 1]))
        at = run.start + run.count
    found.update(map(ROW_FRAMEWORK, rows[at:]))
    return found
