"""`Visit`: where the reference walk stands at one object (its path, depth and root)."""

from __future__ import annotations

from collections.abc import Hashable
from typing import NamedTuple

from .naming import Path

_NEW = tuple.__new__


class Visit(NamedTuple):
    """The path from the root to the object visited (`naming.Path`), how many containers
    deep it lies, who holds the root (a `units` holder label) and the root's key (as a
    `rows.Row` holds it). An array recorded is recorded at its visit."""

    path: Path
    depth: int
    holder: str
    root: Hashable

    def child(self, kind: int, key: object) -> Visit:
        """What this object holds under ``(kind, key)``, a container deeper."""
        return _NEW(Visit, ((self.path, kind, key), self.depth + 1, self.holder, self.root))

    def within(self, kind: int, key: object) -> Visit:
        """A part of this object that is no container of its own (a module's parameter
        table, an ``lru_cache``'s results): its path, at this object's depth."""
        return _NEW(Visit, ((self.path, kind, key), self.depth, self.holder, self.root))
