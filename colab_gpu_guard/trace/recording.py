"""Recording torch's CUDA allocator history for one cell: switched on with a bounded
history before it and off after it, or, where the user's own recording is already on,
left untouched and this cell's window read from it; `trace_cell()` for code.

torch (2.1+) records with ``torch.cuda.memory._record_memory_history`` and hands the history
out with ``torch.cuda.memory._snapshot()``; switching it off discards the history, so a
recording of the user's is never switched, only read. Whether one is on is asked of
``torch._C._cuda_isHistoryEnabled`` where torch has it, else read from a snapshot (live
allocations with stacks, or recorded events).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import time
from typing import Any, Iterator, Optional, Union

from .. import notebook_refs
from ..frameworks import torch as torch_support
from ..notebook_refs import cell_files
from ..units import Unavailable, error_text
from . import oom
from .kinds import NONE, OWN, SAVED, USERS
from .lines import Places, SavedCell
from .records import NameLink, TraceReport
from .replay import devices_in, replay, window_start

DEFAULT_MAX_ENTRIES = 100_000
NAMES_BUDGET_S = 0.1  # the quick scan that names what a cell kept, by default


def cuda_torch() -> Union[Any, Unavailable]:
    """torch, where it can record CUDA allocations here; else why not, in a clause (the
    caller says what it did instead: "the cell ran untraced")."""
    try:
        torch = torch_support.loaded() or torch_support.import_torch()
    except ModuleNotFoundError as error:
        return Unavailable(str(error))
    if torch_support.cuda_version(torch) is None:
        return Unavailable("this torch is a CPU-only build: there is no GPU memory to trace")
    if not torch.cuda.is_available():
        return Unavailable("torch sees no CUDA GPU in this kernel")
    memory = torch.cuda.memory
    if not hasattr(memory, "_record_memory_history") or not hasattr(memory, "_snapshot"):
        return Unavailable(f"torch {torch.__version__} cannot record allocation history")
    return torch


def _users_recording(torch: Any, snapshot: dict) -> bool:
    """Is a recording on (the user's: ours is off between cells)? torch says so where it
    has the getter; else a history in the snapshot tells. (Live allocations keep their
    stacks after a recording is switched off, so they tell nothing.)"""
    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    if enabled is not None:
        return bool(enabled())
    return any(snapshot.get("device_traces", ()))


def allocation_counts(torch: Any) -> dict[int, int]:
    """torch's own count of allocations made so far, per device: what a cell made is the
    difference, against which the history's events are checked (a history that lost some
    of the cell's events has fewer)."""
    return {
        device: int(torch.cuda.memory_stats(device).get("allocation.all.allocated", 0))
        for device in range(torch.cuda.device_count())
    }


def untraced(why: Unavailable) -> str:
    return f"{why.reason}; the cell ran untraced"


class Recorder:
    """One cell's recording: `start()` before it, `stop()` after it (always, also when the
    cell failed) returns its report."""

    def __init__(self, torch: Any, max_entries: int = DEFAULT_MAX_ENTRIES, shell: Any = None):
        if max_entries < 1:
            raise ValueError(f"max_entries must be 1 or more, not {max_entries}")
        self.torch = torch
        self.max_entries = max_entries
        self.shell = shell if shell is not None else notebook_refs.running_shell()
        self.cell = cell_files.running_cell_number(self.shell)
        self.mode = NONE
        self.before: list[list] = []
        self.counts: dict[int, int] = {}  # torch's allocation counts when the cell began

    def start(self) -> None:
        torch = self.torch
        torch.cuda.init()  # the allocator records nothing before CUDA is initialised
        oom.attach(torch)
        oom.forget()
        first = torch.cuda.memory._snapshot()
        self.counts = allocation_counts(torch)
        if _users_recording(torch, first):
            self.mode = USERS
            self.before = [list(trace[-1:]) for trace in first.get("device_traces", [])]
            return
        # no recording is on, and switching one off empties its history: it starts empty
        torch.cuda.memory._record_memory_history(
            "all", context="alloc", stacks="python", max_entries=self.max_entries
        )
        self.mode = OWN

    def stop(self, save: Optional[str] = None) -> TraceReport:
        torch = self.torch
        try:
            snapshot = torch.cuda.memory._snapshot()
            made = {d: n - self.counts.get(d, 0) for d, n in allocation_counts(torch).items()}
        except RuntimeError as error:  # a broken CUDA context (e.g. a device-side assert)
            snapshot = None
            failure = error_text(error)
        finally:
            if self.mode == OWN:
                torch.cuda.memory._record_memory_history(None)
        if snapshot is None:
            return TraceReport(self.cell, self.mode, unavailable=f"no snapshot: {failure}")
        saved = None
        if save is not None:
            with open(save, "wb") as file:
                pickle.dump(snapshot, file)
            saved = os.path.abspath(save)
        return self.analyse(snapshot, saved, made=made)

    def analyse(
        self,
        snapshot: dict,
        saved: Optional[str] = None,
        places: Optional[Places] = None,
        made: Optional[dict[int, int]] = None,
    ) -> TraceReport:
        """The report of `snapshot`, this recorder's window of it. `made`: how many
        allocations torch counted on each device during the cell; a window with fewer
        ``alloc`` events lost some (the history was full) and says so."""
        places = places or Places(self.shell)
        traces = snapshot.get("device_traces", [])
        if self.mode == USERS and not any(traces):
            return TraceReport(
                self.cell,
                self.mode,
                unavailable=(
                    "your own torch.cuda.memory._record_memory_history recording keeps no "
                    "history of events (enabled='state'): left as it is, with nothing to read; "
                    "the cell ran untraced"
                ),
            )
        devices = []
        stacks = True
        for device in devices_in(snapshot):
            history = traces[device] if device < len(traces) else []
            if self.mode == USERS:
                before = self.before[device] if device < len(self.before) else []
                start, lost = window_start(before, history)
                stacks = stacks and all(
                    e.get("frames") for e in history[start:] if e["action"] == "alloc"
                )
            else:
                start, lost = 0, False
            if start >= len(history):
                continue  # nothing happened on this device during the cell
            if made is not None and device in made:  # torch's count of the cell's allocations
                seen = sum(1 for event in history[start:] if event["action"] == "alloc")
                lost = lost or seen < made[device]
            elif self.mode == OWN:  # no count to check against: a full history may have lost some
                lost = len(history) >= self.max_entries
            devices.append(replay(snapshot, device, start, places=places, dropped=lost))
        return TraceReport(
            cell=self.cell,
            recording=self.mode,
            devices=tuple(devices),
            max_entries=self.max_entries if self.mode == OWN else 0,
            saved_to=saved,
            users_stacks=stacks,
        )


def link_names(
    report: TraceReport,
    requested: bool = False,
    namespace: Optional[dict] = None,
    device_type: str = "cuda",
) -> TraceReport:
    """The report with each kept line's holders named: `find_leftovers` over the arrays on
    `device_type`, each line naming the variables whose memory starts at one of its
    addresses (torch's allocator hands each tensor's storage out at its own address); by
    default a scan limited to NAMES_BUDGET_S, `requested`: a full one."""
    from ..leftovers.scan import find_leftovers

    if not any(trace.kept for trace in report.devices):
        return report
    began = time.perf_counter()
    found = find_leftovers(
        device=device_type, namespace=namespace, budget_s=None if requested else NAMES_BUDGET_S
    )
    seconds = time.perf_counter() - began
    names: dict[tuple[str, int], list[str]] = {}
    for entry in found:
        names.setdefault((entry.device, entry.storage_id), []).append(entry.name)
    devices = []
    for trace in report.devices:
        device = f"{device_type}:{trace.device}" if device_type != "cpu" else "cpu"
        kept = tuple(
            dataclasses.replace(
                line,
                names=tuple(
                    name for address in line.addresses for name in names.get((device, address), ())
                ),
            )
            for line in trace.kept
        )
        devices.append(dataclasses.replace(trace, kept=kept))
    link = NameLink(requested=requested, seconds=seconds, complete=found.complete)
    return dataclasses.replace(report, devices=tuple(devices), names=link)


def saved_report(
    snapshot: dict, cells: Optional[dict[str, SavedCell]] = None, cell: Optional[int] = None
) -> TraceReport:
    """The report of a snapshot saved earlier (``--save``, torch's ``_dump_snapshot``), its
    whole history read as one window; `cells` names the cells of the kernel it came from
    (file name -> SavedCell), where this kernel's own cells are not them."""
    recorder = Recorder(torch=None, max_entries=1)
    recorder.mode, recorder.cell = SAVED, cell
    report = recorder.analyse(snapshot, places=Places(recorder.shell, cells))
    return dataclasses.replace(report, max_entries=0)


class Tracing:
    """What `trace_cell()` yields: its `report` is set when the block ends."""

    report: Optional[TraceReport] = None


@contextlib.contextmanager
def trace_cell(
    max_entries: int = DEFAULT_MAX_ENTRIES,
    save: Optional[str] = None,
    names: Optional[bool] = None,
    shell: Any = None,
) -> Iterator[Tracing]:
    """Trace the CUDA memory the block allocates, line by line::

        with trace_cell() as tracing:
            out = model(x)
        print(tracing.report)

    max_entries: the most allocator events kept (each several KB of host memory).
    save: write torch's own snapshot pickle there (pytorch.org/memory_viz opens it).
    names: name what the block kept (`find_leftovers`): None a quick scan (at most
    NAMES_BUDGET_S), True a full one, False none.
    Without CUDA the report says why in one line and the block runs untraced.
    """
    tracing = Tracing()
    torch = cuda_torch()
    if isinstance(torch, Unavailable):
        yield tracing
        cell = cell_files.running_cell_number(shell or notebook_refs.running_shell())
        tracing.report = TraceReport(cell, NONE, unavailable=untraced(torch))
        return
    recorder = Recorder(torch, max_entries, shell)
    recorder.start()
    try:
        yield tracing
    finally:
        report = recorder.stop(save)
        if names is not False and report.unavailable is None:
            report = link_names(report, requested=bool(names))
        tracing.report = report
