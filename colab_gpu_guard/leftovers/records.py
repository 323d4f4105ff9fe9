"""What a leftovers scan reports: `Leftover` (one block of array memory and who holds it),
`DeviceGap` (found vs allocated on a CUDA device) and `LeftoverList` (the table)."""

from __future__ import annotations

import collections.abc
import gc
import itertools
import operator
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable, Optional

from ..frameworks.base import ArrayInfo
from ..frameworks.torch_arrays import SPARSE_CALLS
from ..units import HOLDERS, USER_VARIABLE, format_bytes
from .graphs import Graph
from .html import leftovers_html, notes_html

_IS_NONE = type(None).__instancecheck__  # x is None, as a C-level callable


@dataclass(frozen=True)
class Leftover:
    """One block of array memory still alive, and who holds it.

    ``nbytes`` is the memory the entry keeps alive: the memory (storage) the array lives
    in, counted once however many views and names reach it, plus ``graph_nbytes``: what
    its autograd graph saved (a tensor with a ``grad_fn``: ``graph_tensors`` storages no
    name reaches, each counted once; ``graph_shared_nbytes`` of them are also held by other
    entries' graphs). ``array_nbytes`` is what the named array itself spans;
    ``views_nbytes`` what all the names listed use of the memory together (each distinct
    array's own bytes; None: not known), so that a slice keeping its whole base alive
    (``row = big[0]``, a loaded checkpoint's slice) says so (`view_text`).
    ``shared_with`` lists the other names reaching the same memory (views, aliases, the
    optimizer's reference to a parameter), at most 16 and then a '(+N more)' entry.
    """

    name: str
    holder: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    nbytes: int
    storage_id: int
    shared_with: tuple[str, ...] = ()
    framework: str = ""
    array_nbytes: int = 0
    holders: tuple[str, ...] = ()
    graph_nbytes: int = 0
    graph_tensors: int = 0
    graph_shared_nbytes: int = 0
    views_nbytes: Optional[int] = None
    graph_shared_with: tuple[str, ...] = ()
    graph_counted_under: tuple[str, ...] = ()
    graph_leaves: int = 0

    def __str__(self) -> str:
        shape = "x".join(str(size) for size in self.shape) or "scalar"
        text = (
            f"{format_bytes(self.nbytes):>10}  {self.name}  {self.dtype} [{shape}] "
            f"{self.device}  ({self.holder})"
        )
        if self.shared_with:
            text += f"  also: {', '.join(self.shared_with)}"
        if self.graph_tensors:
            text += f"  {self.graph().text()}"
        view = self.view_text()
        if view:
            text += f"  {view}"
        return text

    @property
    def unused_nbytes(self) -> int:
        """Bytes of the memory kept alive that no name listed uses: worth a note when at
        least `VIEW_NOTE_MIN` and at least half of it (0 otherwise)."""
        if self.views_nbytes is None:
            return 0
        storage = self.nbytes - self.graph_nbytes
        unused = storage - self.views_nbytes
        return unused if unused >= VIEW_NOTE_MIN and unused * 2 >= storage else 0

    def view_summary(self) -> str:
        """'uses 40 B of 3.81 MiB' where `view_text` has a note; '' otherwise."""
        if not self.unused_nbytes:
            return ""
        storage = self.nbytes - self.graph_nbytes
        return f"uses {format_bytes(self.views_nbytes or 0)} of {format_bytes(storage)}"

    def view_text(self) -> str:
        """'view: uses 40 B of the 3.81 MiB it keeps alive (...)', where the names use at
        most half of the memory they keep alive; '' otherwise."""
        if not self.unused_nbytes:
            return ""
        used = format_bytes(self.views_nbytes or 0)
        storage = format_bytes(self.nbytes - self.graph_nbytes)
        copy = _COPY_METHODS.get(self.framework, "copy")
        sparse, dot, call = self.name.rpartition(".")
        if dot and call in SPARSE_CALLS:  # a sparse tensor's component: copy the tensor
            return (
                f"view: uses {used} of the {storage} it keeps alive (keep {sparse}.{copy}(): "
                f"it copies only what {sparse} uses)"
            )
        if self.shared_with:
            return (
                f"view: these names use {used} of the {storage} they keep alive (.{copy}() "
                f"the parts you need, e.g. {self.name}.{copy}(), and drop these names)"
            )
        return (
            f"view: uses {used} of the {storage} it keeps alive (keep {self.name}.{copy}(): "
            "it copies only this part)"
        )

    def graph(self) -> Graph:
        return Graph(
            self.graph_tensors,
            self.graph_nbytes,
            self.graph_shared_nbytes,
            self.graph_shared_with,
            self.graph_counted_under,
            self.graph_leaves,
        )

    def to_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict``'s dict (its fields hold only plain values and tuples of
        them), without its recursion: a list may hold 10^6 entries."""
        return dict(zip(_LEFTOVER_FIELDS, _LEFTOVER_VALUES(self)))


_COPY_METHODS = {"torch": "clone"}  # the method that copies a view's part (NumPy, CuPy: copy)
VIEW_NOTE_MIN = 64 * 2**10  # a view's unused memory worth a note
_LEFTOVER_FIELDS = tuple(item.name for item in fields(Leftover))
_LEFTOVER_VALUES = operator.attrgetter(*_LEFTOVER_FIELDS)
_HOLDER_TUPLES = {holder: (holder,) for holder in HOLDERS}
_NEW = object.__new__


def leftover_of(
    name: str,
    holder: str,
    info: ArrayInfo,
    framework: str,
    shared_with: tuple[str, ...] = (),
    holders: tuple[str, ...] = (),
    views_nbytes: Optional[int] = None,
) -> Leftover:
    """The entry for an array's storage, named ``name`` and held by ``holder``: how a scan
    makes every `Leftover` (``views_nbytes``: the array's own bytes unless given). It
    skips the frozen dataclass's per-field ``object.__setattr__`` (a scan makes one per
    storage: 10^5 of them must stay cheap)."""
    shape, dtype, device, nbytes, _storage_key, storage_nbytes, storage_id = info
    item = _NEW(Leftover)
    item.__dict__.update(
        {
            "name": name,
            "holder": holder,
            "shape": tuple(shape),
            "dtype": dtype,
            "device": device,
            "nbytes": storage_nbytes,
            "storage_id": storage_id,
            "shared_with": shared_with,
            "framework": framework,
            "array_nbytes": nbytes,
            "holders": holders or _HOLDER_TUPLES.get(holder) or (holder,),
            "views_nbytes": nbytes if views_nbytes is None else views_nbytes,
        }
    )
    return item


def with_graph(item: Leftover, graph: Graph) -> Leftover:
    """The entry, keeping its autograd graph's memory too (a new entry)."""
    made = _NEW(Leftover)
    made.__dict__.update(item.__dict__)
    made.__dict__.update(
        nbytes=item.nbytes + graph.nbytes,
        graph_nbytes=graph.nbytes,
        graph_tensors=graph.tensors,
        graph_shared_nbytes=graph.shared_nbytes,
        graph_shared_with=graph.shared_with,
        graph_counted_under=graph.counted_under,
        graph_leaves=graph.leaves,
    )
    return made


