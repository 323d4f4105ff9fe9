"""Per-cell memory history, recorded by IPython's ``pre_run_cell`` / ``post_run_cell``: torch's
CUDA allocator figures, the process's resident size and NVML's used memory after each cell,
and the rerun judgement (see docs/cells.md, "The tracker")."""

from __future__ import annotations

import collections
import sys
import time
from typing import Any, Callable, NamedTuple, Optional

from .. import cuda_health, notebook_refs
from ..frameworks import torch as torch_support
from ..host_memory import RssReader as _RssReader
from .cell_memory import CellMemory
from .history_text import (  # noqa: F401 (PEAK_BOUND_NOTE, format_history, leak_text: its API)
    PEAK_BOUND_NOTE,
    format_history,
    held_by_text,
    leak_text,
)
from .nvml_sampler import NvmlSampler
from .peaks import EXACT, cell_peak
from .rerun_holders import Named, RerunHolders
from .reruns import CellRun, RerunLeakCheck, cuda_changes

DEFAULT_MAXLEN = 500
GROWN_KEPT = 64  # names of containers that grew on a flagged rerun, the latest kept


class _Pending(NamedTuple):
    """What `pre_run_cell` read, for `post_run_cell`: the cell's source, when it started,
    the per-device allocator stats, whether torch's peaks were reset, the resident size
    and malloc's in-use bytes before it, and the container lengths a rerun's holders are
    read from (None where not needed)."""

    source: Optional[str]
    started: float
    stats: tuple
    reset_peaks: bool
    rss_before: Optional[int]
    malloc_before: Optional[int]
    lengths: Optional[dict]


class _Row(NamedTuple):
    """One recorded cell as the tracker keeps it: `CellMemory`'s figures in the order they
    are read (NVML's join in `history`, from the sampler, by `seq`)."""

    seq: int
    cell: Optional[int]
    duration_s: float
    # torch's CUDA allocator
    devices: int
    allocated_before: int
    allocated_after: int
    peak: int
    peak_bound: str
    reserved_after: int
    ooms: int
    # the process
    rss_before: Optional[int]
    rss_after: Optional[int]
    # the rerun judgement
    rerun_of: Optional[int]
    leaks: tuple
    leak_bytes: int
    leak_kind: str
    named: Named  # what holds the previous run's objects


# a NamedTuple made without its Python-level __new__ (the per-cell hot path)
_new_tuple = tuple.__new__
_NO_CUDA: tuple = (0, ())


def _cuda_stats(reset_peaks: bool = False) -> tuple[int, tuple]:
    """(devices, per-device `AllocatorStats`); (0, ()) until torch has initialised CUDA,
    and when the context is broken (no CUDA call is made then). `reset_peaks`: reset the
    allocator's peaks after reading them (the opt-in per-cell peaks)."""
    torch = sys.modules.get("torch")
    if (
        torch is None
        or not torch_support.cuda_initialized(torch)
        or cuda_health.broken_reason() is not None
    ):
        return _NO_CUDA
    devices = torch_support.cuda_device_count(torch)
    stats = tuple(torch_support.allocator_stats(torch, devices))
    if reset_peaks:
        torch_support.reset_peaks(torch, devices)
    return devices, stats


def _cell_memory(
    row: _Row, used: Optional[int], process: Optional[int], used_call: Optional[str]
) -> CellMemory:
    """The record of one cell as `history` gives it, with what NVML read after it."""
    named = row.named
    # CellMemory's fields in order, by position: a keyword call costs a third more
    return CellMemory(
        row.cell,
        row.allocated_before,
        row.allocated_after,
        row.peak,
        row.reserved_after,
        row.ooms,
        used,  # nvml_used_after
        bool(row.leaks),  # rerun_leak
        row.leak_bytes,
        row.duration_s,
        row.rss_after,
        row.devices,
        row.leak_kind,
        row.rerun_of,
        row.peak_bound,
        used_call,  # nvml_used_call
        row.leaks,
        held_by_text(named.holders, named.explained, row.leaks) if named.holders else "",
        process,  # nvml_process_used
        named.grew,
        row.rss_before,
        named.holders,
        named.explained,
    )


# ---------------------------------------------------------------- the tracker


