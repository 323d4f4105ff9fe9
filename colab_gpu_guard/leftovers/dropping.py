"""What dropping some of a scan's roots changes, read off the scan (`gpu_reset`): the
blocks only those roots reach (what dropping them frees), the blocks released since (all
their arrays' weakrefs dead), and the list of what stays held.

That list is read off the scan instead of walking the notebook again only where a second
walk would find exactly the same references under the roots kept: the scan searched
everything; no root kept met a container that a dropped root had reached first (its
references are named under the dropped root's path); no autograd graph is measured
against a dropped name; and, after the drop, the same roots hold the same objects, no
container the drop changed was walked, and every reference kept is still alive (its
weakref). Otherwise `still_held` answers None and the caller scans again.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Iterable
from operator import itemgetter
from typing import Any, NamedTuple, Optional

from .. import notebook_refs
from ..frameworks.base import ArrayInfo
from .blocks import Blocks
from .naming import PathNames, best_paths
from .records import LeftoverList
from .scan import Scan, listed, root_entries

_STORAGE_NBYTES = itemgetter(ArrayInfo._fields.index("storage_nbytes"))
_CALL = weakref.ref.__call__
_IS_NONE = type(None).__instancecheck__  # x is None, as a C-level callable
_NO_WEAKREF = object()


class States(NamedTuple):
    """Per reference (a scan with keep_refs): its array is gone (``dead``) or proven alive
    (``alive``); neither where the array took no weakref."""

    dead: list[bool]
    alive: list[bool]


def states(scan: Scan) -> States:
    """Which of the scan's references are gone now and which are alive (their weakrefs)."""
    weaks = scan.walker.found.weaks
    if not weaks:
        unknown = [False] * len(scan.walker.found.rows)
        return States(unknown, unknown)
    if None not in weaks:
        dead = list(map(_IS_NONE, map(_CALL, weaks)))
        return States(dead, list(map(operator.not_, dead)))
    referents = [_NO_WEAKREF if weak is None else weak() for weak in weaks]
    dead = list(map(_IS_NONE, referents))
    alive = [item is not None and item is not _NO_WEAKREF for item in referents]
    return States(dead, alive)


def nbytes(scan: Scan, keys: set) -> int:
    """The bytes of these blocks (storage keys), each counted once."""
    if not keys:
        return 0
    row_keys = scan.keys
    chosen = list(map(keys.__contains__, row_keys))
    infos = scan.walker.found.infos
    sizes = dict(
        zip(
            itertools.compress(row_keys, chosen),
            map(_STORAGE_NBYTES, itertools.compress(infos, chosen)),
        )
    )
    for key, saved in scan.walker.graphs.saved.items():
        if key in keys:
            sizes.setdefault(key, saved.info.storage_nbytes)
    return sum(sizes.values())


def released(scan: Scan, now: States) -> set:
    """The blocks seen by the scan whose arrays are all gone now (proven by weakrefs)."""
    gone: set = set()
    if True in now.dead:
        keys = scan.keys
        gone.update(itertools.compress(keys, now.dead))
        gone.difference_update(itertools.compress(keys, now.alive))
    for key, saved in scan.walker.graphs.saved.items():  # weakrefs to the storages
        if saved.weak is not None and saved.weak() is None:
            gone.add(key)
    return gone


def same_roots(scan: Scan, dropped: set, shell: Any, namespace: Optional[dict]) -> bool:
    """The notebook's roots now are the scan's less `dropped`: same keys, names, objects."""
    now = [
        (key, label, id(value))
        for key, label, _holder, value, _depth in root_entries(shell, namespace)
    ]
    return now == [entry for entry in scan.roots if entry[0] not in dropped]


def walked_any(scan: Scan, objects: Iterable[Any]) -> bool:
    """Whether the walk went into any of these containers."""
    visited = scan.walker.first_visit
    return any(id(item) in visited for item in objects)


def still_held(scan: Scan, dropped: set, now: Optional[States] = None) -> Optional[LeftoverList]:
    """The list a new scan would give once the `dropped` roots are gone, read off `scan`;
    None where the two could differ (see the module docstring; the roots and the changed
    containers are the caller's to check). ``now``: the references' states after the drop
    (every reference kept must be alive); None before anything changed (a dry run)."""
    reach = scan.reach
    if not scan.complete or scan.leftovers.deep or reach.crosses_into(dropped):
        return None
    dropped_rows = reach.dropped_rows(dropped)
    if dropped_rows is not None and scan.walker.graphs.keys_by_block:
        return None  # the graphs' named blocks and owners would differ
    kept = None if dropped_rows is None else list(map(operator.not_, dropped_rows))
    if now is not None:
        alive = now.alive if kept is None else itertools.compress(now.alive, kept)
        if False in alive:
            return None
    if kept is None:
        return scan.leftovers
    part = scan.walker.found.subset(kept)
    blocks = Blocks(part, PathNames(lambda: best_paths(part.refs)))
    types = {
        label: kind
        for label, kind in scan.root_types.items()
        if notebook_refs.RootKey(notebook_refs.VARIABLE, label) not in dropped
    }
    return listed(blocks, range(len(blocks.sizes)), types, notes=scan.leftovers.notes)
