"""Whether a batch of objects holds nothing the walk could record, decided in C a level at
a time (plain data skipped in bulk)."""

from __future__ import annotations

from gc import get_referents

from .kinds import ATOMIC, ROWS_OF_PLAIN


def all_plain(items, depth: int, max_depth: int, rows: bool = False) -> bool:
    """True when ``items`` (visited at ``depth``) are plain values, or exact lists, tuples
    and dicts that hold only such, down to where the walk stops (``max_depth``).
    ``rows``: the caller knows every item is a plain value or an exact list, tuple or dict
    (their types are not looked at again)."""
    level = items
    if rows:
        if depth >= max_depth:
            return True
        depth += 1
        level = get_referents(*level)
    while True:
        present = set(map(type, level))
        if present <= ATOMIC:
            return True
        if not present <= ROWS_OF_PLAIN:
            return False  # an array, an object, a subclass: the walk looks closer
        if depth >= max_depth:
            return True  # the walk does not open containers this deep
        depth += 1
        level = get_referents(*level)  # plain values have no referents