class MemoryTracker:
    """Records every cell's memory effect from its `pre_run_cell` / `post_run_cell` (wired
    to a shell by ``colab_gpu_guard.ipython.tracking.install``)."""

    def __init__(
        self,
        maxlen: int = DEFAULT_MAXLEN,
        nvml: bool = True,
        reset_peaks: bool = False,
        namespace: Optional[dict] = None,
        outputs: Optional[Callable[[], dict]] = None,
    ) -> None:
        """`namespace`: the user's variables and `outputs`: a reader of the output history
        (``Out``), where a flagged rerun looks for what holds the previous run's objects."""
        if not isinstance(maxlen, int) or maxlen < 1:
            raise ValueError("maxlen must be a positive integer")
        self.maxlen = maxlen
        # True: reset torch's peak counters before every cell (exact per-cell peaks, but
        # the user's max_memory_allocated() then covers the current cell only)
        self.reset_peaks = bool(reset_peaks)
        self._records: collections.deque[tuple] = collections.deque(
            maxlen=maxlen
        )  # `_Row`s' fields
        self._pending: Optional[tuple] = None  # `_Pending`'s fields
        self._seq = 0
        self._nvml_used: dict[int, int] = {}
        self._nvml_process: dict[int, Optional[int]] = {}
        # seq -> (its record, NVML's two readings and call, the CellMemory made of them)
        self._made: dict[int, tuple] = {}
        self._rss = _RssReader()
        self._holders = RerunHolders(namespace, outputs or dict, maxlen)
        self._reruns = RerunLeakCheck(maxlen, self._rss, self._holders.after)
        self._last_rss: Optional[int] = None
        # the allocator's figures at the last cell's end: the next cell's figures before it
        # (one read of torch's statistics per cell, not two: 14 us each on an H200)
        self._last_cuda: Optional[tuple[int, tuple]] = None
        self._grown: dict[str, None] = {}  # containers that grew on a flagged rerun
        self._nvml = (
            NvmlSampler(self._nvml_used, self._nvml_process, self._still_after) if nvml else None
        )

    # -- the hot path: no allocation-heavy work, no object walks, no CUDA calls
    def pre_run_cell(self, info: Any = None) -> None:
        try:
            reset = self.reset_peaks
            last = self._last_cuda
            if last is None or reset:  # resetting the peaks needs the figures read now
                last = _cuda_stats(reset)
            devices, stats = last
            source = getattr(info, "raw_cell", None)
            malloc, holders = self._reruns.before_run(source)
            # a plain tuple in `_Pending`'s field order (one allocation less per cell; it is
            # read once, unpacked, in `_record`)
            self._pending = (
                source,
                time.perf_counter(),
                stats,
                reset,
                self._rss_before(),
                malloc,
                self._holders.before(source) if holders else None,
            )
        except Exception:  # an IPython hook: it must never break the user's cell
            self._pending = None

    def _rss_before(self) -> Optional[int]:
        # Between two cells nothing of the user's runs, so the last cell's reading stands
        # in for a new one: one /proc read per cell instead of two (`rebase` drops it
        # where something of ours did run in between). The allocator's figures likewise.
        last = self._last_rss
        return last if last is not None else self._rss.read()

    def rebase(self) -> None:
        """Something that allocates ran between two cells (the panel's refresh): the next
        cell's figures before it are read anew, not taken from this cell's end, so what
        ran in between is charged to no cell."""
        self._last_rss = None
        self._last_cuda = None
        self._reruns.malloc.last = None

    def post_run_cell(self, result: Any = None) -> None:
        pending = self._pending
        self._pending = self._last_cuda = None  # read anew unless this cell's end is read
        if pending is None:
            return
        try:  # noqa: SIM105 - contextlib.suppress costs on this hot path
            self._record(pending, result)
        except Exception:  # an IPython hook: it must never break the user's cell
            pass

    def _record(self, pending: tuple, result: Any) -> None:
        # unpacked once, in its fields' order: the per-cell hot path reads each many times
        source, started, stats_before, reset_peaks, rss_before, malloc_before, lengths = pending
        duration = time.perf_counter() - started
        devices, stats = self._last_cuda = _cuda_stats()
        allocated_before = ooms_before = allocated = reserved = ooms = 0
        for before in stats_before:
            allocated_before += before.allocated
            ooms_before += before.num_ooms
        for after in stats:
            allocated += after.allocated
            reserved += after.reserved
            ooms += after.num_ooms
        peak, peak_bound = cell_peak(stats_before, stats, reset_peaks) if devices else (0, EXACT)
        rss = self._last_rss = self._rss.read()
        cell = getattr(result, "execution_count", None)

        leaks, rerun_of, named = self._reruns.judge(
            _new_tuple(
                CellRun,
                (
                    source,
                    cuda_changes(stats_before, stats) if devices else (),
                    rss_before,
                    rss,
                    malloc_before,
                    lengths,
                    cell,
                    duration,
                    result,
                ),
            )
        )
        leak_bytes = 0
        leak_kind = ""
        if leaks:
            leak_bytes = sum(amount for _, amount in leaks)
            leak_kind = ", ".join(device for device, _ in leaks)
            self._grew_on_rerun(named.grew)

        self._seq += 1
        seq = self._seq
        # a plain tuple in `_Row`'s field order (one allocation less per cell): `history`
        # makes it a `_Row` when read
        self._records.append(
            (
                seq,
                cell,
                duration,
                devices,
                allocated_before,
                allocated,
                peak,
                peak_bound,
                reserved,
                max(0, ooms - ooms_before),
                rss_before,
                rss,
                rerun_of,
                leaks,
                leak_bytes,
                leak_kind,
                named,
            )
        )
        nvml = self._nvml
        if nvml is not None and nvml.available is not False:
            nvml.request(seq, not devices)  # NVML's figure for this PID: no torch CUDA

    def _grew_on_rerun(self, names: tuple) -> None:
        grown = self._grown
        for name in names:
            grown.pop(name, None)
            grown[name] = None  # the latest last
        while len(grown) > GROWN_KEPT:
            del grown[next(iter(grown))]

    def grown_on_rerun(self) -> frozenset:
        """The user's containers that grew on a rerun flagged as a leak (the latest
        `GROWN_KEPT`), by name."""
        return frozenset(self._grown)

    def _still_after(self, seq: int) -> bool:
        """No cell has started since record `seq` (the NVML thread's check that what it
        read after that cell is that cell's)."""
        return self._seq == seq and self._pending is None

    # -- reading
    def history(self, last: Optional[int] = None) -> list[CellMemory]:
        """The recorded cells, oldest first; only the ``last`` ones if given."""
        records = list(self._records)
        nvml_used, nvml_process = self._nvml_used, self._nvml_process
        if records and len(nvml_used) > 2 * self.maxlen:
            oldest = _new_tuple(_Row, records[0]).seq
            for seq in [seq for seq in list(nvml_used) if seq < oldest]:  # list(): atomic
                nvml_used.pop(seq, None)
                nvml_process.pop(seq, None)
        if last is not None:
            records = records[-last:] if last > 0 else []
        call = self._nvml.call if self._nvml is not None else None
        # a record's CellMemory is made once and again only when what NVML read after
        # that cell came in since (the panel reads the last 30 after every cell)
        made = self._made
        if len(made) > 2 * self.maxlen:
            oldest = _new_tuple(_Row, self._records[0]).seq if self._records else 0
            for seq in [seq for seq in list(made) if seq < oldest]:  # list(): atomic
                made.pop(seq, None)
        cells = []
        for record in records:
            seq = record[0]
            used, process = nvml_used.get(seq), nvml_process.get(seq)
            used_call = call if seq in nvml_used else None
            known = made.get(seq)
            if (
                known is not None
                and known[0] is record
                and known[1] == used
                and known[2] == process
                and known[3] == used_call
            ):
                cells.append(known[4])
                continue
            cell = _cell_memory(_new_tuple(_Row, record), used, process, used_call)
            made[seq] = (record, used, process, used_call, cell)
            cells.append(cell)
        return cells

    def clear(self) -> None:
        self._records.clear()
        self._made.clear()
        self._grown.clear()
        self._reruns.clear()
        self._holders.clear()
        self._nvml_used.clear()
        self._nvml_process.clear()

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.stop()
        self._rss.close()


