"""A cell's CUDA allocations by source line: torch's allocator history recorded for the
cell (`trace_cell`), replayed into the peak, what was alive at it and what the cell kept,
by the notebook line that allocated it (`TraceReport`); and the lines alive at the last
CUDA out-of-memory (`oom.at_failure`)."""

from __future__ import annotations

from .kinds import SourceLine
from .lines import SavedCell
from .oom import OomLines, at_failure
from .recording import DEFAULT_MAX_ENTRIES, Recorder, Tracing, saved_report, trace_cell
from .records import DeviceTrace, LineMemory, TraceReport

__all__ = [
    "DEFAULT_MAX_ENTRIES",
    "DeviceTrace",
    "LineMemory",
    "OomLines",
    "Recorder",
    "SavedCell",
    "SourceLine",
    "TraceReport",
    "Tracing",
    "at_failure",
    "saved_report",
    "trace_cell",
]
