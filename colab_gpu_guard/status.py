"""`gpu_status()`: one immutable snapshot of the GPU as NVML sees it beside what this
kernel's allocator holds, rendered as text, HTML and JSON without querying again.

A `GpuStatus` combines:

- ``nvml``: driver / CUDA driver / NVML versions and every GPU (memory, utilisation,
  temperature, power, modes, MIG, ECC, processes) - see `colab_gpu_guard.nvml`;
- ``torch``: torch version, CUDA runtime it was built with, whether CUDA is initialised,
  and the CUDA context's health (`colab_gpu_guard.cuda_health`);
- ``memory``: per CUDA device of this kernel, the caching allocator's allocated / reserved
  bytes beside the bytes NVML charges to this process; the difference is the CUDA context
  plus other libraries (cuBLAS/cuDNN workspaces, other allocators);
- ``host``: runtime (Colab, Kaggle, local), host RAM and this process's resident memory;
- ``leftovers``: the biggest arrays still held between runs (`find_leftovers`), and
  ``history``: per-cell memory history (`memory_history`), when those modules exist;
- ``notes``: what the user should know (no GPU on this Colab runtime, a broken CUDA
  context, NVML not listing this process in a container...).

Nothing here initialises CUDA, imports torch, IPython or NumPy. Every part may be missing
("not available" with a reason) without failing the rest.

JSON (``to_dict()`` / ``to_json()``; ``GpuStatus.from_dict`` reads it back equal) follows
`json_schema()`: the dataclass fields by name, tuples as arrays, missing values as null,
bytes as integers, times as Unix seconds, ``unavailable`` as ``[[field, reason], ...]``.
``schema_version`` is bumped on any incompatible change; `from_dict` refuses other versions.
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import html
import importlib
import json
import os
import platform
import sys
import time
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional, Union

from . import nvml
from .nvml import MigInstance, NvmlDevice, NvmlProcess, NvmlSnapshot
from .serialize import from_data, to_data
from .serialize import json_schema as _json_schema
from .units import NA, USER_VARIABLE, format_bytes

__all__ = [
    "SCHEMA_VERSION",
    "CellRecord",
    "DeviceMemory",
    "GpuStatus",
    "HostInfo",
    "LeftoverEntry",
    "TorchInfo",
    "gpu_status",
    "json_schema",
]

SCHEMA_VERSION = 1
DEFAULT_TOP = 10
DEFAULT_PROCESS_LIMIT = 5
DEFAULT_HISTORY_LIMIT = 20

COLAB_NO_GPU = (
    "this Colab runtime has no GPU: Runtime > Change runtime type > a GPU accelerator "
    "(then rerun your cells)"
)


# ---------------------------------------------------------------- records


@dataclass(frozen=True)
class HostInfo:
    runtime: str  # "Colab", "Kaggle" or "local"
    python: str
    platform: str
    pid: int
    ram_total: Optional[int] = None
    ram_available: Optional[int] = None
    process_rss: Optional[int] = None
    note: Optional[str] = None  # why the RAM figures are missing


@dataclass(frozen=True)
class TorchInfo:
    version: Optional[str] = None  # None: torch is not imported in this process
    cuda_runtime: Optional[str] = None  # the CUDA torch was built with; None: CPU build
    cuda_initialized: bool = False
    device_count: Optional[int] = None  # known once CUDA is initialised
    health: str = "no torch"  # cuda_health state: ok, not initialised, no torch, broken
    health_detail: str = ""


@dataclass(frozen=True)
class DeviceMemory:
    """One CUDA device of this kernel: the caching allocator beside NVML.

    context_and_other = NVML's figure for this process - allocator reserved: the CUDA
    context, library workspaces and any other allocator in the process.
    """

    device: int  # torch's index: cuda:N
    allocated: int
    reserved: int
    peak_allocated: int
    num_ooms: int
    nvml_index: Optional[int] = None  # NVML's index of the GPU (CUDA_VISIBLE_DEVICES remaps)
    mig_index: Optional[int] = None  # the MIG slot, when cuda:N is a MIG device
    uuid: Optional[str] = None
    matched_by: str = "none"  # "uuid", "pci bus id", "index (assumed)" or "none"
    nvml_used_by_this_process: Optional[int] = None
    context_and_other: Optional[int] = None


@dataclass(frozen=True)
class LeftoverEntry:
    name: str
    holder: Optional[str] = None
    shape: Optional[tuple[int, ...]] = None
    dtype: Optional[str] = None
    device: Optional[str] = None
    nbytes: int = 0
    storage_id: Optional[int] = None
    shared_with: tuple[str, ...] = ()
    framework: Optional[str] = None


@dataclass(frozen=True)
class CellRecord:
    cell: Optional[Union[int, str]]  # the execution count (None: run without history)
    allocated_before: Optional[int] = None
    allocated_after: Optional[int] = None
    peak: Optional[int] = None
    reserved_after: Optional[int] = None
    ooms: Optional[int] = None
    nvml_used_after: Optional[int] = None
    rerun_leak: Optional[bool] = None
    leak_bytes: Optional[int] = None
    duration_s: Optional[float] = None
    rerun_of: Optional[int] = None
    rss_after: Optional[int] = None


@dataclass(frozen=True)
class GpuStatus:
    """One snapshot; every view (text, HTML, JSON, the panel) renders from it."""

    schema_version: int
    taken_at: float  # Unix seconds
    duration_ms: float  # how long taking the snapshot took
    host: HostInfo
    torch: TorchInfo
    nvml: NvmlSnapshot
    memory: tuple[DeviceMemory, ...] = ()
    leftovers: Optional[tuple[LeftoverEntry, ...]] = None  # None: not collected
    leftovers_count: int = 0  # all found, before the top-N cut
    leftovers_bytes: int = 0  # all found, each storage counted once
    # of those, what no user variable holds (output history, tracebacks): what
    # gpu_reset() without --all releases; None: not computed (older documents)
    leftovers_freeable_bytes: Optional[int] = None
    leftovers_note: Optional[str] = None
    history: Optional[tuple[CellRecord, ...]] = None
    history_note: Optional[str] = None
    notes: tuple[str, ...] = ()
    process_limit: Optional[int] = DEFAULT_PROCESS_LIMIT  # processes listed per GPU; None: all

    # ------------------------------------------------------------ questions

    @property
    def gpu_count(self) -> int:
        return len(self.nvml.devices)

    @property
    def has_gpu(self) -> bool:
        return self.nvml.available and bool(self.nvml.devices)

    def memory_for(self, nvml_index: int) -> tuple[DeviceMemory, ...]:
        """This kernel's CUDA devices that live on NVML GPU `nvml_index`."""
        return tuple(m for m in self.memory if m.nvml_index == nvml_index)

    # ------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuStatus:
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise ValueError(
                f"GpuStatus schema_version {version!r} is not supported "
                f"(this version reads {SCHEMA_VERSION})"
            )
        return from_data(cls, data)

    @classmethod
    def from_json(cls, text: str) -> GpuStatus:
        return cls.from_dict(json.loads(text))

    # ------------------------------------------------------------ views

    def __str__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text("GpuStatus(...)" if cycle else self.to_text())

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_text(self) -> str:
        return _render_text(self)

    def to_html(self) -> str:
        return _render_html(self)


