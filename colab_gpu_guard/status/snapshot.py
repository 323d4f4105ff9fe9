"""The `GpuStatus` snapshot: its records, JSON (``to_dict`` / ``from_dict``) and schema.

Every view renders from one snapshot without querying again: `text.render_text`,
`html.render_html`, and the panel's fragments (`panel_html`, `chart`). Taking one is
`collect.gpu_status`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from ..cells.tracker import CellMemory
from ..leftovers.groups import LeftoverGroup
from ..leftovers.records import Leftover
from ..nvml import NvmlSnapshot
from ..serialize import from_versioned, to_data
from ..serialize import json_schema as _json_schema
from .html import render_html
from .text import render_text

SCHEMA_VERSION = 1
DEFAULT_PROCESS_LIMIT = 5


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
    process: str = "kernel"  # what this process is: "kernel" (an IPython shell runs in it)
    # or "process" (a script, `python -m colab_gpu_guard status`, a `!` subprocess)


@dataclass(frozen=True)
class TorchInfo:
    version: Optional[str] = None  # None: torch is not imported in this process
    cuda_runtime: Optional[str] = None  # the CUDA torch was built with; None: CPU build
    hip_runtime: Optional[str] = None  # the ROCm (HIP) torch was built with, on AMD GPUs
    cuda_initialized: bool = False
    device_count: Optional[int] = None  # known once CUDA is initialised
    health: str = "torch not imported"  # a cuda_health state: ok, busy, broken, ...
    health_detail: str = ""
    # torch not imported here: the installed distribution's version (from its metadata, not
    # an import: the CLI never imports torch), None where torch is not installed
    installed_version: Optional[str] = None

    @property
    def cpu_only(self) -> bool:
        """torch is imported and built for neither CUDA nor ROCm."""
        return self.version is not None and not (self.cuda_runtime or self.hip_runtime)


@dataclass(frozen=True)
class DeviceMemory:
    """One CUDA device of this kernel: the caching allocator beside NVML.

    context_and_other = NVML's figure for this process - allocator reserved: the CUDA
    context, library workspaces and any other allocator in the process.
    nvml_identified_by: how this kernel was found in NVML's process list on that GPU:
    "pid"; "memory" (no PID matched - a container's PID namespace - and one process's
    memory fits this kernel's, see `matching.find_by_memory`); "not identified" (no PID
    matched and no single process fits); "not listed" (NVML lists no process at all on a
    GPU where this kernel has a context); "" (not looked for: no context there, processes
    not asked for or not available, GPU not matched).
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
    nvml_identified_by: str = ""


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
    leftovers: Optional[tuple[Leftover, ...]] = None  # None: not collected; the biggest
    leftovers_count: int = 0  # all found, before the top-N cut
    leftovers_bytes: int = 0  # all found, each storage counted once
    # of those, what no user variable holds (output history, tracebacks): what
    # gpu_reset() without --all releases; None: not computed (older documents)
    leftovers_freeable_bytes: Optional[int] = None
    leftovers_note: Optional[str] = None
    # the leftovers by the root holding them (hidden holders first), the biggest `top`
    # groups with their biggest entries; None: not collected (older documents)
    leftover_groups: Optional[tuple[LeftoverGroup, ...]] = None
    leftover_groups_count: int = 0  # all groups, before the top-N cut
    history: Optional[tuple[CellMemory, ...]] = None  # the last cells, oldest first
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
        return from_versioned(
            cls,
            data,
            SCHEMA_VERSION,
            lambda found: (
                f"GpuStatus schema_version {found!r} is not supported "
                f"(this version reads {SCHEMA_VERSION})"
            ),
        )

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
        return render_text(self)

    def to_html(self) -> str:
        return render_html(self)


# What one leftovers scan fills in a `GpuStatus`, its note aside: the panel carries them
# over to a newer snapshot while the cells changed nothing the scan looked at.
SCANNED_FIELDS = (
    "leftovers",
    "leftovers_count",
    "leftovers_bytes",
    "leftovers_freeable_bytes",
    "leftover_groups",
    "leftover_groups_count",
)


# ---------------------------------------------------------------- JSON schema


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `GpuStatus.to_dict()`, built from the records."""
    return _json_schema(GpuStatus, "colab_gpu_guard GpuStatus")
