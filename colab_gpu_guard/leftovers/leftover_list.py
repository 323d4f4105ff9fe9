"""`LeftoverList`: a scan's entries, biggest first, printed as its groups."""

from __future__ import annotations

import collections.abc
import gc
import itertools
from dataclasses import asdict
from typing import Any, Callable, Optional

from ..units import USER_VARIABLE, escape_lines
from .groups import Blocks as GroupColumns
from .groups import LeftoverGroups, group_leftovers
from .html import advice_html, groups_html, leftovers_html, notes_html
from .records import DeviceGap, Leftover, Unseen, object_arrays_note, unseen_note

_IS_NONE = type(None).__instancecheck__  # x is None, as a C-level callable


class LeftoverList(collections.abc.Sequence):
    """A sequence of ``Leftover`` that also prints as a table: biggest first, equal sizes
    in the order found (variables as defined, items by index). It compares equal to a list
    of the same entries; ``list(...)`` gives one.

    A scan's list makes each entry when it is first read (a notebook may hold 10^5 arrays,
    and ``%gpu_status`` shows ten). Each array's path, sizes and metadata are taken during
    the scan, so an entry read later is what the scan saw, not what is alive now.

    ``gaps`` (deep scans): per CUDA device, found bytes vs ``torch.cuda.memory_allocated``.
    ``notes``: what the scan could not see: ``incomplete`` (the note of a scan that ran out
    of time, "" when it did not) first, then ``limits`` (graphs not measured, no framework
    imported, ...). ``unfinished``: what a scan that ran out of time did not search to the
    end (``big_list: 1,000,000 items, 37% searched``); empty when ``complete``.
    ``grown_on_rerun``: user variables that grew on a rerun flagged as a leak (the
    tracker's), grouped with what the user did not knowingly keep.
    ``unseen``: holders the scan met but could not look into (`records.Unseen`: a cuDF
    frame), named in a note of ``limits``; ``object_arrays``: the names of NumPy arrays of
    Python objects, whose bytes are their pointers only (a note says so).
    """

    __hash__ = None  # type: ignore[assignment]  # equal to lists, which are unhashable

    def __init__(
        self,
        items=(),
        gaps=(),
        notes=(),
        deep: bool = False,
        unfinished=(),
        grown_on_rerun=(),
        incomplete: str = "",
        unseen: tuple[Unseen, ...] = (),
        object_arrays: tuple[str, ...] = (),
    ) -> None:
        self._items: list = list(items)
        self._make: Optional[Callable[[int], Leftover]] = None
        self._sizes: Optional[list[int]] = None
        self._holders: Optional[list[str]] = None
        self.gaps: tuple[DeviceGap, ...] = tuple(gaps)
        self.incomplete = incomplete
        self.unseen: tuple[Unseen, ...] = tuple(unseen)
        self.object_arrays: tuple[str, ...] = tuple(object_arrays)
        made = (unseen_note(self.unseen),) if self.unseen else ()
        if self.object_arrays:
            made += (object_arrays_note(list(self.object_arrays)),)
        self.limits: tuple[str, ...] = tuple(notes) + made
        self.notes: tuple[str, ...] = ((incomplete,) if incomplete else ()) + self.limits
        self.deep = deep
        self._group_columns: Optional[Callable[[], GroupColumns]] = None
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
        group_columns: Optional[Callable[[], GroupColumns]] = None,
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

    def columns(self) -> Optional[GroupColumns]:
        """The `groups.Blocks` columns of a scan's list (grouping it without making every
        entry); None for a list of entries."""
        return self._group_columns() if self._group_columns is not None else None

    def groups(self, entries_per_group: Optional[int] = 3) -> LeftoverGroups:
        """The entries by the root holding them (`groups.LeftoverGroups`): what the user may
        not know keeps memory (output history, frames, graphs) first, what ``%gpu_reset``
        releases marked; each group keeps its biggest `entries_per_group` entries (None: all)."""
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
        made = len(self.limits) - (bool(self.unseen) + bool(self.object_arrays))
        return (
            type(self),
            (
                list(self),
                self.gaps,
                self.limits[:made],
                self.deep,
                self.unfinished,
                (),
                self.incomplete,
                self.unseen,
                self.object_arrays,
            ),
        )

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
            "unseen": [unseen._asdict() for unseen in self.unseen],
        }

    def __str__(self) -> str:
        if not self:
            lines = ["leftovers: no arrays found" + ("" if self.complete else " so far")]
        else:
            groups = self.groups()
            lines = [groups.heading()] + [f"  {line}" for line in groups.lines()]
            advice = groups.advice()
            lines += [f"  {advice}"] if advice else []
        lines += [f"  {gap}" for gap in self.gaps]
        lines += [f"  note: {note}" for note in self.notes]
        return escape_lines(lines)  # variable names are the notebook's: escaped

    def __repr__(self) -> str:
        return f"LeftoverList({list(self)!r})"

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self) if not cycle else "LeftoverList(...)")

    def _repr_html_(self) -> str:
        if not self:
            return leftovers_html((), self.gaps, self.notes)
        groups = self.groups()
        return (
            groups_html(groups) + advice_html(groups.advice()) + notes_html(self.gaps, self.notes)
        )
