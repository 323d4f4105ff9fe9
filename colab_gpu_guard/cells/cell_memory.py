"""`CellMemory`: the record of one cell's memory effect, as the tracker makes it and the
history, the panel and `%gpu_status --json` read it."""

from __future__ import annotations

from dataclasses import InitVar, asdict, dataclass
from typing import Any, Optional

from ..units import format_bytes
from .peaks import EXACT
from .rerun_holders import Holder


@dataclass(frozen=True)
class CellMemory:
    """The memory effect of one cell. Byte counts are summed over CUDA devices.

    cell: the execution count (None for cells run without storing history).
    allocated_before / allocated_after / reserved_after: torch CUDA caching allocator
        figures; 0 when torch has not initialised CUDA (``devices`` is then 0).
    peak / peak_bound: the most allocated during the cell; peak_bound "" when exact, "<="
        when ``peak`` is an upper bound (the cell stayed below an earlier peak), ">=" when
        a lower bound (the cell reset torch's peak itself); see ``cell_peaks``.
    ooms: how many CUDA out-of-memory errors the allocator raised during the cell.
    nvml_used_after: NVML "used" memory over all GPUs after the cell (all processes).
    nvml_used_call: the NVML memory call it came from: "v2" (driver-reserved memory left
        out) or "v1" (an older driver or nvidia-ml-py: driver-reserved memory included).
    rerun_leak / leak_bytes / leak_kind: this source ran before and both runs kept memory
        (its previous objects are still held); leak_bytes is what this run kept, leak_kind
        the devices it kept it on ("cuda:0", "cpu" for host memory, "cuda:0, cpu").
    leaks: what this run kept again, per device: ((device, bytes), ...).
    held_by: what holds the previous run's objects, where the check could tell
        ("`losses` (grew by 1 autograd graph, 16 MiB saved)", "`Out[7]` (output
        history)", "<traceback: f() local 'x'> (...)"), else "": `holders` in words.
    grew: the user's lists, dicts, sets or deques among ``held_by`` (their names): what
        grew on a flagged rerun, listed with the holders the user did not knowingly keep.
    rerun_of: the cell number of the previous run of the same source.
    rss_after: the process's resident set size after the cell (Linux), else None.
    rss_before: the resident set size the cell started from: the last cell's reading
        after it, unless something ran between the two cells (the panel's refresh read it
        anew: `MemoryTracker.rebase`); None where not read.
    nvml_process_used: after a cell in which torch held no CUDA memory, the bytes NVML
        charges this kernel's PID over all GPUs (0: NVML lists no process with this PID -
        not on a GPU, or a container, where NVML lists host PIDs); None when not known (no
        NVML, processes not listable, torch on CUDA, or the next cell began before NVML
        was read).
    holders / explained (not fields: the JSON document has `held_by`, their words): the
        holders `held_by` names, as records (`rerun_holders.Holder`), and whether they hold
        most of what the rerun kept; () on a record read back from JSON.
    """

    cell: Optional[int]
    allocated_before: int
    allocated_after: int
    peak: int
    reserved_after: int
    ooms: int
    nvml_used_after: Optional[int]
    rerun_leak: bool
    leak_bytes: int
    duration_s: float
    rss_after: Optional[int] = None
    devices: int = 0
    leak_kind: str = ""
    rerun_of: Optional[int] = None
    peak_bound: str = EXACT
    nvml_used_call: Optional[str] = None
    leaks: tuple[tuple[str, int], ...] = ()
    held_by: str = ""
    nvml_process_used: Optional[int] = None
    grew: tuple[str, ...] = ()
    rss_before: Optional[int] = None
    holders: InitVar[tuple[Holder, ...]] = ()
    explained: InitVar[bool] = True

    def __post_init__(self, holders: tuple[Holder, ...], explained: bool) -> None:
        if holders:  # else the class's defaults: () and True
            object.__setattr__(self, "holders", holders)
            object.__setattr__(self, "explained", explained)

    @property
    def delta(self) -> int:
        return self.allocated_after - self.allocated_before

    @property
    def peak_text(self) -> str:
        """The peak as shown: '1.2 GiB', or '<= 1.2 GiB' for an upper bound."""
        text = format_bytes(self.peak)
        return f"{self.peak_bound} {text}" if self.peak_bound else text

    @property
    def holder_text(self) -> str:
        """What keeps a flagged rerun's earlier objects alive, as the views say it."""
        return f"held by {self.held_by}" if self.held_by else "its earlier results are still held"

    @property
    def exact_peak(self) -> Optional[int]:
        """The peak when known exactly, else None."""
        return self.peak if not self.peak_bound else None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
