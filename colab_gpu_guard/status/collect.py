"""Taking one `GpuStatus` snapshot: NVML, torch's allocator, the host, leftovers, history.

Nothing here initialises CUDA, imports torch, IPython or NumPy. Every part may be missing
("not available" with a reason) without failing the rest.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import sys
import time
from typing import Any, Optional

from .. import host_memory, notebook_refs, nvml
from ..nvml import NvmlDevice, NvmlSnapshot
from ..units import unavailable
from .matching import (
    KernelOn,
    find_by_memory,
    mark_by_memory,
    match_device,
    used_by_this_process,
    without_process_names,
)
from .notes import status_notes
from .snapshot import (
    DEFAULT_PROCESS_LIMIT,
    SCHEMA_VERSION,
    DeviceMemory,
    GpuStatus,
    HostInfo,
    TorchInfo,
)

DEFAULT_TOP = 10
DEFAULT_HISTORY_LIMIT = 20
LEFTOVERS_BUDGET_S = 2.0  # the leftovers scan of a snapshot (%gpu_status, each panel refresh)


def gpu_status(
    leftovers: bool = True,
    *,
    history: bool = False,
    processes: bool = True,
    namespace: Optional[dict[str, Any]] = None,
    top: int = DEFAULT_TOP,
    history_limit: int = DEFAULT_HISTORY_LIMIT,
    process_limit: Optional[int] = DEFAULT_PROCESS_LIMIT,
    probe: bool = False,
) -> GpuStatus:
    """Take one `GpuStatus` snapshot. Never raises for a missing GPU, driver or module.

    leftovers: list the `top` biggest arrays still held (``find_leftovers``), looked up in
        `namespace` (default: the running IPython user namespace).
    history: add the last `history_limit` cells' memory history (``memory_history``).
    processes: list the processes on each GPU (needed for "this kernel" NVML figures).
    process_limit: how many processes per GPU the text and HTML views list (None: all).
    probe: synchronise the devices this process has a CUDA context on (bounded) to tell a
        busy GPU from a broken context (and clear a broken mark the context proves wrong).
    """
    started = time.perf_counter()
    taken_at = time.time()
    notes: list[str] = []
    nvml_view = nvml.snapshot(processes=processes)
    host = _host()
    torch_info, torch = _torch(probe)
    memory = _memory(torch, torch_info, nvml_view, notes)
    nvml_view, memory = _identify_kernel(torch, torch_info, nvml_view, memory)
    found: dict[str, Any] = {}
    if leftovers:
        found = leftovers_fields(namespace, top)
        notes.extend(found.pop("scan_notes", ()))
    else:
        found["leftovers_note"] = "not collected"
    cells: dict[str, Any] = {}
    if history:
        cells = _history(history_limit)
    notes.extend(status_notes(host, torch_info, nvml_view, memory))
    return GpuStatus(
        schema_version=SCHEMA_VERSION,
        taken_at=taken_at,
        duration_ms=(time.perf_counter() - started) * 1000.0,
        host=host,
        torch=torch_info,
        nvml=nvml_view,
        memory=memory,
        notes=tuple(dict.fromkeys(notes)),
        process_limit=process_limit,
        **found,
        **cells,
    )


def detect_runtime() -> str:
    if "google.colab" in sys.modules or any(
        key in os.environ for key in ("COLAB_RELEASE_TAG", "COLAB_GPU", "COLAB_BACKEND_VERSION")
    ):
        return "Colab"
    if "KAGGLE_KERNEL_RUN_TYPE" in os.environ or "KAGGLE_URL_BASE" in os.environ:
        return "Kaggle"
    return "local"


def _host() -> HostInfo:
    base = {
        "runtime": detect_runtime(),
        "python": platform.python_version(),
        "platform": sys.platform,
        "pid": os.getpid(),
        "process": "kernel" if notebook_refs.running_shell() is not None else "process",
    }
    try:
        ram = host_memory.host_ram()
    except ImportError:  # installed without its dependencies
        return HostInfo(
            **base, note="host memory not available: psutil is not installed (pip install psutil)"
        )
    except Exception as error:  # psutil's own psutil.Error (a process it may not read)
        return HostInfo(**base, note=unavailable(error, "host memory not available").reason)
    return HostInfo(
        **base, ram_total=ram.total, ram_available=ram.available, process_rss=ram.process_rss
    )


def _torch(probe: bool) -> tuple[TorchInfo, Any]:
    from .. import cuda_health
    from ..frameworks import torch as torch_support

    health = cuda_health.health(probe=probe)
    torch = torch_support.loaded()
    if torch is None:
        installed = torch_support.version() if torch_support.installed() else None
        return TorchInfo(
            health=health.state,
            health_detail=health.detail,
            installed_version=None if installed == "unknown" else installed,
        ), None
    initialized = torch_support.cuda_initialized(torch)
    return (
        TorchInfo(
            version=torch_support.version(),
            cuda_runtime=torch_support.cuda_version(torch),
            hip_runtime=torch_support.hip_version(torch),
            cuda_initialized=initialized,
            device_count=torch_support.cuda_device_count(torch) if initialized else None,
            health=health.state,
            health_detail=health.detail,
        ),
        torch,
    )


def _memory(
    torch: Any, torch_info: TorchInfo, view: NvmlSnapshot, notes: list[str]
) -> tuple[DeviceMemory, ...]:
    from ..frameworks import torch as torch_support

    if torch is None or not torch_info.cuda_initialized:
        return ()
    try:
        stats = torch_support.allocator_stats(torch)
    except Exception as error:  # torch's allocator (a build or state we do not know)
        notes.append(unavailable(error, "allocator figures not available").reason)
        return ()
    broken = torch_info.health == "broken"
    result = []
    for stat in stats:
        target, mig_slot, nvml_index, matched_by = match_device(
            torch, stat.device, view, len(stats), broken
        )
        used = None
        uuid = None
        if target is not None:
            uuid = target.uuid
            parent = view.devices[nvml_index] if nvml_index is not None else None
            used = used_by_this_process(parent, target)
        result.append(
            DeviceMemory(
                device=stat.device,
                allocated=stat.allocated,
                reserved=stat.reserved,
                peak_allocated=stat.peak_allocated,
                num_ooms=stat.num_ooms,
                nvml_index=nvml_index,
                mig_index=mig_slot,
                uuid=uuid,
                matched_by=matched_by,
                nvml_used_by_this_process=used,
                context_and_other=None if used is None else used - stat.reserved,
                nvml_identified_by="pid" if used is not None else "",
            )
        )
    return tuple(result)


def _identify_kernel(
    torch: Any, torch_info: TorchInfo, view: NvmlSnapshot, memory: tuple[DeviceMemory, ...]
) -> tuple[NvmlSnapshot, tuple[DeviceMemory, ...]]:
    """When NVML lists no process with this kernel's PID (a container's PID namespace),
    find it by memory on the GPUs where it has a CUDA context, and mark it so; else mark
    those GPUs "not identified". The view is returned with the match marked."""
    if not memory or not view.processes_queried:
        return view, memory
    if any(p.this_process for device in view.devices for p in device.processes or ()):
        return view, memory  # found by PID
    with_context = _devices_with_context(torch, torch_info, memory)
    places = {}
    unlisted = set()
    for item in memory:
        if item.device not in with_context or item.nvml_index is None:
            continue
        device = view.devices[item.nvml_index]
        if device.processes is None:
            continue  # could not be listed: the views say why
        if not device.processes:
            unlisted.add(item.device)  # listed, and none: not even this kernel
            continue
        target: Any = device
        if item.mig_index is not None:
            target = next((m for m in device.mig_instances if m.index == item.mig_index), None)
            if target is None:
                continue
        places[item.device] = KernelOn(item.nvml_index, target, item.reserved)
    if places:
        # NVML lists host PIDs; looked up here, a number names this container's process of
        # that number, or none: the names would be wrong, so none are shown.
        view = without_process_names(view)
    pid = find_by_memory(view, list(places.values()))
    if pid is not None:
        view = mark_by_memory(view, pid)
    result = []
    for item in memory:
        place = places.get(item.device)
        if place is None:
            if item.device in unlisted:
                item = dataclasses.replace(item, nvml_identified_by="not listed")
            result.append(item)
            continue
        used = None
        if pid is not None:
            parent = view.devices[place.nvml_index]  # as marked
            target = parent if isinstance(place.target, NvmlDevice) else place.target
            used = used_by_this_process(parent, target)
        result.append(
            dataclasses.replace(
                item,
                nvml_used_by_this_process=used,
                context_and_other=None if used is None else used - item.reserved,
                nvml_identified_by="memory" if used is not None else "not identified",
            )
        )
    return view, tuple(result)


def _devices_with_context(
    torch: Any, torch_info: TorchInfo, memory: tuple[DeviceMemory, ...]
) -> set[int]:
    """The CUDA devices this kernel has a context on (the driver says, creating nothing);
    with a broken context, or a torch that cannot say, those where torch reserved memory."""
    from ..frameworks import torch as torch_support

    if torch_info.health != "broken":
        try:
            return set(torch_support.devices_with_context(torch))
        except AttributeError:  # a torch-like module without torch._C: judged by memory
            pass
    return {item.device for item in memory if item.reserved > 0}


def leftovers_fields(namespace: Optional[dict[str, Any]], top: int) -> dict[str, Any]:
    """The leftovers fields of a `GpuStatus` (the scan within its budget, its notes apart):
    what `gpu_status` puts in the snapshot, and what the panel refreshes alone."""
    from ..cells.notebook_leftovers import find_leftovers

    try:
        found = find_leftovers(namespace=namespace, budget_s=LEFTOVERS_BUDGET_S)
    except Exception as error:  # the scan meets every user object: the rest still shows
        return {"leftovers_note": unavailable(error, "could not be listed").reason}
    scan_notes = []
    if found.unfinished:  # what was found so far is listed; the note says what was not searched
        scan_notes.append(
            f"leftovers incomplete: the scan stopped at its {LEFTOVERS_BUDGET_S:g} s budget;"
            f" not searched to the end: {'; '.join(found.unfinished)} (find_leftovers("
            "budget_s=None) searches everything)"
        )
    # What else the list says it could not see (graphs not measured, no framework imported).
    scan_notes += [f"leftovers: {note}" for note in found.limits]
    # Only the top ones become entries: a notebook may hold 10^5 arrays, and the panel
    # takes a snapshot after every cell. A LeftoverList is one entry per block of memory,
    # biggest first, with its totals, and makes an entry only when it is read.
    groups = found.groups()
    return {
        "leftovers": tuple(found[: max(0, top)]),
        "leftovers_count": len(found),
        "leftovers_bytes": found.total_bytes,
        "leftovers_freeable_bytes": found.freeable_bytes,
        "leftover_groups": tuple(groups[: max(0, top)]),
        "leftover_groups_count": len(groups),
        "scan_notes": scan_notes,
    }


def _history(limit: int) -> dict[str, Any]:
    from ..cells import tracker

    cells, total = tracker.history_tail(max(0, limit))  # only the shown cells become records
    records = tuple(cells[-limit:]) if limit > 0 else ()
    note = None if records else "no cells recorded yet"
    if total > len(records):
        note = f"last {len(records)} of {total} cells"
    return {"history": records, "history_note": note}
