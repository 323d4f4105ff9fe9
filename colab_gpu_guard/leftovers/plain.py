"""Whether a batch of objects holds nothing the walk could record, decided in C a level at
a time (plain data skipped in bulk)."""

from __future__ import annotations

from gc import get_referents

from .kinds import ATOMIC, ROWS_OF_PLAIN

# Levels of nested lists, tuples and dicts looked into in bulk. Past them (or in a cycle of
# such containers) the answer is "not plain", and the walk meets them one by one: it says
# where its own depth limit stopped it, so nothing deep is passed over unsaid.
LEVELS = 32


def all_plain(items, rows: bool = False) -> bool:
    """True when ``items`` are plain values, or exact lists, tuples and dicts that hold
    only such (at most `LEVELS` deep). ``rows``: the caller knows every item is a plain
    value or an exact list, tuple or dict (their types are not looked at again)."""
    level = get_referents(*items) if rows else items
    for _level in range(LEVELS):
        present = set(map(type, level))
        if present <= ATOMIC:
            return True
        if not present <= ROWS_OF_PLAIN:
            return False  # an array, an object, a subclass: the walk looks closer
        level = get_referents(*level)  # plain values have no referents
    return False
