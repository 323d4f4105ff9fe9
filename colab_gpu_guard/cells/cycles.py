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
from typing import Any, Callable, Optional

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


def _referrers(target: Any) -> Optional[dict]:
    """{id: object} of `target` and every object that refers to it, transitively; None
    where a module or a frame is among them, or they are too many to read."""
    members: dict[int, Any] = {id(target): target}
    own = {id(members)}
    frontier: list = [target]
    own.add(id(frontier))
    deadline = time.perf_counter() + BUDGET_S
    for _round in range(MAX_PASSES):
        if time.perf_counter() > deadline:
            return None
        referrers = gc.get_referrers(*frontier)
        own.add(id(referrers))
        found: list = []
        own.add(id(found))
        for item in referrers:  # read by their types alone: no user code runs
            key = id(item)
            if key in members or key in own or _arguments(item, frontier):
                continue
            if type(item) is types.FrameType and item is sys._getframe():
                continue  # this reading's own frame (kept in no variable: no cycle)
            if issubclass(type(item), _ROOTS) or len(members) >= MAX_MEMBERS:
                return None
            members[key] = item
            found.append(item)
        item = referrers = None
        frontier = found
        own.add(id(frontier))
        if not frontier:
            return members
    return None


def _referents(members: dict, more: Callable[[Any], bool]) -> None:
    """Add to `members` what they refer to, transitively, where `more` says an object is
    worth following (at most `MAX_MEMBERS` in all)."""
    frontier = list(members.values())
    while frontier and len(members) < MAX_MEMBERS:
        found = []
        for item in gc.get_referents(*frontier):
            key = id(item)
            if key not in members and more(item):
                members[key] = item
                found.append(item)
        frontier = found


def _held_from_outside(members: dict) -> list:
    """The ids of `members` some reference from outside them keeps alive: the roots, as
    the collector finds them (references from members, by the collector's own traversal,
    set against each one's reference count, less the reading's own)."""
    inside = dict.fromkeys(members, 0)
    for key in members:
        for referent in gc.get_referents(members[key]):
            if id(referent) in inside:
                inside[id(referent)] += 1
    referent = None
    probe = {0: object()}
    extra = _counted(probe)[0] - 1  # this reading's own references; the dict holds one
    counts = _counted(members)
    return [key for key in members if counts[key] - extra - 1 > inside[key]]


def unreachable(ref: weakref.ref) -> bool:
    """Whether the object `ref` refers to is alive only through reference cycles no root
    reaches: the group of objects that refer to it, transitively, is closed (no module,
    no frame, at most `MAX_MEMBERS`), and every reference to each of them comes from
    within the group. Reads the collector's view only: no user code runs, nothing is
    collected; False where it cannot tell."""
    target = ref()
    if target is None or not gc.is_tracked(target):
        return False
    members = _referrers(target)
    del target
    return members is not None and not _held_from_outside(members)


def dying_with(ref: weakref.ref, keep: Callable[[Any], bool]) -> Optional[list]:
    """The objects `keep` picks (arrays) that a collection would free with the object
    `ref` refers to, where that object is unreachable (`unreachable`); None where it is
    not, or cannot be told. What the group refers to is followed down to `MAX_MEMBERS` objects
    (not into modules, classes, functions: they outlive it), and what the collector
    would free of them is what no reference from outside keeps alive, directly or
    through the others."""
    target = ref()
    if target is None or not gc.is_tracked(target):
        return None
    members = _referrers(target)
    del target  # only `members` holds it while the references to it are counted
    if members is None or _held_from_outside(members):
        return None
    _referents(members, lambda item: _followed(item) or keep(item))
    alive: set = set()
    frontier = [members[key] for key in _held_from_outside(members)]
    alive.update(map(id, frontier))
    while frontier:
        found = []
        for item in gc.get_referents(*frontier):
            key = id(item)
            if key in members and key not in alive:
                alive.add(key)
                found.append(item)
        frontier = found
    return [item for key, item in members.items() if key not in alive and keep(item)]


_NOT_FOLLOWED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType)


def _followed(item: Any) -> bool:
    return gc.is_tracked(item) and not issubclass(type(item), _NOT_FOLLOWED)


def held_under(value: Any, keep: Callable[[Any], bool]) -> list:
    """The objects `keep` picks (arrays) among what `value` refers to, transitively (not
    into modules, classes, functions; at most `MAX_MEMBERS` objects): what a rerun's new
    object holds, beside what its old one, unreachable, held."""
    members: dict[int, Any] = {id(value): value}
    _referents(members, lambda item: _followed(item) or keep(item))
    return [item for item in members.values() if keep(item)]