@dataclass(frozen=True)
class DeviceGap:
    """Array bytes found on a CUDA device vs what torch's allocator says is allocated."""

    device: str
    found: int
    allocated: int

    @property
    def gap(self) -> int:
        return self.allocated - self.found

    def __str__(self) -> str:
        return (
            f"{self.device}: {format_bytes(self.found)} found, torch allocated "
            f"{format_bytes(self.allocated)}, gap {format_bytes(self.gap)} "
            "(held by nothing found here: autograd graphs, C++ references, allocator rounding)"
        )


class LeftoverList(collections.abc.Sequence):
    """A sequence of ``Leftover`` that also prints as a table: biggest first, equal sizes
    in the order found (variables as defined, items by index). It compares equal to a list
    of the same entries; ``list(...)`` gives one.

    A scan's list makes each entry when it is first read (a notebook may hold 10^5 arrays,
    and ``%gpu_status`` shows ten). Each array's path, sizes and metadata are taken during
    the scan, so an entry read later is what the scan saw, not what is alive now.

    ``gaps`` (deep scans): per CUDA device, found bytes vs ``torch.cuda.memory_allocated``.
    ``notes``: what the scan could not see. ``unfinished``: what a scan that ran out of
    time did not search to the end (``big_list: 1,000,000 items, 37% searched``); empty
    when ``complete``. ``grown_on_rerun``: user variables that grew on a rerun flagged as
    a leak (the tracker's), grouped with what the user did not knowingly keep.
    """

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __init__(
        self, items=(), gaps=(), notes=(), deep: bool = False, unfinished=(), grown_on_rerun=()
    ) -> None:
        self._items: list = list(items)
        self._make: Optional[Callable[[int], Leftover]] = None
        self._sizes: Optional[list[int]] = None
        self._holders: Optional[list[str]] = None
        self.gaps: tuple[DeviceGap, ...] = tuple(gaps)
        self.notes: tuple[str, ...] = tuple(notes)
        self.deep = deep
        self._group_columns: Optional[Callable[[], Any]] = None  # -> groups.Blocks
        self._root_types: dict[str, str] = {}
        self.unfinished: tuple[str, ...] = tuple(unfinished)
        self.grown_on_rerun: frozenset = frozenset(grown_on_rerun)

    @property
    def root_types(self) -> dict[str, str]:
        """Each root's type name, where the scan read it (``Sequential``, ``Adam``)."""
        return self._root_types

    @property
    def complete(self) -> bool:
        """The scan searched everything it set out to (its time budget did not run out)."""
        return not self.unfinished

    @classmethod
    def _made_on_access(
        cls,
        make: Callable[[int], Leftover],
        sizes: list[int],
        holders: list[str],
        group_columns: Optional[Callable[[], Any]] = None,
        root_types: Optional[dict[str, str]] = None,
        **extra,
    ) -> LeftoverList:
        """``make(i)`` builds entry i; ``sizes`` and ``holders`` are its nbytes and holder;
        ``group_columns()`` gives the `groups.Blocks` columns (grouping without making
        every entry), ``root_types`` each root's type name."""
        made = cls(**extra)
        made._items = [None] * len(sizes)
        made._make, made._sizes, made._holders = make, sizes, holders
        made._group_columns, made._root_types = group_columns, root_types or {}
        return made

    def columns(self):
        """The `groups.Blocks` columns of a scan's list (grouping it without making every
        entry); None for a list of entries."""
        return self._group_columns() if self._group_columns is not None else None

    def groups(self, entries_per_group: Optional[int] = 3):
        """The entries by the root holding them (`groups.LeftoverGroups`): hidden holders
        (output history, frames, graphs) first, what ``%gpu_reset`` releases marked; each
        group keeps its biggest `entries_per_group` entries (None: all)."""
        from .groups import group_leftovers

        return group_leftovers(
            self,
            entries_per_group,
            self.columns(),
            self._root_types,
            self.notes,
            self.grown_on_rerun,
        )

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self._items)))]
        item = self._items[index]
        if item is None and self._make is not None:
            item = self._items[index] = self._make(index % len(self._items))
        return item

    def __iter__(self):
        if self._make is not None:
            self._make_all()
        return iter(self._items)

    def _make_all(self) -> None:
        make, items = self._make, self._items
        # many small objects at once: no collector passes over every live object meanwhile
        collecting = gc.isenabled()
        gc.disable()
        try:
            for index in itertools.compress(range(len(items)), map(_IS_NONE, items)):
                items[index] = make(index)  # type: ignore[misc]
        finally:
            if collecting:
                gc.enable()
        self._make = None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (LeftoverList, list)):
            return list(self) == list(other)
        return NotImplemented

    def __reduce__(self):
        return (type(self), (list(self), self.gaps, self.notes, self.deep, self.unfinished))

    @property
    def total_bytes(self) -> int:
        if self._sizes is not None:
            return sum(self._sizes)
        return sum(item.nbytes for item in self._items)

    @property
    def freeable_bytes(self) -> int:
        """Bytes held by something other than a user variable (output history, tracebacks,
        ...): what ``%gpu_reset`` can free without deleting a name the user made."""
        if self._sizes is not None and self._holders is not None:
            return sum(itertools.compress(self._sizes, map(USER_VARIABLE.__ne__, self._holders)))
        return sum(item.nbytes for item in self._items if item.holder != USER_VARIABLE)

    def to_dict(self) -> dict[str, Any]:
        return {
            "leftovers": [item.to_dict() for item in self],
            "groups": [group.to_dict() for group in self.groups()],
            "total_bytes": self.total_bytes,
            "gaps": [{**asdict(gap), "gap": gap.gap} for gap in self.gaps],
            "notes": list(self.notes),
            "deep": self.deep,
            "complete": self.complete,
            "unfinished": list(self.unfinished),
        }

    def __str__(self) -> str:
        if not self:
            lines = ["leftovers: no arrays held" + ("" if self.complete else " (found so far)")]
        else:
            groups = self.groups()
            lines = [groups.heading()] + [f"  {line}" for line in groups.lines()]
        lines += [f"  {gap}" for gap in self.gaps]
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"LeftoverList({list(self)!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self) if not cycle else "LeftoverList(...)")

    def _repr_html_(self) -> str:
        from .html import groups_html

        if not self:
            return leftovers_html((), self.gaps, self.notes)
        return groups_html(self.groups()) + notes_html(self.gaps, self.notes)
