"""Releasing an out-of-memory error's traceback frames, and saying what that freed.

Before the frames are cleared, the arrays their locals reach are found by the leftovers scan
(its walk calls no user code and keeps weakrefs only; a time budget bounds it); after the
clear and a ``gc.collect()``, the weakrefs say which blocks of memory are gone. Bytes are
counted once per block (a view and its base are one). Only function frames are measured and
named: a cell's module-level frame keeps its namespace (the notebook's variables), so
clearing it frees nothing.
"""

from __future__ import annotations

import gc
import itertools
from dataclasses import dataclass, field
from types import FrameType
from typing import Any, Optional

from .. import notebook_refs
from ..units import format_bytes

SCAN_BUDGET_S = 0.25  # the walk of the frames' locals; measuring what it found costs more
# Past this many arrays (or items in one container among the locals), what the release
# freed is not measured: proving it costs about 10 us per array, and an out-of-memory
# error must not keep the user waiting seconds for a note.
MEASURE_LIMIT = 20_000
_SIZED = (list, tuple, dict, set, frozenset)
_NAMED = 3  # functions named in the note, then "+N more"


@dataclass
class FramesRelease:
    """What clearing a traceback's frames did: ``functions``, the function frames cleared
    (by function name, outermost first); ``held_bytes``, the arrays their locals reached,
    of which ``freed_bytes`` (and ``freed_by_device``) are proven gone since (every weakref
    to the block dead, a torch storage's own included) and ``unchecked_bytes`` could not be
    proven either way (no weakref could be taken); the rest is still alive. ``noun``:
    "tensors" when every array was torch's; ``complete``: the search went to the end within
    its budget; ``measured``: the search ran at all."""

    functions: list[str] = field(default_factory=list)
    held_bytes: int = 0
    freed_bytes: int = 0
    unchecked_bytes: int = 0
    freed_by_device: dict[str, int] = field(default_factory=dict)
    noun: str = "tensors"
    complete: bool = True
    measured: bool = False
    too_many: int = 0  # not measured: this many arrays or items were among the locals

    def note(self) -> Optional[str]:
        """The diagnosis's note; None when no function frame was cleared."""
        if not self.functions:
            return None
        frames = "frame" if len(self.functions) == 1 else "frames"
        text = f"Released the traceback {frames} of {_named(self.functions)}"
        single = len(self.functions) == 1
        them, held = ("it", "it") if single else ("them", "they")
        debug = (
            f"`%debug` on this error shows none of {'its' if single else 'their'} local variables."
        )
        if self.too_many:
            return (
                f"{text}; what that freed was not measured ({self.too_many:,} arrays or items "
                f"in {'its' if single else 'their'} locals: too many to check quickly; "
                f"%gpu_status shows what is still held); {debug}"
            )
        if not self.measured:
            return f"{text}; {debug}"
        unchecked = self.unchecked_bytes
        kept = self.held_bytes - self.freed_bytes - unchecked
        if self.freed_bytes:
            least = "" if self.complete else "at least "
            text += f": {least}{format_bytes(self.freed_bytes)} of {self.noun} freed"
            text += _devices(self.freed_by_device)
            more = []
            if kept > 0:
                more.append(f"{format_bytes(kept)} more {held} held is still referenced elsewhere")
            if unchecked:
                more.append(f"{format_bytes(unchecked)} more could not be checked")
            return f"{text}{' (' + '; '.join(more) + ')' if more else ''}; {debug}"
        if kept > 0:
            text += (
                f"; the memory of the {self.noun} {held} held ({format_bytes(kept)}) is still "
                "referenced elsewhere"
            )
            if unchecked:
                text += f" (whether {format_bytes(unchecked)} more was freed could not be checked)"
            else:
                text += ", so nothing was freed"
            return f"{text}; {debug}"
        if unchecked:
            return (
                f"{text}; whether the {self.noun} {held} held ({format_bytes(unchecked)}) were "
                f"freed could not be checked; {debug}"
            )
        if not self.complete:
            return (
                f"{text}; the search for {self.noun} in {them} stopped at its "
                f"{SCAN_BUDGET_S:g} s budget and none it found was freed; {debug}"
            )
        return f"{text}; {held} held no {self.noun}, so nothing was freed; {debug}"


def _named(functions: list[str]) -> str:
    """'train_step()', 'Model.forward()', 'step() (3 frames)', 'a(), b(), c() +2 more'
    (a nested function by its own name, not 'outer.<locals>.inner')."""
    counts: dict[str, int] = {}
    for qualname in functions:
        name = qualname.rpartition(".<locals>.")[2]
        counts[name] = counts.get(name, 0) + 1
    names = [
        f"{name}()" + (f" ({count} frames)" if count > 1 else "") for name, count in counts.items()
    ]
    more = len(names) - _NAMED
    return ", ".join(names[:_NAMED]) + (f" +{more} more" if more > 0 else "")


def _devices(by_device: dict[str, int]) -> str:
    """' on cuda:0', or ' (cuda:0 3 MiB, cpu 1 MiB)' where several."""
    if len(by_device) == 1:
        return f" on {next(iter(by_device))}"
    ranked = sorted(by_device.items(), key=lambda item: -item[1])
    return " (" + ", ".join(f"{device} {format_bytes(size)}" for device, size in ranked) + ")"


