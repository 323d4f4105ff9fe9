"""The references a walk found, one per path to an array, in the order found: each path's
row (`rows.Row`) and the array's `ArrayInfo` (read in bulk when the walk is done: torch's in one
C-level pass per attribute), its id() and, when asked, a weakref; `Ref` joins them. The
items of a container recorded in bulk share one row (`rows.Items`)."""

from __future__ import annotations

import functools
import itertools
import operator
import sys
import weakref
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple, Optional, Union

from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo
from . import arrow
from .composites import Composite, composite_tensors
from .extents import UNREAD, Layout, shared_views
from .mapped_files import MappedFiles
from .rows import (
    ROW_DEPTH,
    ROW_FRAMEWORK,
    ROW_HOLDER,
    ROW_PATH,
    ROW_ROOT,
    Items,
    expanded,
    frameworks_of,
    real_path,
)


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


# keep_refs: the arrays themselves, held until `Found.weaken` says which the drop may free
# (gpu_reset's scan: a weakref per array is 10^6 objects to make, and for its gc.collect()
# to go over, where a reset frees few of them)
HOLD = "hold"
_FIELDS = ArrayInfo._fields
_KEY, _SIZE, _DEVICE, _ID, _NBYTES = map(
    _FIELDS.index, ("storage_key", "storage_nbytes", "device", "storage_id", "nbytes")
)
_NEW_INFO = functools.partial(tuple.__new__, ArrayInfo)
_NO_IDENTS = itertools.repeat(None)  # Refs of a scan whose lists need no ids (`Found.let_go`)
_IS_NONE = type(None).__instancecheck__
_FEW = 4096  # rows let go of at once whose ids are kept one by one (`Found.weaken`)


