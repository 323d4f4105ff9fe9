"""A cell's window of torch's allocator history replayed: allocated and reserved bytes
after every event, the peak, what was alive at it and what the cell kept, by line.

Reads torch's snapshot format (``torch.cuda.memory._snapshot()``, documented there):
``segments`` (the allocator's state when the snapshot was taken: each segment's
``total_size`` and its ``blocks``, a live one ``"active_allocated"`` with its ``address``,
``size`` and allocation ``frames``) and ``device_traces`` (per device, the recorded events:
``action``, ``addr``, ``size``, ``frames``). Allocated bytes fall at ``alloc`` and rise
back at ``free_requested`` (where torch's own ``memory_allocated`` counter falls: a block
waiting on another stream is no longer allocated); reserved moves at ``segment_alloc`` /
``segment_free`` (``segment_map`` / ``segment_unmap`` for expandable segments).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, NamedTuple, Optional

from .kinds import BEFORE, CELL, SourceLine
from .lines import Places
from .records import DeviceTrace, Landmark, LineMemory, ModuleLine, OomEvent, TimelinePoint

TIMELINE_POINTS = 240
LANDMARKS = 3
MAX_ADDRESSES = 64
UNIT = 512  # torch's caching allocator's smallest piece, and the unit it rounds up to


def unit(nbytes: int) -> int:
    """`nbytes` rounded up as torch's caching allocator rounds a request (kMinBlockSize;
    where PYTORCH_CUDA_ALLOC_CONF sets roundup_power2_divisions it rounds further)."""
    return max(UNIT, -(-nbytes // UNIT) * UNIT)


_RESERVE = {"segment_alloc": 1, "segment_map": 1, "segment_free": -1, "segment_unmap": -1}


class Alive(NamedTuple):
    nbytes: int
    frames: Any  # the allocation event's frames; None: allocated before the window
    event: int


def event_key(entry: dict) -> tuple:
    """What identifies one recorded event across two snapshots of the same history."""
    return (entry.get("action"), entry.get("addr"), entry.get("size"), entry.get("time_us"))


def window_start(before: list, after: list) -> tuple[int, bool]:
    """Where the events recorded after `before` was read start in `after` (the same
    device's history, read later), and whether some of them may be lost: the last event of
    `before` is looked up in `after`; when the ring buffer has overwritten it, the whole of
    `after` is the window and (True) its start may be missing."""
    if not before:
        return 0, False
    last = event_key(before[-1])
    for index in range(len(after) - 1, -1, -1):
        if event_key(after[index]) == last:
            return index + 1, False
    return 0, True


def _device_segments(snapshot: dict, device: int) -> list:
    return [seg for seg in snapshot.get("segments", ()) if seg.get("device", 0) == device]


def _live_at_end(snapshot: dict, device: int) -> dict[int, Alive]:
    live: dict[int, Alive] = {}
    for seg in _device_segments(snapshot, device):
        address = seg.get("address", 0)
        for block in seg.get("blocks", ()):
            if block.get("state") == "active_allocated":
                live[block.get("address", address)] = Alive(block["size"], block.get("frames"), -1)
            address += block["size"]
    return live


def replay(
    snapshot: dict,
    device: int,
    start: int = 0,
    *,
    places: Places,
    dropped: bool = False,
    top: int = 8,
) -> DeviceTrace:
    """One device's window (events from `start` on) of `snapshot`, replayed."""
    traces = snapshot.get("device_traces", [])
    window = traces[device][start:] if device < len(traces) else []
    end_live = _live_at_end(snapshot, device)
    end_reserved = sum(seg["total_size"] for seg in _device_segments(snapshot, device))

    # The state at the window's start: the end state with the window's events undone.
    # Events carry the size asked for; torch counts the piece of memory that served it
    # (`unit`), known exactly for what is alive at the end, so each allocation's size is
    # taken from there when it is still alive, and rounded up to the unit otherwise.
    sizes = [0] * len(window)
    state: dict[int, int] = {addr: alive.nbytes for addr, alive in end_live.items()}
    reserved = end_reserved
    for index in range(len(window) - 1, -1, -1):
        entry = window[index]
        action = entry["action"]
        if action == "alloc":
            sizes[index] = state.pop(entry["addr"], unit(entry["size"]))
        elif action == "free_requested":
            sizes[index] = state[entry["addr"]] = unit(entry["size"])
        elif action in _RESERVE:
            reserved -= _RESERVE[action] * entry["size"]
    before = state
    start_reserved = reserved
    start_allocated = sum(before.values())

    allocated = peak = start_allocated
    peak_event = -1
    peak_reserved = reserved
    points: list[int] = []
    oom: Optional[tuple[int, dict]] = None
    made: dict[int, int] = {}  # address -> event, of the window's allocations still alive
    for index, entry in enumerate(window):
        action = entry["action"]
        if action == "alloc":
            made[entry["addr"]] = index
            allocated += sizes[index]
            if allocated > peak:
                peak, peak_event = allocated, index
        elif action == "free_requested":
            made.pop(entry["addr"], None)
            allocated -= sizes[index]
        elif action in _RESERVE:
            reserved += _RESERVE[action] * entry["size"]
            peak_reserved = max(peak_reserved, reserved)
        elif action == "oom":
            oom = (index, entry)
        points.append(allocated)

    at_peak = _alive_after(window, sizes, before, peak_event)
    kept = {
        addr: Alive(end_live[addr].nbytes, window[index].get("frames") or (), index)
        for addr, index in made.items()
        if addr in end_live
    }
    return DeviceTrace(
        device=device,
        event_count=len(window),
        start_allocated=start_allocated,
        end_allocated=sum(alive.nbytes for alive in end_live.values()),
        peak_allocated=peak,
        peak_event=peak_event,
        start_reserved=start_reserved,
        peak_reserved=peak_reserved,
        end_reserved=end_reserved,
        at_peak=by_line(at_peak.values(), places, top=top),
        kept=by_line(kept.items(), places, top=top, addresses=True),
        timeline=_timeline(points, peak_event),
        landmarks=_landmarks(window, places),
        oom=_oom(oom, places),
        dropped=dropped,
    )


def _alive_after(
    window: list, sizes: list[int], before: dict[int, int], last: int
) -> dict[int, Alive]:
    alive = {addr: Alive(nbytes, None, -1) for addr, nbytes in before.items()}
    for index in range(last + 1):
        entry = window[index]
        action = entry["action"]
        if action == "alloc":
            alive[entry["addr"]] = Alive(sizes[index], entry.get("frames") or (), index)
        elif action == "free_requested":
            alive.pop(entry["addr"], None)
    return alive


def by_line(
    allocations: Iterable, places: Places, *, top: int, addresses: bool = False
) -> tuple[LineMemory, ...]:
    """Allocations grouped by the user's line, the biggest `top` lines (the device's totals
    count the rest). `allocations`: Alive records, or (address, Alive) pairs when
    `addresses` (each line then keeps its first addresses)."""
    totals: dict[SourceLine, list] = defaultdict(lambda: [0, 0, defaultdict(lambda: [0, 0]), []])
    for item in allocations:
        address, alive = item if addresses else (0, item)
        if alive.frames is None:
            where, module = SourceLine(BEFORE), None
        else:
            where, module = places.where(alive.frames)
        total = totals[where]
        total[0] += alive.nbytes
        total[1] += 1
        if module is not None and where.kind == CELL:
            inner = total[2][module]
            inner[0] += alive.nbytes
            inner[1] += 1
        if addresses and len(total[3]) < MAX_ADDRESSES:
            total[3].append(address)
    lines = [
        LineMemory(
            where=where,
            nbytes=nbytes,
            count=count,
            inner=tuple(
                sorted(
                    (ModuleLine(module, size, n) for module, (size, n) in inner.items()),
                    key=lambda m: -m.nbytes,
                )[:3]
            ),
            addresses=tuple(found),
        )
        for where, (nbytes, count, inner, found) in totals.items()
    ]
    lines.sort(key=lambda line: (-line.nbytes, line.where))
    return tuple(lines[:top])


def _timeline(points: list[int], peak_event: int) -> tuple[TimelinePoint, ...]:
    """At most TIMELINE_POINTS points: each the highest of its stretch of events (so no
    spike is lost), the peak's own event always among them."""
    if len(points) <= TIMELINE_POINTS:
        return tuple(TimelinePoint(index, value) for index, value in enumerate(points))
    step = len(points) / TIMELINE_POINTS
    kept = []
    for bucket in range(TIMELINE_POINTS):
        lo, hi = int(bucket * step), int((bucket + 1) * step)
        if lo <= peak_event < hi:
            kept.append(TimelinePoint(peak_event, points[peak_event]))
            continue
        index = max(range(lo, hi), key=points.__getitem__)
        kept.append(TimelinePoint(index, points[index]))
    return tuple(kept)


def _landmarks(window: list, places: Places) -> tuple[Landmark, ...]:
    """The biggest allocation of each of the (at most LANDMARKS) lines that made the
    biggest ones, in the order they happened."""
    allocs = [
        (entry["size"], index) for index, entry in enumerate(window) if entry["action"] == "alloc"
    ]
    found: dict[SourceLine, Landmark] = {}
    for size, index in sorted(allocs, key=lambda pair: (-pair[0], pair[1]))[:50]:
        where = places.where(window[index].get("frames") or ())[0]
        if where not in found:
            found[where] = Landmark(index, size, where)
            if len(found) == LANDMARKS:
                break
    return tuple(sorted(found.values(), key=lambda mark: mark.event))


def _oom(found: Optional[tuple[int, dict]], places: Places) -> Optional[OomEvent]:
    if found is None:
        return None
    index, entry = found
    where = places.where(entry.get("frames") or ())[0]
    return OomEvent(index, entry["size"], entry.get("device_free", 0), where)


def devices_in(snapshot: dict) -> list[int]:
    """The devices with recorded events or live allocations in `snapshot`."""
    with_events = {i for i, trace in enumerate(snapshot.get("device_traces", [])) if trace}
    with_memory = {
        seg.get("device", 0)
        for seg in snapshot.get("segments", ())
        if any(b.get("state") == "active_allocated" for b in seg.get("blocks", ()))
    }
    return sorted(with_events | with_memory)


def live_by_line(snapshot: dict, device: int, *, places: Places, top: int = 8):
    """What is alive in `snapshot` (its end state), by line: each allocation's stack from
    its last ``alloc`` event in the history, else the stack the live allocation carries;
    with neither, allocated before the recording (BEFORE). Also the allocated total."""
    traces = snapshot.get("device_traces", [])
    made: dict[int, Any] = {}
    for entry in traces[device] if device < len(traces) else ():
        if entry["action"] == "alloc":
            made[entry["addr"]] = entry.get("frames") or ()
    live = []
    for addr, alive in _live_at_end(snapshot, device).items():
        frames = made.get(addr, alive.frames or None)
        live.append(Alive(alive.nbytes, frames, -1))
    return by_line(live, places, top=top), sum(alive.nbytes for alive in live)
