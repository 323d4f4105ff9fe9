"""The records of a traced cell: where memory was allocated (a notebook line, a module's
line, or none of the user's), what was alive at the peak and kept at the end by line, the
timeline, and the report that holds them (its views are in `views`)."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

from .. import serialize
from .kinds import SourceLine

SCHEMA_VERSION = 1


class ModuleLine(NamedTuple):
    """A line of the user's module under a notebook line (``model(x)`` -> ``mymodel.py line
    20``), with the bytes allocated there."""

    where: SourceLine
    nbytes: int
    count: int


@dataclasses.dataclass(frozen=True)
class LineMemory:
    """Memory allocated at one place and alive at a moment (the peak, or the cell's end):
    `count` allocations, `nbytes` together (as torch's allocator counts them, rounded up to
    its 512-byte unit). `inner`: the user's module lines below a notebook line. `names`:
    the variables that hold this memory now (`find_leftovers`' names; kept lines only)."""

    where: SourceLine
    nbytes: int
    count: int
    inner: tuple[ModuleLine, ...] = ()
    names: tuple[str, ...] = ()
    addresses: tuple[int, ...] = ()  # kept lines: the allocations' addresses (at most 64)


class TimelinePoint(NamedTuple):
    """Allocated bytes after allocation event `event` (0-based in the cell's window)."""

    event: int
    allocated: int


class Landmark(NamedTuple):
    """One of the cell's biggest allocations: when (event), how big, where."""

    event: int
    nbytes: int
    where: SourceLine


class OomEvent(NamedTuple):
    """CUDA out of memory in the window: what was asked for, what CUDA said was free, the
    line that asked."""

    event: int
    requested: int
    device_free: int
    where: SourceLine


@dataclasses.dataclass(frozen=True)
class DeviceTrace:
    """One device's memory over a cell's allocation events, from torch's allocator history.

    Every figure is one replay of the same events from the same snapshot: allocated bytes
    at the window's start (`start_allocated`, from the snapshot's end state with the
    window's events undone), after each event, at the peak and at the end (the snapshot's
    live allocations). Reserved is the allocator's cached segments likewise. `dropped`: the
    history was full (max_entries) and its oldest events of this cell are gone, so the
    start, peak and timeline cover only the events kept."""

    device: int
    event_count: int
    start_allocated: int
    end_allocated: int
    peak_allocated: int
    peak_event: int
    start_reserved: int
    peak_reserved: int
    end_reserved: int
    at_peak: tuple[LineMemory, ...]
    kept: tuple[LineMemory, ...]
    timeline: tuple[TimelinePoint, ...]
    landmarks: tuple[Landmark, ...] = ()
    oom: Optional[OomEvent] = None
    dropped: bool = False

    @property
    def kept_nbytes(self) -> int:
        return sum(line.nbytes for line in self.kept)


@dataclasses.dataclass(frozen=True)
class NameLink:
    """How `LineMemory.names` were found: a `find_leftovers` scan after the cell that took
    `seconds` (`complete`: it searched everything; False: its time budget ran out)."""

    requested: bool
    seconds: float
    complete: bool


@dataclasses.dataclass(frozen=True)
class TraceReport:
    """What a traced cell allocated, line by line: its views are text (`str`), HTML
    (`_repr_html_`) and JSON (`to_dict`)."""

    cell: Optional[int]
    recording: str
    devices: tuple[DeviceTrace, ...] = ()
    max_entries: int = 0
    saved_to: Optional[str] = None
    unavailable: Optional[str] = None
    names: Optional[NameLink] = None
    users_stacks: bool = True  # the user's own recording kept Python stacks
    schema_version: int = SCHEMA_VERSION

    def __str__(self) -> str:
        from .views import report_text

        return report_text(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("TraceReport(...)" if cycle else str(self))

    def _repr_html_(self) -> str:
        from .views import report_html

        return report_html(self)

    def to_dict(self) -> dict[str, Any]:
        return serialize.to_data(self)

    @classmethod
    def from_dict(cls, data: Any) -> TraceReport:
        return serialize.from_versioned(
            cls,
            data,
            SCHEMA_VERSION,
            lambda found: f"not a gpu_trace report of schema {SCHEMA_VERSION} (found {found!r})",
        )
