"""The references a walk found, one per path to an array, in the order found: each path's
`Row` and the array's `ArrayInfo` (read in bulk when the walk is done: torch's in one
C-level pass per attribute), its id() and, when asked, a weakref; `Ref` joins them."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Hashable
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple, Optional

from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo
from .kinds import Kind


class Row(NamedTuple):
    """Where an array was found: its path, who holds the root, the root's key, how deep
    below it, and the array type's `Kind`.

    The walk records rows as plain tuples in this layout (a NamedTuple per reference would
    cost a Python call each in the hot loop); read them with the getters below, or unpack
    them as ``path, holder, root, depth, kind = row``.
    """

    path: tuple
    holder: str
    root: Hashable
    depth: int
    kind: Kind


class Ref(NamedTuple):
    """One path from a root to an array: its row, its place in the order found, and the
    array's metadata, id() (valid while the scan runs) and weakref (or None)."""

    path: tuple
    holder: str
    root: Hashable
    depth: int
    order: int
    framework: str
    info: ArrayInfo
    weak: Optional[weakref.ref]
    ident: int

    @property
    def key(self) -> Hashable:
        return self.info.storage_key

    @property
    def device(self) -> str:
        return self.info.device

    @property
    def storage_nbytes(self) -> int:
        return self.info.storage_nbytes


# a Row-layout tuple's fields, read in C
ROW_PATH = itemgetter(Row._fields.index("path"))
ROW_HOLDER = itemgetter(Row._fields.index("holder"))
ROW_ROOT = itemgetter(Row._fields.index("root"))
ROW_DEPTH = itemgetter(Row._fields.index("depth"))
ROW_KIND = itemgetter(Row._fields.index("kind"))
# Refs are made from plain tuples in bulk: tuple.__new__(Ref, values) in C, where Ref(...)
# would be a Python call per reference.
_NEW_TUPLE = tuple.__new__
_FRAMEWORK = attrgetter("framework")


def _weak(array: Any) -> Optional[weakref.ref]:
    try:
        return weakref.ref(array)
    except TypeError:
        return None


def _weaks(arrays: list) -> list[Optional[weakref.ref]]:
    """A weakref to each array (None where its type takes none), made in C when all do."""
    try:
        return list(map(weakref.ref, arrays))
    except TypeError:
        return [_weak(array) for array in arrays]


def _info_or_none(info_of, array: Any) -> Optional[ArrayInfo]:
    try:
        return info_of(array)
    except Exception:
        return None


def _bulk_infos(arrays: list, rows: list[tuple]) -> list[Optional[ArrayInfo]]:
    """``info_of(array)`` for every recorded array (None where it failed), in order; torch
    tensors' metadata in one C-level pass per attribute (``torch_support.array_infos``)."""
    kinds = set(map(ROW_KIND, rows))
    kind = next(iter(kinds)) if len(kinds) == 1 else Kind(-1)
    if kind.framework == "torch" and kind.info_of is torch_support.array_info:
        try:
            return torch_support.array_infos(arrays)
        except Exception:
            pass
    infos_of = map(attrgetter("info_of"), map(ROW_KIND, rows))
    return list(map(_info_or_none, infos_of, arrays))


class Found:
    """``rows[i]`` is where reference i was found (a `Row`-layout tuple), ``infos[i]`` its
    array's metadata, ``idents[i]`` the array's id() and ``weaks[i]`` a weakref to it
    (keep_refs only).
    Arrays wait in ``pending`` (their rows, as plain tuples, in ``pending_rows``) until
    ``finish()`` reads their metadata in bulk; ``refs`` builds the `Ref`s on demand."""

    def __init__(self, keep_refs: bool = False) -> None:
        self.keep_refs = keep_refs
        self.rows: list[tuple] = []  # Row layout
        self.infos: list[ArrayInfo] = []
        self.idents: list[int] = []
        self.weaks: list = []
        self.pending: list = []  # arrays awaiting metadata (strong refs until finish())
        self.pending_rows: list[tuple] = []  # Row layout
        self._refs: list[Ref] = []

    def finish(self) -> None:
        """Read the metadata of the arrays recorded since the last call; drop the arrays."""
        arrays, rows = self.pending, self.pending_rows
        if not arrays:
            return
        try:
            infos = _bulk_infos(arrays, rows)
            idents = list(map(id, arrays))
            weaks = _weaks(arrays) if self.keep_refs else []
            if None in infos:  # arrays whose metadata could not be read are left out
                kept = [info is not None for info in infos]
                rows = list(itertools.compress(rows, kept))
                infos = list(itertools.compress(infos, kept))
                idents = list(itertools.compress(idents, kept))
                weaks = list(itertools.compress(weaks, kept))
            self.rows += rows
            self.infos += infos  # type: ignore[arg-type]
            self.idents += idents
            self.weaks += weaks
        finally:
            # never keep an array alive past the scan; the lists stay (the walk appends to them)
            del arrays[:]
            del self.pending_rows[:]

    def subset(self, kept: list[bool]) -> Found:
        """The references where ``kept`` is True, in the order found (``finish()`` done)."""
        part = Found(self.keep_refs)
        part.rows = list(itertools.compress(self.rows, kept))
        part.infos = list(itertools.compress(self.infos, kept))
        part.idents = list(itertools.compress(self.idents, kept))
        part.weaks = list(itertools.compress(self.weaks, kept))
        return part

    @property
    def refs(self) -> list[Ref]:
        """One Ref per reference found, in the order found (built on first use)."""
        built = self._refs
        start = len(built)
        if start < len(self.rows):
            weaks = self.weaks if self.keep_refs else itertools.repeat(None)
            rows = self.rows[start:]
            built += map(
                _NEW_TUPLE,
                itertools.repeat(Ref),
                zip(
                    map(ROW_PATH, rows),
                    map(ROW_HOLDER, rows),
                    map(ROW_ROOT, rows),
                    map(ROW_DEPTH, rows),
                    itertools.count(start),
                    map(_FRAMEWORK, map(ROW_KIND, rows)),
                    self.infos[start:],
                    itertools.islice(weaks, start, None),
                    self.idents[start:],
                ),
            )
        return built