class Found:
    """``rows[i]`` is where reference i was found (a `Row`-layout tuple), ``info(i)`` its
    array's metadata (kept as columns: ``columns[f][i]`` is field f of `ArrayInfo`;
    ``keys``, ``storage_nbytes``, ``devices`` and ``storage_ids`` name four of them),
    ``idents[i]`` the array's id() and ``weaks[i]`` a weakref to it (keep_refs only;
    ``died`` collects those whose array is gone). With keep_refs `HOLD`, ``held[i]`` is the
    array itself until `weaken` and `settle` put a weakref in its place (``weaks[i]`` is
    None meanwhile), and `let_go` drops the rest: see `weaken`.
    Arrays wait in ``pending`` (their rows, as plain tuples, in ``pending_rows``) until
    ``finish()`` reads their metadata in bulk; ``refs`` builds the `Ref`s on demand.
    ``runs`` (``pending_runs``): the `Items` of the rows recorded in bulk, in order; read
    a row's path with ``path(i)`` or ``paths()``."""

    def __init__(
        self, keep_refs: Union[bool, str] = False, readers: Optional[dict[str, Callable]] = None
    ) -> None:
        self.keep_refs = bool(keep_refs)
        self.hold = keep_refs == HOLD
        self.held: list = []  # HOLD: row i's array, or `gone` once a weakref stands for it
        # in `held` where an array is no more (not None: its reference count moves all the
        # time, this one's only when `_weaken` puts it in)
        self.gone = object()
        self.counts: Optional[list[int]] = None  # HOLD: the held arrays' reference counts
        self.unproven_rows: list[int] = []  # HOLD: rows whose array took no weakref
        self.readers = readers or {}  # framework -> its info_of
        self.rows: list[tuple] = []  # Row layout
        self.columns: list[list] = [[] for _ in _FIELDS]
        # each reference's array's id(); None until asked for where the scan holds its
        # arrays (`HOLD`: `idents`, `let_go`)
        self._idents: Optional[list[int]] = None if self.hold else []
        self.gone_idents: dict[int, int] = {}  # HOLD: row -> id() of an array let go of
        self.array_keys = False  # the walk met an array used as a dict's key (`ARRAY_KEY`)
        # id(node) -> an array of several blocks found at that node: a pandas extension
        # array, a sparse tensor (`composites.Composite`)
        self.composites: dict[int, Composite] = {}
        # the keys of the sparse tensors (their components are rows) and wrapper subclasses
        self.whole_keys: set = set()
        self.files = MappedFiles()  # the arrays left out as files mapped from disk
        # storage key -> where the arrays reaching it lie (`read_extents`)
        self.layouts: dict[Hashable, Layout] = {}
        self.unread: Optional[tuple] = None  # what `finish` read last (`read_extents`)
        self._distinct: Optional[bool] = None  # `distinct_storages`, once known
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
    def idents(self) -> list[int]:
        """Each reference's array's id() (valid while the scan runs); where the scan holds
        its arrays (`HOLD`), made when first asked for, or by `let_go` where a list could
        need them (empty where none can: no row then has one)."""
        if self._idents is None:
            self._idents = self._held_idents()
        return self._idents

    def _held_idents(self) -> list[int]:
        idents = list(map(id, self.held))
        for index, ident in self.gone_idents.items():
            idents[index] = ident
        return idents

    @idents.setter
    def idents(self, idents: list[int]) -> None:
        self._idents = idents

    def distinct_storages(self) -> bool:
        """Whether no two references' storage ids are equal: then no two keys are, and no
        array is reached twice. Sorted, not hashed: addresses share their low bits, which a
        set of ints hashes on, and arrays made one after another mostly lie in address
        order."""
        if self._distinct is None:
            ordered = sorted(self.storage_ids)
            self._distinct = not any(map(operator.eq, ordered, itertools.islice(ordered, 1, None)))
        return self._distinct

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

    def row_values(self, field: Callable[[tuple], Any]) -> list:
        """`field` (``ROW_HOLDER``...) of every row; read once for the rows of a run."""
        rows = self.rows
        if not self.runs:
            return list(map(field, rows))
        values: list = []
        at = 0
        for run in self.runs:
            values += map(field, rows[at : run.start])
            values += [field(rows[run.start])] * run.count
            at = run.start + run.count
        values += map(field, rows[at:])
        return values

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
        """Read the metadata of the arrays recorded since the last call; drop the arrays
        (those that may be views, once `read_extents` has read where they lie)."""
        arrays, rows, runs = self.pending, self.pending_rows, self.pending_runs
        if not arrays:
            return
        try:
            owners = arrays
            frameworks = frameworks_of(rows, runs)  # of each row, arrow's included
            if runs and arrow.FRAMEWORK in frameworks:
                rows, runs = expanded(rows, runs), []
            buffers = arrow.buffers_in_place(arrays, rows, frameworks)
            if buffers is not None:  # Arrow data: its buffers take its place
                arrays, rows, owners = buffers
            if buffers is not None:
                frameworks = set(map(ROW_FRAMEWORK, rows))
            columns, kept, one_by_one = _bulk_columns(arrays, rows, self.readers, frameworks)
            if runs and (one_by_one or kept is not None):  # rows to take out or replace
                rows, runs = expanded(rows, runs), []
            parts = None
            if one_by_one:
                parts = composite_tensors(
                    arrays, rows, columns, kept, self.composites, self.whole_keys, owners
                )
            if parts is not None:  # sparse tensors: their components take their place
                arrays, rows, owners = parts
                columns, kept, _ = _bulk_columns(arrays, rows, self.readers)
            on_disk = self.files.on_disk(columns, rows, kept, arrow.FRAMEWORK in frameworks)
            if on_disk:  # files mapped from disk: left out of the arrays, and noted
                if runs:
                    rows, runs = expanded(rows, runs), []
                columns, kept = self.files.leave_out(on_disk, columns, rows, kept)
            # a component's liveness and identity are its sparse tensor's (a new object
            # each time it is read, it dies at once)
            self._distinct = None
            # ids made when asked for, where the arrays are held (a pass over 10^6 of them)
            idents = list(map(id, owners)) if self._idents is not None else None
            held: list = []
            if self.hold:  # weakrefs made by `weaken`, for what the drop may free
                held = list(owners if kept is None else itertools.compress(owners, kept))
                weaks = [None] * len(held)
            elif self.keep_refs:
                weaks = _weaks(owners, self.died.append)
            else:
                weaks = []
            if kept is not None:  # arrays whose metadata could not be read are left out
                rows = list(itertools.compress(rows, kept))
                if idents is not None:
                    idents = list(itertools.compress(idents, kept))
                if not self.hold:
                    weaks = list(itertools.compress(weaks, kept))
            else:
                rows = list(rows)  # pending_rows is emptied below
            if {"torch", "numpy"} <= frameworks or any(
                map(operator.lt, columns[_NBYTES], columns[_SIZE])
            ):
                # views (a tensor over an ndarray's memory becomes one when joined): where
                # they lie is read once storage keys are final (`read_extents`)
                viewed = list(arrays if kept is None else itertools.compress(arrays, kept))
                self.unread = (viewed, frameworks, len(self.rows))
            for run in runs:  # their rows go after those found before
                run.start += len(self.rows)
            self.runs += runs
            if self.rows:
                self.rows += rows
                if self.columns[_KEY] is self.columns[_ID]:  # host memory's (`array_columns`)
                    self.columns[_ID] = list(self.columns[_ID])
                for column, more in zip(self.columns, columns):
                    column += more
                if self._idents is not None and idents is not None:
                    self._idents += idents
                self.weaks += weaks
                self.held += held
            else:  # the first: no copy
                self.rows, self.columns, self.weaks = rows, columns, weaks
                self._idents = idents if self._idents is not None else None
                self.held = held
        finally:
            # never keep an array alive past the scan; the lists stay (the walk appends to them)
            del self.pending[:]
            del self.pending_rows[:]
            del self.pending_runs[:]

    def read_extents(self) -> None:
        """Where the arrays `finish` read last lie, for each storage two or more of them
        reach and one spans only in part (`extents.shared_views`, into ``layouts``), read
        once storage keys are final (a tensor over an ndarray's memory takes the array's:
        `numpy_sharing`); then those arrays go. A storage that arrays read before reach
        too (the deep scan's, after the walk's) is known only where those were read."""
        unread, self.unread = self.unread, None
        if unread is None:
            return
        arrays, frameworks, start = unread
        columns = [column[start:] for column in self.columns] if start else self.columns
        layouts = shared_views(arrays, self.rows[start:], frameworks, columns, start)
        if start:  # a storage both reach: known where both were read
            earlier, now = set(self.keys[:start]), set(columns[_KEY])
            for key in [key for key in layouts if key in earlier]:
                before = self.layouts.get(key)
                layouts[key] = UNREAD if before is None else before + layouts[key]
            for key in [key for key in self.layouts if key in now and key not in layouts]:
                layouts[key] = UNREAD
        self.layouts.update(layouts)

    def array(self, index: int) -> Any:
        """Row `index`'s array, held or reached by its weakref; None where it is gone or
        no reference to it is kept."""
        if self.held:
            array = self.held[index]
            if array is not self.gone:
                return array
        weak = self.weaks[index] if index < len(self.weaks) else None
        return None if weak is None else weak()

    def weaken(self, spans: list[tuple[int, int]]) -> None:
        """`HOLD`: a weakref in place of each held array of the rows in `spans` ((start,
        end) each), those a drop may free (its death then proves the release), and the
        reference counts of the arrays still held noted: only a finalizer or another
        thread could free one of those (they are reached from the roots kept), which
        `settle` tells."""
        if not self.hold:
            return
        if self._idents is None and sum(end - start for start, end in spans) > _FEW:
            self._idents = self._held_idents()  # many let go of: all their ids, in C
        held, weaks = self.held, self.weaks
        for start, end in spans:
            arrays = held[start:end]
            if self._idents is None:  # their ids, while they are sure to be alive
                self.gone_idents.update(zip(range(start, end), map(id, arrays)))
            held[start:end] = [self.gone] * (end - start)
            made = weaks[start:end] = _weaks(arrays, self.died.append)
            del arrays  # not counted below
            if None in made:
                self.unproven_rows += itertools.compress(range(start, end), map(_IS_NONE, made))
        self.counts = list(map(sys.getrefcount, held))

    def settle(self) -> None:
        """`HOLD`, after a change (the drop, the collection): each held array whose
        reference count fell is held no more, a weakref in its place; an array nothing
        else held goes now, as it would have without the scan (its weakref says so)."""
        held, counts = self.held, self.counts
        if counts is None:
            return
        now = list(map(sys.getrefcount, held))
        if now != counts:
            fell = itertools.compress(range(len(now)), map(operator.lt, now, counts))
            self._weaken([index for index in fell if held[index] is not self.gone])
            now = list(map(sys.getrefcount, held))
        self.counts = now

    def _weaken(self, indices: list[int]) -> None:
        held, weaks = self.held, self.weaks
        arrays = list(map(held.__getitem__, indices))
        if self._idents is None:  # their ids, while they are sure to be alive
            self.gone_idents.update(zip(indices, map(id, arrays)))
        for index in indices:
            held[index] = self.gone
        made = _weaks(arrays, self.died.append)
        del arrays  # each goes here where nothing else holds it (its callback says so)
        for index, weak in zip(indices, made):
            weaks[index] = weak
            if weak is None:
                self.unproven_rows.append(index)

    def let_go(self) -> None:
        """Drop the arrays held (`HOLD`); those still held are alive. Their ids are taken
        first where a list could name an array through them: one used as a dict's key, or
        one reached twice (a storage's references are told apart by them)."""
        if self._idents is None:
            needed = self.array_keys or not self.distinct_storages()
            self._idents = self._held_idents() if needed and self.held else []
        self.held = []
        self.counts = None

    def subset(self, kept: list[bool]) -> Found:
        """The references where ``kept`` is True, in the order found (``finish()`` done),
        without weakrefs."""
        part = Found(False, self.readers)
        part.rows = list(itertools.compress(expanded(self.rows, self.runs), kept))
        part.columns = [list(itertools.compress(column, kept)) for column in self.columns]
        part.idents = list(itertools.compress(self.idents, kept))
        part.composites = self.composites
        part.whole_keys = self.whole_keys
        if self.layouts:  # each storage's, for its rows kept
            renumbered = [count - 1 for count in itertools.accumulate(kept)]
            part.layouts = {
                key: layout.subset(kept, renumbered) for key, layout in self.layouts.items()
            }
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
                    self.idents[start:] if len(self.idents) == len(self.rows) else _NO_IDENTS,
                ),
            )
        return built
