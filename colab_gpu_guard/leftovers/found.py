"""The references a walk found, one per path to an array, in the order found: each path's
`Row` and the array's `ArrayInfo` (read in bulk when the walk is done: torch's in one
C-level pass per attribute), its id() and, when asked, a weakref; `Ref` joins them. The
items of a container recorded in bulk share one row (`Items`)."""

from __future__ import annotations

import functools
import itertools
import weakref
from collections.abc import Callable, Hashable
from operator import itemgetter
from typing import Any, NamedTuple, Optional

from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo
from . import arrow
from .naming import DOT, ITEM


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


def _frameworks(rows: list, runs: list[Items]) -> set[str]:
    """The frameworks of `rows`; the rows of each of `runs` (in order) are one row, read once."""
    found: set[str] = set()
    at = 0
    for run in runs:
        found.update(map(ROW_FRAMEWORK, rows[at : run.start + 1]))
        at = run.start + run.count
    found.update(map(ROW_FRAMEWORK, rows[at:]))
    return found


# Refs are made from plain tuples in bulk: tuple.__new__(Ref, values) in C, where Ref(...)
# would be a Python call per reference.
_NEW_TUPLE = tuple.__new__


def _weak(array: Any, callback: Callable) -> Optional[weakref.ref]:
    try:
        return weakref.ref(array, callback)
    except TypeError:
        return None


def _weaks(arrays: list, callback: Callable) -> list[Optional[weakref.ref]]:
    """A weakref to each array that calls ``callback`` when the array goes (None where
    its type takes no weakref), made in C when all take one."""
    try:
        return list(map(weakref.ref, arrays, itertools.repeat(callback)))
    except TypeError:
        return [_weak(array, callback) for array in arrays]


def _info_or_none(info_of, array: Any) -> Optional[ArrayInfo]:
    try:
        return info_of(array)
    except Exception:  # a framework's reader on a user's array
        return None


def _bulk_columns(
    arrays: list,
    rows: list[tuple],
    readers: dict[str, Callable[[Any], ArrayInfo]],
    frameworks: Optional[set] = None,
) -> tuple[list, Optional[list[bool]], bool]:
    """The metadata of every recorded array (``readers``: its framework's ``info_of``), as
    columns in `ArrayInfo`'s field order, which arrays those are (None: all; the others'
    metadata could not be read), and whether they were read one by one (else: torch
    tensors' in one C-level pass per attribute, ``torch_support.array_columns``, which
    fails on any unusual tensor, a sparse one included). ``frameworks``: the rows'
    frameworks, where the caller has them."""
    if frameworks is None:
        frameworks = set(map(ROW_FRAMEWORK, rows))
    if frameworks == {"torch"} and readers.get("torch") is torch_support.array_info:
        try:
            return list(torch_support.array_columns(arrays)), None, False
        except Exception:  # torch's bulk reader: any unusual tensor (sparse, meta, subclass)
            pass
    infos_of = map(readers.__getitem__, map(ROW_FRAMEWORK, rows))
    infos = list(map(_info_or_none, infos_of, arrays))
    kept = None
    if None in infos:
        kept = [info is not None for info in infos]
        infos = list(itertools.compress(infos, kept))
    columns = [list(column) for column in zip(*infos)] if infos else [[] for _ in _FIELDS]
    return columns, kept, True


def _arrow_parts(
    arrays: list, rows: list[tuple], frameworks: set
) -> Optional[tuple[list, list, list]]:
    """Where Arrow data is among `arrays` (framework "arrow"), the arrays and rows again
    with its buffers in its place (each a block: `arrow.buffer_parts`), and the owner of
    each (the Arrow object for a buffer: a new object each time it is read, a buffer
    lives as long as its owner keeps it); None where there is none."""
    if arrow.FRAMEWORK not in frameworks:
        return None
    new_arrays, new_rows, owners = [], [], []
    for array, row in zip(arrays, rows):
        if ROW_FRAMEWORK(row) != arrow.FRAMEWORK:
            new_arrays.append(array)
            new_rows.append(row)
            owners.append(array)
            continue
        path, holder, root, depth, framework = row
        try:
            parts = arrow.buffer_parts(array, path)
        except Exception:  # pyarrow's readers on a user's Arrow object
            parts = []
        for part_path, part in parts:
            new_arrays.append(part)
            new_rows.append((part_path, holder, root, depth, framework))
            owners.append(array)
    return new_arrays, new_rows, owners


