"""`gpu_status()`: one immutable snapshot of the GPU as NVML sees it beside what this
kernel's allocator holds, rendered as text, HTML and JSON without querying again.
Nothing here initialises CUDA or imports torch, IPython or NumPy; what a snapshot holds
and its JSON are described in docs/status.md."""

from __future__ import annotations

from .collect import DEFAULT_HISTORY_LIMIT, DEFAULT_TOP, detect_runtime, gpu_status
from .notes import COLAB_NO_GPU
from .snapshot import (
    DEFAULT_PROCESS_LIMIT,
    SCHEMA_VERSION,
    DeviceMemory,
    GpuStatus,
    HostInfo,
    TorchInfo,
    json_schema,
)

__all__ = [
    "COLAB_NO_GPU",
    "DEFAULT_HISTORY_LIMIT",
    "DEFAULT_PROCESS_LIMIT",
    "DEFAULT_TOP",
    "SCHEMA_VERSION",
    "DeviceMemory",
    "GpuStatus",
    "HostInfo",
    "TorchInfo",
    "detect_runtime",
    "gpu_status",
    "json_schema",
]
