"""Is an object unreachable garbage the collector has not freed yet (a reference cycle, such
as a module that hooks its own bound method)? Told the way the collector tells it, without
collecting: every reference to the object and to what refers to it, transitively, comes
from within that group (see docs/cells.md, "Unreachable reference cycles")."""

from __future__ import annotations

import gc
import sys
import time
import types
import weakref
from typing import Any

MAX_MEMBERS = 4096  # objects referring to it, transitively, before it counts as reachable
MAX_PASSES = 32  # rounds of gc.get_referrers (each a pass over every tracked object)
BUDGET_S = 0.5  # the reading gives up (cannot tell) after this long
_ROOTS = (types.ModuleType, types.FrameType)


def _counted(members: dict) -> dict:
    """{id: references to it} of `members`, each read alike (so the references this
    reading adds are the same for each)."""
    counts = {}
    for key in members:
        counts[key] = sys.getrefcount(members[key])
    return counts


def _arguments(item: Any, frontier: list) -> bool:
    """`item` is the tuple of arguments gc.get_referrers was called with."""
    return (
        type(item) is tuple
        and len(item) == len(frontier)
        and all(one is other for one, other in zip(item, frontier))
    )


def unreachable(ref: weakref.ref) -> bool:
    """Whether the object `ref` refers to is alive only through reference cycles no root
    reaches: the group of objects that refer to it, transitively, is closed (no module,
    no frame, at most `MAX_MEMBERS`), and every reference to each of them comes from
    within the group. Reads the collector's view only: no user code runs, nothing is
    collected; False where it cannot tell."""
    members: dict[int, Any] = {}
    target = ref()
    if target is None or not gc.is_tracked(target):
        return False
    members[id(target)] = target
    del target
    own = {id(members)}
    frontier: list = list(members.values())
    own.add(id(frontier))
    deadline = time.perf_counter() + BUDGET_S
    for _round in range(MAX_PASSES):
        if time.perf_counter() > deadline:
            return False
        referrers = gc.get_referrers(*frontier)
        own.add(id(referrers))
        found: list = []
        own.add(id(found))
        for item in referrers:
            key = id(item)
            if key in members or key in own or _arguments(item, frontier):
                continue
            if type(item) is types.FrameType and item is sys._getframe():
                continue  # this reading's own frame (kept in no variable: no cycle)
            if isinstance(item, _ROOTS) or len(members) >= MAX_MEMBERS:
                return False
            members[key] = item
            found.append(item)
        item = referrers = None
        frontier = found
        own.add(id(frontier))
        if not frontier:
            break
    else:
        return False
    del frontier, found
    # references each member gets from the group itself, as the collector counts them
    inside = dict.fromkeys(members, 0)
    for key in members:
        for referent in gc.get_referents(members[key]):
            if id(referent) in inside:
                inside[id(referent)] += 1
    referent = None
    probe = {0: object()}
    extra = _counted(probe)[0] - 1  # this reading's own references; the dict holds one
    counts = _counted(members)
    return all(counts[key] - extra - 1 <= inside[key] for key in members)
