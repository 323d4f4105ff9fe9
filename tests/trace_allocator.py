"""Constructed CUDA allocator snapshots in torch's own ``_snapshot()`` format, for the trace
tests on a machine without a GPU (tests/unit/test_trace_builder.py proves torch's own tools
read them).

`Allocator` models torch's caching allocator just enough: sizes rounded up to 512 bytes
(events carry the size asked for, as torch's do; the memory counts the rounded size),
each allocation served from a cached free segment of its size or a new segment
(``segment_alloc``), frees cached (``free_requested`` then ``free_completed``), and
``empty_cache`` returning free segments (``segment_free``).
"""

from __future__ import annotations

import copy

ROUND = 512


def frames(*places: tuple[str, int, str]) -> list[dict]:
    """Frames innermost first, as torch lists them: (filename, line, function name)."""
    return [{"filename": f, "line": line, "name": name} for f, line, name in places]


class Allocator:
    def __init__(self, devices: int = 1, record: bool = True) -> None:
        self.segments: list[dict] = []
        self.traces: list[list[dict]] = [[] for _ in range(devices)]
        self.record = record
        self.next_address = 0x7F0000000000
        self.clock = 1_700_000_000_000_000
        self.live: dict[int, dict] = {}  # address -> segment

    def _event(self, device: int, action: str, size: int, stack=None, **fields) -> None:
        if not self.record:
            return
        self.clock += 7
        entry = {"action": action, **fields, "size": size, "stream": 0}
        if stack is not None:
            entry["frames"] = stack
        entry["time_us"] = self.clock
        self.traces[device].append(entry)

    def alloc(self, nbytes: int, stack=None, device: int = 0) -> int:
        size = -(-nbytes // ROUND) * ROUND
        for seg in self.segments:
            block = seg["blocks"][0]
            if seg["device"] == device and block["state"] == "inactive" and block["size"] == size:
                break
        else:
            seg = {
                "device": device,
                "address": self.next_address,
                "total_size": size,
                "allocated_size": 0,
                "active_size": 0,
                "requested_size": 0,
                "stream": 0,
                "segment_type": "large" if size > 1 << 20 else "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": [],
                "blocks": [
                    {
                        "address": self.next_address,
                        "size": size,
                        "requested_size": 0,
                        "state": "inactive",
                        "frames": [],
                    }
                ],
            }
            self.next_address += size + (1 << 21)
            self.segments.append(seg)
            self._event(device, "segment_alloc", size, stack, addr=seg["address"])
        block = seg["blocks"][0]
        block.update(state="active_allocated", requested_size=nbytes, frames=stack or [])
        seg.update(allocated_size=size, active_size=size, requested_size=nbytes)
        self._event(device, "alloc", nbytes, stack, addr=seg["address"])  # as asked, as torch
        self.live[seg["address"]] = seg
        return seg["address"]

    def free(self, address: int, stack=None) -> None:
        seg = self.live.pop(address)
        block = seg["blocks"][0]
        asked = block["requested_size"]
        self._event(seg["device"], "free_requested", asked, stack, addr=address)
        self._event(seg["device"], "free_completed", asked, stack, addr=address)
        block.update(state="inactive", requested_size=0, frames=[])
        seg.update(allocated_size=0, active_size=0, requested_size=0)

    def oom(self, nbytes: int, device_free: int, stack=None, device: int = 0) -> None:
        self._event(device, "oom", nbytes, stack, device_free=device_free)

    def empty_cache(self) -> None:
        for seg in list(self.segments):
            if seg["blocks"][0]["state"] == "inactive":
                self.segments.remove(seg)
                self._event(seg["device"], "segment_free", seg["total_size"], addr=seg["address"])

    def allocated(self, device: int = 0) -> int:
        return sum(s["allocated_size"] for s in self.segments if s["device"] == device)

    def reserved(self, device: int = 0) -> int:
        return sum(s["total_size"] for s in self.segments if s["device"] == device)

    def snapshot(self) -> dict:
        return copy.deepcopy(
            {
                "segments": self.segments,
                "device_traces": self.traces,
                "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "expandable_segments": False},
            }
        )