# ---------------------------------------------------------------- taking the snapshot


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
    probe: synchronise every device (bounded) to find a broken CUDA context.
    """
    started = time.perf_counter()
    taken_at = time.time()
    notes: list[str] = []
    nvml_view = nvml.snapshot(processes=processes)
    host = _host()
    torch_info, torch = _torch(probe)
    memory = _memory(torch, torch_info, nvml_view, notes)
    found: dict[str, Any] = {}
    if leftovers:
        found = _leftovers(namespace, top)
    else:
        found["leftovers_note"] = "not collected"
    cells: dict[str, Any] = {}
    if history:
        cells = _history(history_limit)
    notes.extend(_notes(host, torch_info, nvml_view, memory))
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
    }
    try:
        import psutil

        memory = psutil.virtual_memory()
        rss = psutil.Process().memory_info().rss
    except Exception as error:  # psutil missing or unable to read /proc
        return HostInfo(**base, note=f"host memory not available: {type(error).__name__}")
    return HostInfo(
        **base, ram_total=int(memory.total), ram_available=int(memory.available), process_rss=rss
    )


def _torch(probe: bool) -> tuple[TorchInfo, Any]:
    from . import cuda_health
    from .frameworks import torch as torch_support

    health = cuda_health.health(probe=probe)
    torch = torch_support.loaded()
    if torch is None:
        return TorchInfo(health=health.state, health_detail=health.detail), None
    initialized = torch_support.cuda_initialized(torch)
    return (
        TorchInfo(
            version=torch_support.version(),
            cuda_runtime=torch_support.cuda_version(torch),
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
    from .frameworks import torch as torch_support

    if torch is None or not torch_info.cuda_initialized:
        return ()
    try:
        stats = torch_support.allocator_stats(torch)
    except Exception as error:
        notes.append(f"allocator figures not available: {type(error).__name__}: {error}")
        return ()
    broken = torch_info.health == "broken"
    result = []
    for stat in stats:
        target, mig_slot, nvml_index, matched_by = _match(
            torch, stat.device, view, len(stats), broken
        )
        used = None
        uuid = None
        if target is not None:
            uuid = target.uuid
            parent = view.devices[nvml_index] if nvml_index is not None else None
            used = _used_by_this_process(parent, target)
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
            )
        )
    return tuple(result)


def _match(
    torch: Any, index: int, view: NvmlSnapshot, torch_count: int, broken: bool
) -> tuple[Optional[Union[NvmlDevice, MigInstance]], Optional[int], Optional[int], str]:
    """Which NVML GPU (or MIG instance) is torch's cuda:`index`: by UUID, else PCI bus id,
    else by index when nothing can remap devices. (target, MIG slot, NVML index, how)."""
    if not view.available or not view.devices:
        return None, None, None, "none"
    properties = None
    if not broken:  # a broken context is not asked anything
        try:
            properties = torch.cuda.get_device_properties(index)
        except Exception:
            properties = None
    uuid = str(getattr(properties, "uuid", "") or "")
    if uuid:
        wanted = nvml.normalise_uuid(uuid)
        for device in view.devices:
            if device.uuid and nvml.normalise_uuid(device.uuid) == wanted:
                return device, None, device.index, "uuid"
            for instance in device.mig_instances:
                if instance.uuid and nvml.normalise_uuid(instance.uuid) == wanted:
                    return instance, instance.index, device.index, "uuid"
    bus = _torch_bus_id(properties)
    if bus is not None:
        for device in view.devices:
            if device.pci_bus_id and _normal_bus_id(device.pci_bus_id) == bus:
                return device, None, device.index, "pci bus id"
    remapped = os.environ.get("CUDA_VISIBLE_DEVICES") is not None
    if not remapped and torch_count == len(view.devices) and index < len(view.devices):
        device = view.devices[index]
        if not device.mig_enabled:
            return device, None, device.index, "index (assumed)"
    return None, None, None, "none"


def _torch_bus_id(properties: Any) -> Optional[str]:
    try:
        domain = int(properties.pci_domain_id)
        bus = int(properties.pci_bus_id)
        device = int(properties.pci_device_id)
    except (AttributeError, TypeError, ValueError):
        return None
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _normal_bus_id(bus_id: str) -> str:
    domain, _, rest = bus_id.strip().upper().partition(":")
    return f"{domain[-8:].rjust(8, '0')}:{rest}"


def _used_by_this_process(
    parent: Optional[NvmlDevice], target: Union[NvmlDevice, MigInstance]
) -> Optional[int]:
    if parent is None:
        return None
    if isinstance(target, NvmlDevice):
        return target.used_by_this_process()
    mine = [
        p
        for p in parent.processes or ()
        if p.this_process
        and p.gpu_instance_id == target.gpu_instance_id
        and p.compute_instance_id == target.compute_instance_id
    ]
    if not mine or any(p.used_memory is None for p in mine):
        return None
    return sum(p.used_memory or 0 for p in mine)


def _leftovers(namespace: Optional[dict[str, Any]], top: int) -> dict[str, Any]:
    try:
        from .leftovers import find_leftovers
    except ImportError as error:
        return {"leftovers_note": f"not available (colab_gpu_guard.leftovers: {error})"}
    try:
        found = find_leftovers(namespace=namespace)
    except Exception as error:
        return {"leftovers_note": f"could not be listed: {type(error).__name__}: {error}"}
    # Only the top ones become entries: a notebook may hold 10^5 arrays, and the panel
    # takes a snapshot after every cell. A LeftoverList is one entry per block of memory,
    # biggest first, with its totals, and makes an entry only when it is read; anything
    # else is deduplicated and sorted here.
    total = getattr(found, "total_bytes", None)
    freeable = getattr(found, "freeable_bytes", None)
    if isinstance(total, int) and isinstance(freeable, int) and isinstance(found, Sequence):
        biggest = list(found[: max(0, top)])
    else:
        found = list(found)
        sizes: dict[Any, int] = {}
        freeable = 0
        for item in found:  # a block reached under two entries counts once
            storage = getattr(item, "storage_id", None)
            key = (getattr(item, "device", None), storage) if isinstance(storage, int) else id(item)
            if key not in sizes:
                sizes[key] = _nbytes(item)
                if getattr(item, "holder", None) != USER_VARIABLE:
                    freeable += sizes[key]
        total = sum(sizes.values())
        biggest = heapq.nlargest(max(0, top), found, key=_nbytes)
    return {
        "leftovers": tuple(_leftover_entry(item) for item in biggest),
        "leftovers_count": len(found),
        "leftovers_bytes": total,
        "leftovers_freeable_bytes": freeable,
    }


def _nbytes(item: Any) -> int:
    return int(getattr(item, "nbytes", 0) or 0)


def _leftover_entry(item: Any) -> LeftoverEntry:
    shape = getattr(item, "shape", None)
    try:
        shape = tuple(int(n) for n in shape) if shape is not None else None
    except (TypeError, ValueError):
        shape = None
    storage = getattr(item, "storage_id", None)
    shared = getattr(item, "shared_with", ()) or ()
    return LeftoverEntry(
        name=str(getattr(item, "name", item)),
        holder=_optional_text(getattr(item, "holder", None)),
        shape=shape,
        dtype=_optional_text(getattr(item, "dtype", None)),
        device=_optional_text(getattr(item, "device", None)),
        nbytes=int(getattr(item, "nbytes", 0) or 0),
        storage_id=int(storage) if isinstance(storage, int) else None,
        shared_with=tuple(str(name) for name in shared),
        framework=_optional_text(getattr(item, "framework", None)) or None,
    )


def _history(limit: int) -> dict[str, Any]:
    try:
        tracker = importlib.import_module(f"{__package__}.tracker")
    except ImportError as error:
        return {"history_note": f"not available (colab_gpu_guard.tracker: {error})"}
    try:
        tail = getattr(tracker, "history_tail", None)
        if tail is not None:  # only the shown cells become records
            cells, total = tail(max(0, limit))
        else:
            cells = list(tracker.memory_history())
            total = len(cells)
    except Exception as error:
        return {"history_note": f"could not be read: {type(error).__name__}: {error}"}
    records = tuple(_cell_record(cell) for cell in cells[-max(0, limit) :] if limit > 0)
    note = None if records else "no cells recorded yet"
    if total > len(records):
        note = f"last {len(records)} of {total} cells"
    return {"history": records, "history_note": note}


@functools.cache
def _cell_fields() -> tuple[tuple[str, Any], ...]:
    """(name, kind) of each CellRecord field, kind from ``Optional[kind]``."""
    hints = typing.get_type_hints(CellRecord)
    return tuple(
        (f.name, typing.get_args(hints[f.name])[0] if f.name != "cell" else None)
        for f in dataclasses.fields(CellRecord)
    )


def _cell_record(cell: Any) -> CellRecord:
    values: dict[str, Any] = {}
    for name, kind in _cell_fields():
        value = getattr(cell, name, None)
        if name == "cell":
            if value is None or isinstance(value, (int, str)):
                values["cell"] = value
            else:
                values["cell"] = str(value)
        elif value is not None:
            try:
                values[name] = kind(value)
            except (TypeError, ValueError):
                values[name] = None
    return CellRecord(**values)


def _notes(
    host: HostInfo, torch_info: TorchInfo, view: NvmlSnapshot, memory: tuple[DeviceMemory, ...]
) -> list[str]:
    from . import cuda_health

    notes = []
    if not view.available or not view.devices:
        if host.runtime == "Colab":
            notes.append(COLAB_NO_GPU)
        elif view.available and view.reason("devices") is None:
            notes.append("NVML works but lists no GPU")
    if torch_info.health == "broken":
        notes.append(cuda_health.RESTART_ADVICE)
    if torch_info.version is not None and torch_info.cuda_runtime is None:
        notes.append(f"torch {torch_info.version} is a CPU-only build: it cannot use a GPU")
    elif torch_info.cuda_runtime is not None and not torch_info.cuda_initialized:
        notes.append("CUDA is not initialised in this kernel yet: no allocator figures")
    for item in memory:
        if item.matched_by == "none" and view.available and view.devices:
            notes.append(f"cuda:{item.device} could not be matched to an NVML GPU")
    unmatched = [
        m.device
        for m in memory
        if m.matched_by != "none" and m.reserved > 0 and m.nvml_used_by_this_process is None
    ]
    if unmatched and view.processes_queried:
        mine = any(p.this_process for device in view.devices for p in device.processes or ())
        if not mine:
            notes.append(
                f"NVML lists no process with this kernel's PID {host.pid}: inside a container "
                "NVML reports host PIDs, so per-process figures cannot be matched"
            )
    return notes


# ---------------------------------------------------------------- formatting helpers


def _optional_text(value: Any) -> Optional[str]:
    return None if value is None else str(value)


def _value(value: Any, unit: str = "") -> str:
    if value is None:
        return NA
    if isinstance(value, float):
        return f"{value:.1f}{unit}"
    return f"{value}{unit}"


def _on_off(value: Optional[bool]) -> str:
    return NA if value is None else ("on" if value else "off")


def _when(status: GpuStatus) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(status.taken_at))


def _versions(status: GpuStatus) -> list[str]:
    view, torch = status.nvml, status.torch
    lines = []
    if view.available:
        lines.append(
            f"driver {view.driver_version or NA} | CUDA driver {view.cuda_driver_version or NA}"
            f" | NVML {view.nvml_version or NA}"
        )
    else:
        lines.append(f"NVML not available: {view.error}")
    context = torch.health + (f" ({torch.health_detail})" if torch.health_detail else "")
    if torch.version is None:
        lines.append(f"torch not imported | CUDA context: {context}")
    else:
        runtime = f"CUDA runtime {torch.cuda_runtime}" if torch.cuda_runtime else "CPU-only build"
        lines.append(f"torch {torch.version} | {runtime} | CUDA context: {context}")
    return lines


def _device_title(status: GpuStatus, device: NvmlDevice) -> str:
    cuda = ", ".join(f"cuda:{m.device}" for m in status.memory_for(device.index))
    parts = [f"GPU {device.index}", device.name or NA]
    if cuda:
        parts.append(cuda)
    parts.append(device.uuid or "UUID n/a")
    parts.append(f"PCI {device.pci_bus_id or NA}")
    if device.compute_capability:
        parts.append(f"compute capability {device.compute_capability}")
    if device.lost:
        parts.append("GPU IS LOST")
    return " | ".join(parts)


def _memory_line(device: NvmlDevice) -> str:
    line = f"{format_bytes(device.memory_used)} used"
    if device.memory_reserved is not None:
        line += f" + {format_bytes(device.memory_reserved)} reserved by the driver"
    return (
        f"{line} / {format_bytes(device.memory_total)} total | "
        f"{format_bytes(device.memory_free)} free"
    )


def _load_line(device: NvmlDevice) -> str:
    return (
        f"GPU {_value(device.utilization_gpu, '%')} | memory bus "
        f"{_value(device.utilization_memory, '%')} | {_value(device.temperature_c, ' C')} | "
        f"power {_value(device.power_draw_w, ' W')} / {_value(device.power_limit_w, ' W')}"
    )


def _mode_line(device: NvmlDevice) -> str:
    mig = _on_off(device.mig_enabled)
    if device.mig_pending is not None and device.mig_pending != device.mig_enabled:
        mig += f" (pending {_on_off(device.mig_pending)} after a GPU reset)"
    ecc = _on_off(device.ecc_enabled)
    if device.ecc_errors_uncorrected is not None:
        ecc += f", {device.ecc_errors_uncorrected} uncorrected volatile errors"
    return f"compute mode {device.compute_mode or NA} | MIG {mig} | ECC {ecc}"


def _mig_line(instance: MigInstance) -> str:
    return (
        f"MIG {instance.index}: {instance.name or NA} | {instance.uuid or NA} | GI "
        f"{_value(instance.gpu_instance_id)} CI {_value(instance.compute_instance_id)} | "
        f"{format_bytes(instance.memory_used)} / {format_bytes(instance.memory_total)}"
    )


def _kernel_line(item: DeviceMemory) -> str:
    line = (
        f"cuda:{item.device}: allocated {format_bytes(item.allocated)} | reserved "
        f"{format_bytes(item.reserved)} | peak {format_bytes(item.peak_allocated)}"
    )
    if item.num_ooms:
        line += f" | {item.num_ooms} OOM(s)"
    if item.nvml_used_by_this_process is not None:
        line += (
            f" | NVML {format_bytes(item.nvml_used_by_this_process)} -> CUDA context + "
            f"other libraries {format_bytes(item.context_and_other)}"
        )
    else:
        line += " | NVML figure for this kernel n/a"
    return line


def _shown_processes(status: GpuStatus, device: NvmlDevice) -> tuple[list[NvmlProcess], int]:
    processes = list(device.processes or ())
    limit = status.process_limit
    if limit is None or len(processes) <= limit:
        return processes, 0
    shown = processes[:limit]
    mine = [p for p in processes[limit:] if p.this_process]
    shown.extend(mine)  # this kernel is always listed
    return shown, len(processes) - len(shown)


def _process_label(process: NvmlProcess) -> str:
    label = process.name or "(name n/a)"
    extra = []
    if process.kinds != ("compute",):
        extra.append("+".join(process.kinds))
    if process.gpu_instance_id is not None:
        extra.append(f"MIG GI {process.gpu_instance_id} CI {process.compute_instance_id}")
    if extra:
        label += f" [{', '.join(extra)}]"
    if process.this_process:
        label += "  <- this kernel"
    return label


def _reasons(record: Any) -> str:
    return ", ".join(f"{name} ({why})" for name, why in record.unavailable)


def _leftover_line(entry: LeftoverEntry) -> str:
    parts = [entry.name, format_bytes(entry.nbytes)]
    if entry.device:
        parts.append(entry.device)
    if entry.dtype:
        parts.append(entry.dtype)
    if entry.shape is not None:
        parts.append(str(tuple(entry.shape)))
    if entry.holder:
        parts.append(f"held by {entry.holder}")
    if entry.shared_with:
        parts.append("shares memory with " + ", ".join(entry.shared_with))
    return " | ".join(parts)


def _cell_line(record: CellRecord) -> str:
    change = None
    if record.allocated_before is not None and record.allocated_after is not None:
        change = record.allocated_after - record.allocated_before
    cell = "-" if record.cell is None else record.cell
    line = (
        f"[{cell}] allocated {format_bytes(record.allocated_after)} "
        f"({'+' if (change or 0) >= 0 else ''}{format_bytes(change)}) | peak "
        f"{format_bytes(record.peak)} | reserved {format_bytes(record.reserved_after)}"
    )
    if record.nvml_used_after is not None:
        line += f" | NVML {format_bytes(record.nvml_used_after)}"
    if record.duration_s is not None:
        line += f" | {record.duration_s:.2f} s"
    if record.ooms:
        line += f" | {record.ooms} OOM(s)"
    if record.rerun_of is not None:
        line += f" | rerun of [{record.rerun_of}]"
    if record.rerun_leak:
        line += f" | LEAK on rerun: {format_bytes(record.leak_bytes)}"
    return line


def _leftovers_heading(status: GpuStatus) -> str:
    shown = len(status.leftovers or ())
    return (
        f"leftovers ({shown} of {status.leftovers_count}, "
        f"{format_bytes(status.leftovers_bytes)} in all)"
    )


# ---------------------------------------------------------------- text


def _render_text(status: GpuStatus) -> str:
    lines = [f"GPU status | {status.host.runtime} | {_when(status)} | {status.duration_ms:.1f} ms"]
    lines += [f"  {line}" for line in _versions(status)]
    view = status.nvml
    if view.available and not view.devices and view.reason("devices") is None:
        lines.append("  no GPU visible to NVML")
    if view.unavailable:
        lines.append(f"  not available: {_reasons(view)}")
    for device in view.devices:
        lines.append(_device_title(status, device))
        lines.append(f"  memory       {_memory_line(device)}")
        lines.append(f"  load         {_load_line(device)}")
        lines.append(f"  modes        {_mode_line(device)}")
        for instance in device.mig_instances:
            lines.append(f"  {_mig_line(instance)}")
        for item in status.memory_for(device.index):
            lines.append(f"  this kernel  {_kernel_line(item)}")
        lines.extend(_process_text(status, device))
        if device.unavailable:
            lines.append(f"  not available: {_reasons(device)}")
    for item in status.memory:
        if item.nvml_index is None:
            lines.append(f"this kernel  {_kernel_line(item)}")
    host = status.host
    if host.note:
        lines.append(f"host RAM     {host.note}")
    else:
        lines.append(
            f"host RAM     {format_bytes(host.ram_total)} total | "
            f"{format_bytes(host.ram_available)} available | this kernel "
            f"{format_bytes(host.process_rss)} (PID {host.pid})"
        )
    if status.leftovers is not None:
        lines.append(_leftovers_heading(status))
        lines += [f"  {_leftover_line(entry)}" for entry in status.leftovers]
    elif status.leftovers_note and status.leftovers_note != "not collected":
        lines.append(f"leftovers    {status.leftovers_note}")
    if status.history is not None or status.history_note:
        lines.append("history" + (f" ({status.history_note})" if status.history_note else ""))
        lines += [f"  {_cell_line(record)}" for record in status.history or ()]
    if status.notes:
        lines.append("notes")
        lines += [f"  - {note}" for note in status.notes]
    return "\n".join(lines)


def _process_text(status: GpuStatus, device: NvmlDevice) -> list[str]:
    if device.processes is None:
        if status.nvml.processes_queried:
            return [f"  processes    {NA} ({device.reason('processes') or 'not listed'})"]
        return []
    if not device.processes:
        return ["  processes    none"]
    total = sum(p.used_memory or 0 for p in device.processes)
    lines = [f"  processes    {len(device.processes)}, {format_bytes(total)} in all"]
    shown, hidden = _shown_processes(status, device)
    lines.append(f"  {'':1} {'PID':>9}  {'memory':>10}  name")
    for process in shown:
        mark = "*" if process.this_process else " "
        lines.append(
            f"  {mark} {process.pid:>9}  {format_bytes(process.used_memory):>10}  "
            f"{_process_label(process)}"
        )
    if hidden:
        lines.append(f"    ... and {hidden} more (%gpu_status --processes lists all)")
    return lines


# ---------------------------------------------------------------- HTML

_STYLE = (
    "<style>.cgg-status{font-family:var(--jp-ui-font-family,sans-serif);font-size:13px}"
    ".cgg-status table{border-collapse:collapse;margin:2px 0 8px 0}"
    ".cgg-status td,.cgg-status th{padding:1px 8px;text-align:left;vertical-align:top}"
    ".cgg-status th{font-weight:600}.cgg-status .cgg-na{opacity:.6}"
    ".cgg-status .cgg-me{font-weight:600}.cgg-status .cgg-warn{color:#b00020}</style>"
)


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _row(label: str, value: str) -> str:
    return f"<tr><th>{_e(label)}</th><td>{_e(value)}</td></tr>"


def _render_html(status: GpuStatus) -> str:
    parts = [_STYLE, '<div class="cgg-status">']
    parts.append(
        f"<div><b>GPU status</b> | {_e(status.host.runtime)} | {_e(_when(status))} | "
        f"{status.duration_ms:.1f} ms</div>"
    )
    parts.append("<table>")
    parts += [f"<tr><td>{_e(line)}</td></tr>" for line in _versions(status)]
    parts.append("</table>")
    view = status.nvml
    if view.available and not view.devices and view.reason("devices") is None:
        parts.append("<div>no GPU visible to NVML</div>")
    if view.unavailable:
        parts.append(f'<div class="cgg-na">not available: {_e(_reasons(view))}</div>')
    for device in view.devices:
        parts.append(f"<div><b>{_e(_device_title(status, device))}</b></div><table>")
        parts.append(_row("memory", _memory_line(device)))
        parts.append(_row("load", _load_line(device)))
        parts.append(_row("modes", _mode_line(device)))
        parts += [_row("MIG", _mig_line(instance)) for instance in device.mig_instances]
        parts += [_row("this kernel", _kernel_line(m)) for m in status.memory_for(device.index)]
        parts.append("</table>")
        parts.append(_process_html(status, device))
        if device.unavailable:
            parts.append(f'<div class="cgg-na">not available: {_e(_reasons(device))}</div>')
    unmatched = [m for m in status.memory if m.nvml_index is None]
    if unmatched:
        parts.append("<table>")
        parts += [_row("this kernel", _kernel_line(m)) for m in unmatched]
        parts.append("</table>")
    host = status.host
    host_text = host.note or (
        f"{format_bytes(host.ram_total)} total | {format_bytes(host.ram_available)} available"
        f" | this kernel {format_bytes(host.process_rss)} (PID {host.pid})"
    )
    parts.append(f"<table>{_row('host RAM', host_text)}</table>")
    if status.leftovers is not None:
        parts.append(f"<div><b>{_e(_leftovers_heading(status))}</b></div>")
        if status.leftovers:
            parts.append(
                "<table><tr><th>name</th><th>size</th><th>device</th><th>dtype</th>"
                "<th>shape</th><th>held by</th><th>shares memory with</th></tr>"
            )
            for entry in status.leftovers:
                shape = "" if entry.shape is None else str(tuple(entry.shape))
                parts.append(
                    f"<tr><td><code>{_e(entry.name)}</code></td>"
                    f"<td>{_e(format_bytes(entry.nbytes))}</td><td>{_e(entry.device or '')}</td>"
                    f"<td>{_e(entry.dtype or '')}</td><td>{_e(shape)}</td>"
                    f"<td>{_e(entry.holder or '')}</td>"
                    f"<td>{_e(', '.join(entry.shared_with))}</td></tr>"
                )
            parts.append("</table>")
    elif status.leftovers_note and status.leftovers_note != "not collected":
        parts.append(f'<div class="cgg-na">leftovers: {_e(status.leftovers_note)}</div>')
    if status.history is not None or status.history_note:
        heading = "history" + (f" ({status.history_note})" if status.history_note else "")
        parts.append(f"<div><b>{_e(heading)}</b></div><table>")
        parts += [f"<tr><td>{_e(_cell_line(r))}</td></tr>" for r in status.history or ()]
        parts.append("</table>")
    if status.notes:
        parts.append("<ul>")
        parts += [f'<li class="cgg-warn">{_e(note)}</li>' for note in status.notes]
        parts.append("</ul>")
    parts.append("</div>")
    return "".join(parts)


def _process_html(status: GpuStatus, device: NvmlDevice) -> str:
    if device.processes is None:
        if not status.nvml.processes_queried:
            return ""
        why = device.reason("processes") or "not listed"
        return f'<div class="cgg-na">processes: n/a ({_e(why)})</div>'
    if not device.processes:
        return "<div>processes: none</div>"
    shown, hidden = _shown_processes(status, device)
    rows = ["<table><tr><th>PID</th><th>memory</th><th>name</th></tr>"]
    for process in shown:
        css = ' class="cgg-me"' if process.this_process else ""
        rows.append(
            f"<tr{css}><td>{process.pid}</td><td>{_e(format_bytes(process.used_memory))}</td>"
            f"<td>{_e(_process_label(process))}</td></tr>"
        )
    if hidden:
        rows.append(
            f'<tr><td colspan="3">... and {hidden} more (%gpu_status --processes lists all)'
            "</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)


# ---------------------------------------------------------------- JSON schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `GpuStatus.to_dict()`, built from the records."""
    return _json_schema(GpuStatus, "colab_gpu_guard GpuStatus")