def release_frames(exc: BaseException) -> FramesRelease:
    """Clear the finished frames of `exc`'s traceback (and of its chained exceptions') and
    measure what that freed. The frames' values are never held past the clear."""
    frames = notebook_refs.finished_frames(exc)
    functions = [frame for frame, _exited in frames if notebook_refs.is_function_frame(frame)]
    too_many = _largest_local(functions)
    try:
        from ..leftovers import dropping

        found = _search(functions) if functions and too_many <= MEASURE_LIMIT else None
        if found is not None and len(found.walker.found.rows) > MEASURE_LIMIT:
            too_many, found = len(found.walker.found.rows), None
        proofs = dropping.storage_proofs(found) if found is not None else {}
    except Exception:  # the scan meets the frames' user objects: released, unmeasured
        found, proofs = None, {}
    # named in the note: the user's frames only (IPython's and ours held bookkeeping)
    named = [
        notebook_refs.frame_function(frame)
        for frame in functions
        if notebook_refs.holds_locals(frame) and not notebook_refs.bookkeeping_frame(frame)
    ]
    del functions
    cleared = notebook_refs.clear_frames(frames)
    release = FramesRelease(named if cleared else [])
    if too_many > MEASURE_LIMIT:
        release.too_many = too_many
    del frames
    gc.collect()
    if found is not None and release.functions:
        try:
            _measure(release, found, proofs)
        except Exception:  # torch storages of user arrays: released, unmeasured
            release = FramesRelease(release.functions)
    return release


def _largest_local(frames: list[FrameType]) -> int:
    """The most items any one built-in container among the frames' locals holds (its
    C-level length: no user code runs); 0 when none can be read."""
    largest = 0
    for frame in frames:
        try:
            values = list(frame.f_locals.values())
        except Exception:  # a frame's locals: a user's mapping where exec gave one
            continue
        for value in values:
            kind = type(value)
            if kind in _SIZED:
                largest = max(largest, kind.__len__(value))
        del values
    return largest


def _search(frames: list[FrameType]) -> Any:
    """The leftovers scan of the frames' locals (weakrefs kept), or None."""
    from ..leftovers import scan

    namespace: dict[str, Any] = {}
    try:
        for index, frame in enumerate(frames):
            function = notebook_refs.frame_function(frame)
            try:
                # on Python < 3.13 the frame's own snapshot: clear_frame empties it
                local_vars = frame.f_locals
                pairs = list(local_vars.items())
            except Exception:  # a frame's locals: a user's mapping where exec gave one
                continue
            del local_vars
            for name, value in pairs:
                if type(name) is str:
                    namespace[f"<frame {index}: {function}() local {name!r}>"] = value
            del pairs
        return scan(
            namespace=namespace, keep_refs=True, budget_s=SCAN_BUDGET_S, variables_only=True
        )
    finally:
        namespace.clear()  # never keep the frames' values alive past their clear


def _measure(release: FramesRelease, found: Any, proofs: dict) -> None:
    """Fill in what the scan saw and what of it is gone now (each pass over the scan's
    references is C-level: a frame may hold 10^6 tensors)."""
    from ..leftovers import dropping
    from ..leftovers.rows import ROW_FRAMEWORK

    walker = found.walker
    saved = walker.graphs.saved  # what autograd graphs saved, by storage key
    now = dropping.states(found)
    unchecked = {key for key, weak in proofs.items() if weak is None}
    if now.unproven is not None:  # arrays no weakref could be taken to
        unchecked.update(itertools.compress(found.keys, now.unproven))
    unchecked.update(key for key, entry in saved.items() if entry.weak is None)
    alive = dropping.alive(proofs)
    freed = dropping.released(found, now) - unchecked - alive
    release.freed_bytes = dropping.nbytes(found, freed)
    release.unchecked_bytes = dropping.nbytes(found, unchecked)
    rows_gone = not found.keys or (now.dead is not None and False not in now.dead)
    saved_gone = all(entry.weak is not None and entry.weak() is None for entry in saved.values())
    if rows_gone and saved_gone and not unchecked and not alive:  # the usual case: all went
        release.held_bytes = release.freed_bytes
    else:
        release.held_bytes = dropping.nbytes(found, set(found.keys) | saved.keys())
    devices = set(walker.found.devices) | {entry.info.device for entry in saved.values()}
    if len(devices) == 1:
        release.freed_by_device = {devices.pop(): release.freed_bytes} if freed else {}
    else:
        by_device: dict[str, set] = {}
        for key, device in zip(found.keys, walker.found.devices):
            if key in freed:
                by_device.setdefault(device, set()).add(key)
        for key, entry in saved.items():
            if key in freed:
                by_device.setdefault(entry.info.device, set()).add(key)
        release.freed_by_device = {
            device: dropping.nbytes(found, keys) for device, keys in by_device.items()
        }
    frameworks = set(map(ROW_FRAMEWORK, walker.found.rows))
    release.noun = "tensors" if frameworks <= {"torch"} else "arrays"
    release.complete = found.complete
    release.measured = True
    dropping.forget_weakrefs(found)