def _sparse_parts(
    arrays: list,
    rows: list[tuple],
    keys: list,
    kept: Optional[list[bool]],
    owned_by: Optional[list] = None,
) -> Optional[tuple[list, list, list]]:
    """Where sparse tensors are among `arrays` (their keys are their own: ``("tensor",
    id)``), the arrays and rows again with each one's component tensors in its place
    (``sp._indices()``, ``sp._values()``: a name may hold them too, and their memory is
    counted once then), and the owner of each array (the sparse tensor for a component;
    ``owned_by[i]`` for array i where given); None where there is none."""
    if not any(type(key) is tuple and key[0] == "tensor" for key in keys):
        return None
    indices = range(len(arrays)) if kept is None else itertools.compress(range(len(arrays)), kept)
    sparse = {}
    for index, key in zip(indices, keys):
        if type(key) is tuple and key[0] == "tensor" and ROW_FRAMEWORK(rows[index]) == "torch":
            parts = torch_support.sparse_parts(arrays[index])
            if parts:
                sparse[index] = parts
    if not sparse:
        return None
    new_arrays, new_rows, owners = [], [], []
    for index, (array, row) in enumerate(zip(arrays, rows)):
        owner = array if owned_by is None else owned_by[index]
        parts = sparse.get(index)
        if parts is None:
            new_arrays.append(array)
            new_rows.append(row)
            owners.append(owner)
            continue
        path, holder, root, depth, framework = row
        for call, part in parts:
            new_arrays.append(part)
            new_rows.append(((path, DOT, call), holder, root, depth + 1, framework))
            owners.append(owner)
    return new_arrays, new_rows, owners


_FIELDS = ArrayInfo._fields
_KEY, _SIZE, _DEVICE, _ID = (
    _FIELDS.index(name) for name in ("storage_key", "storage_nbytes", "device", "storage_id")
)
_NEW_INFO = functools.partial(tuple.__new__, ArrayInfo)