_trackers: dict[int, MemoryTracker] = {}
_latest: list[MemoryTracker] = []


def activate(shell: Any, tracker: MemoryTracker) -> None:
    """Make `tracker` the one `memory_history(shell)` reads, and the latest one."""
    _trackers[id(shell)] = tracker
    _latest[:] = [tracker]


def deactivate(shell: Any, tracker: MemoryTracker) -> None:
    """Forget `tracker` (closed): `memory_history` no longer reads it."""
    if _trackers.get(id(shell)) is tracker:
        del _trackers[id(shell)]
    if _latest and _latest[0] is tracker:
        _latest.clear()


def active_tracker(shell: Any = None) -> Optional[MemoryTracker]:
    """The tracker of `shell` (default: the running IPython shell), else the latest one."""
    if shell is None:
        shell = notebook_refs.running_shell()
    if shell is not None and id(shell) in _trackers:
        return _trackers[id(shell)]
    return _latest[0] if _latest else None


def memory_history(shell: Any = None) -> list[CellMemory]:
    """The recorded cells, oldest first (at most the last 500); [] when not loaded."""
    tracker = active_tracker(shell)
    return tracker.history() if tracker is not None else []


def history_tail(last: int, shell: Any = None) -> tuple[list[CellMemory], int]:
    """The last `last` recorded cells and how many are recorded in all (the panel's view:
    it shows 30 of up to 500 after every cell)."""
    tracker = active_tracker(shell)
    if tracker is None:
        return [], 0
    return tracker.history(last=last), len(tracker._records)


def grown_on_rerun(shell: Any = None) -> frozenset:
    """The user's containers that grew on a rerun flagged as a leak, by name (`shell`'s
    tracker, as `active_tracker` finds it; empty when none is loaded)."""
    tracker = active_tracker(shell)
    return tracker.grown_on_rerun() if tracker is not None else frozenset()


def rerun_leaks(history: Optional[list[CellMemory]] = None) -> list[CellMemory]:
    """The records flagged as leaking on rerun."""
    history = memory_history() if history is None else history
    return [record for record in history if record.rerun_leak]


def leaks_by_holder(
    leaks: list[CellMemory], shown: Optional[Callable[[CellMemory], str]] = None, last: int = 10
) -> list[tuple[str, str]]:
    """(cells, holder) for the last `last` flagged records, one pair per holder in the
    order first met: ('[9], [10]', "`outs` (grew by 1 autograd graph, ...)"); holder ""
    where the check could not tell. `shown`: what of a record's holders to name, in words
    (`past_leaks.holders_now`: those still there), all by default."""
    cells: dict[str, list[str]] = {}
    for record in leaks[-last:]:
        held = record.held_by if shown is None else shown(record)
        cells.setdefault(held, []).append(f"[{record.cell}]")
    return [(", ".join(numbers), holder) for holder, numbers in cells.items()]
