"""A GPU's memory as NVML reports it: `read`, the one reader of every "NVML used" figure
the package shows, and `used_memory()` / `used_by_process()`, the cheap readings taken
after each cell. Figures come from the v2 memory call where it exists, else v1 (`V2`/`V1`)."""

from __future__ import annotations

from typing import Any, NamedTuple, Optional

from . import lib
from .lib import Query

# NVML has two memory calls. v1 (``nvmlMemory_t``) counts what the driver and firmware set
# aside as used ("Sum of Reserved and Allocated device memory"): 480 MiB on an idle H100
# with no process at all. v2 (``nvmlMemory_v2_t``, R510 drivers and later, nvidia-ml-py's
# ``nvmlMemory_v2``) reports that part as ``reserved`` and leaves it out of ``used``; on an
# H100 (driver 580) total == used + reserved + free exactly.
V2 = "v2"  # used excludes what the driver reserves (reported apart)
V1 = "v1"  # used includes what the driver reserves

# How views label a figure from each call.
INCLUDES_RESERVED = "including driver-reserved memory"


class UsedMemory(NamedTuple):
    """NVML's "used" bytes per GPU (NVML's order; every process's memory) and the memory
    call they came from: `V2` (driver-reserved memory excluded) or `V1` (included; on a
    machine where some GPUs answered v1 and others v2, `V1`)."""

    per_device: tuple[int, ...]
    call: str

    @property
    def total(self) -> int:
        return sum(self.per_device)


def read(query: Query, handle: Any, try_v2: bool = True) -> tuple[Optional[Any], str, bool]:
    """NVML's memory structure for `handle` (None with the reason under "memory" in
    `query`), the call that gave it, and whether the v2 call is missing here (binding
    without ``nvmlMemory_v2`` or without the ``version`` parameter, driver without the
    call or that version of it): then later readings need not try it."""
    version = getattr(query.module, "nvmlMemory_v2", None)
    missing = version is None
    if try_v2 and version is not None:
        ok, memory, kind = query.attempt("nvmlDeviceGetMemoryInfo", handle, version=version)
        if ok:
            return memory, V2, False
        if query.lost:
            query.fail("memory")
            return None, V1, False
        # NotSupported or NoPermission for v2 alone: v1 may still answer, this time.
        missing = kind in lib.MISSING or kind in ("AttributeError", "TypeError")
    return query.call("memory", "nvmlDeviceGetMemoryInfo", handle), V1, missing


# ---------------------------------------------------------------- the per-cell reading


class _Handles(NamedTuple):
    token: object  # lib.token() when the handles were looked up
    handles: tuple[Any, ...]
    try_v2: bool


_cache: Optional[_Handles] = None


def used_memory() -> Optional[UsedMemory]:
    """Every GPU's NVML "used" bytes now, and which memory call gave them; None without
    NVML, or when a GPU cannot be read (lost, an error). The reading taken after each cell
    (in the tracker's thread) and by `%gpu_reset`: one memory call per GPU, the handles
    looked up once per NVML initialisation (they stay valid until nvmlShutdown)."""
    reading, failure = _read_all()
    if reading is None and failure == "NVMLError_Uninitialized":
        lib.forget()  # someone else shut NVML down: start it again, once
        reading, _ = _read_all()
    return reading


def _read_all() -> tuple[Optional[UsedMemory], Optional[str]]:
    """The reading, or None and the NVML error that stopped it."""
    global _cache
    module, _failure = lib.initialised()
    if module is None:
        return None, None
    query = Query(module)
    cache = _handles(query)
    used = []
    call = V2
    for handle in cache.handles if cache is not None else ():
        memory, this_call, v2_missing = read(query, handle, cache.try_v2)
        value = lib.ulonglong(getattr(memory, "used", None))
        if value is None:
            cache = None
            break
        if v2_missing and cache.try_v2:
            cache = cache._replace(try_v2=False)  # this driver or binding has no v2
        if this_call == V1:
            call = V1
        used.append(value)
    _cache = cache  # None: look the handles up again next time (a GPU lost, NVML restarted)
    if cache is None:
        error = query.last_error
        return None, None if error is None else type(error).__name__
    return UsedMemory(tuple(used), call), None


def _handles(query: Query) -> Optional[_Handles]:
    """The GPUs' handles: the ones looked up since NVML was last initialised, else new."""
    cache = _cache
    if cache is None or cache.token is not lib.token():
        cache = _open(query)
    return cache


def used_by_process(pid: int) -> Optional[int]:
    """The bytes NVML charges process `pid` over every GPU now: its compute and graphics
    entries (one per MIG instance; an entry in both lists counted once, as `snapshot`
    counts it); 0 when no GPU lists `pid`. None without NVML, when a GPU's processes
    cannot be listed (no permission, not supported) and when NVML does not report the
    memory of an entry of `pid`. Uses the handles `used_memory` looked up: read after
    each cell in the tracker's thread, for a kernel whose CUDA memory torch does not count."""
    global _cache
    module, _failure = lib.initialised()
    if module is None:
        return None
    query = Query(module)
    cache = _cache = _handles(query)
    if cache is None:
        return None
    total = 0
    for handle in cache.handles:
        listed = lib.process_entries(query, handle)
        entries: dict[tuple[Optional[int], Optional[int]], Optional[int]] = {}
        for _kind, entry in listed or ():
            if int(entry.pid) != pid:
                continue
            key = (
                lib.uint(getattr(entry, "gpuInstanceId", None)),
                lib.uint(getattr(entry, "computeInstanceId", None)),
            )
            used = lib.ulonglong(getattr(entry, "usedGpuMemory", None))
            known = entries.get(key)
            entries[key] = used if known is None else max(known, used or 0)
        if listed is None or any(used is None for used in entries.values()):
            return None
        total += sum(used or 0 for used in entries.values())
    return total


def _open(query: Query) -> Optional[_Handles]:
    count = query.call("devices", "nvmlDeviceGetCount")
    if count is None:
        return None
    handles = []
    for index in range(int(count)):
        handle = query.call("handle", "nvmlDeviceGetHandleByIndex", index)
        if handle is None:
            return None
        handles.append(handle)
    return _Handles(lib.token(), tuple(handles), True)