class Found:
    """``rows[i]`` is where reference i was found (a `Row`-layout tuple), ``info(i)`` its
    array's metadata (kept as columns: ``columns[f][i]`` is field f of `ArrayInfo`;
    ``keys``, ``storage_nbytes``, ``devices`` and ``storage_ids`` name four of them),
    ``idents[i]`` the array's id() and ``weaks[i]`` a weakref to it (keep_refs only;
    ``died`` collects those whose array is gone).
    Arrays wait in ``pending`` (their rows, as plain tuples, in ``pending_rows``) until
    ``finish()`` reads their metadata in bulk; ``refs`` builds the `Ref`s on demand.
    ``runs`` (``pending_runs``): the `Items` of the rows recorded in bulk, in order; read
    a row's path with ``path(i)`` or ``paths()``."""

    def __init__(
        self, keep_refs: bool = False, readers: Optional[dict[str, Callable]] = None
    ) -> None:
        self.keep_refs = keep_refs
        self.readers = readers or {}  # framework -> its info_of
        self.rows: list[tuple] = []  # Row layout
        self.columns: list[list] = [[] for _ in _FIELDS]
        self.idents: list[int] = []
        self.weaks: list = []
        self.died: list[weakref.ref] = []  # weaks whose array is gone (their callback)
        self.pending: list = []  # arrays awaiting metadata (strong refs until finish())
        self.pending_rows: list[tuple] = []  # Row layout
        self.runs: list[Items] = []
        self.pending_runs: list[Items] = []
        self._refs: list[Ref] = []
        self._infos: list[ArrayInfo] = []

    @property
    def keys(self) -> list:
        return self.columns[_KEY]

    @property
    def storage_nbytes(self) -> list[int]:
        return self.columns[_SIZE]

    @property
    def devices(self) -> list[str]:
        return self.columns[_DEVICE]

    @property
    def storage_ids(self) -> list[int]:
        return self.columns[_ID]

    def path(self, index: int) -> tuple:
        """Row `index`'s path."""
        return real_path(ROW_PATH(self.rows[index]), index)

    def pending_path(self, index: int) -> tuple:
        """Pending row `index`'s path."""
        return real_path(ROW_PATH(self.pending_rows[index]), index)

    def paths(self, start: int = 0) -> list[tuple]:
        """The paths of rows `start` on."""
        paths = list(map(ROW_PATH, self.rows[start:]))
        for run in self.runs:
            end = run.start + run.count
            if end > start:
                first = max(run.start, start)
                paths[first - start : end - start] = run.paths(first - run.start, run.count)
        return paths

    def info(self, index: int) -> ArrayInfo:
        return _NEW_INFO([column[index] for column in self.columns])

    @property
    def infos(self) -> list[ArrayInfo]:
        """Every reference's `ArrayInfo`, in the order found (made on first use)."""
        made = self._infos
        if len(made) < len(self.rows):
            made += map(_NEW_INFO, zip(*(column[len(made) :] for column in self.columns)))
        return made

    def finish(self) -> None:
        """Read the metadata of the arrays recorded since the last call; drop the arrays."""
        arrays, rows, runs = self.pending, self.pending_rows, self.pending_runs
        if not arrays:
            return
        try:
            owners = arrays
            frameworks = _frameworks(rows, runs)  # of each row, arrow's included
            if runs and arrow.FRAMEWORK in frameworks:
                rows, runs = expanded(rows, runs), []
            buffers = _arrow_parts(arrays, rows, frameworks)
            if buffers is not None:  # Arrow data: its buffers take its place
                arrays, rows, owners = buffers
            if buffers is not None:
                frameworks = set(map(ROW_FRAMEWORK, rows))
            columns, kept, one_by_one = _bulk_columns(arrays, rows, self.readers, frameworks)
            if runs and (one_by_one or kept is not None):  # rows to take out or replace
                rows, runs = expanded(rows, runs), []
            parts = None
            if one_by_one:
                parts = _sparse_parts(arrays, rows, columns[_KEY], kept, owners)
            if parts is not None:  # sparse tensors: their components take their place
                arrays, rows, owners = parts
                columns, kept, _ = _bulk_columns(arrays, rows, self.readers)
            # a component's liveness and identity are its sparse tensor's (a new object
            # each time it is read, it dies at once)
            idents = list(map(id, owners))
            weaks = _weaks(owners, self.died.append) if self.keep_refs else []
            if kept is not None:  # arrays whose metadata could not be read are left out
                rows = list(itertools.compress(rows, kept))
                idents = list(itertools.compress(idents, kept))
                weaks = list(itertools.compress(weaks, kept))
            else:
                rows = list(rows)  # pending_rows is emptied below
            for run in runs:  # their rows go after those found before
                run.start += len(self.rows)
            self.runs += runs
            if self.rows:
                self.rows += rows
                for column, more in zip(self.columns, columns):
                    column += more
                self.idents += idents
                self.weaks += weaks
            else:  # the first: no copy
                self.rows, self.columns, self.idents, self.weaks = rows, columns, idents, weaks
        finally:
            # never keep an array alive past the scan; the lists stay (the walk appends to them)
            del self.pending[:]
            del self.pending_rows[:]
            del self.pending_runs[:]

    def subset(self, kept: list[bool]) -> Found:
        """The references where ``kept`` is True, in the order found (``finish()`` done),
        without weakrefs."""
        part = Found(False, self.readers)
        part.rows = list(itertools.compress(expanded(self.rows, self.runs), kept))
        part.columns = [list(itertools.compress(column, kept)) for column in self.columns]
        part.idents = list(itertools.compress(self.idents, kept))
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
                    self.paths(start),
                    map(ROW_HOLDER, rows),
                    map(ROW_ROOT, rows),
                    map(ROW_DEPTH, rows),
                    itertools.count(start),
                    map(ROW_FRAMEWORK, rows),
                    self.infos[start:],
                    itertools.islice(weaks, start, None),
                    self.idents[start:],
                ),
            )
        return built
