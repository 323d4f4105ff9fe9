"""`gpu_status()`: one immutable snapshot of the GPU as NVML sees it beside what this
kernel's allocator holds, rendered as text, HTML and JSON without querying again.

A `GpuStatus` combines:

- ``nvml``: driver / CUDA driver / NVML versions and every GPU (memory, utilisation,
  temperature, power, modes, MIG, ECC, processes) - see `colab_gpu_guard.nvml`;
- ``torch``: torch version, CUDA runtime it was built with, whether CUDA is initialised,
  and the CUDA context's health (`colab_gpu_guard.cuda_health`);
- ``memory``: per CUDA device of this kernel, the caching allocator's allocated / reserved
  bytes beside the bytes NVML charges to this process (its entry found by PID, or in a
  container's PID namespace by memory, and saying which); the difference is the CUDA
  context plus other libraries (their kernels, other allocators);
- ``host``: runtime (Colab, Kaggle, local), host RAM and this process's resident memory;
- ``leftovers``: the biggest arrays still held between runs (`find_leftovers`), and
  ``history``: per-cell memory history (`memory_history`), when those modules exist;
- ``notes``: what the user should know (no GPU on this Colab runtime, a broken CUDA
  context, NVML not listing this process in a container...).

Nothing here initialises CUDA, imports torch, IPython or NumPy. Every part may be missing
("not available" with a reason) without failing the rest.

Modules: `snapshot` (the records, JSON), `collect` (taking one), `matching` (which NVML
device is which torch device, which NVML process is this kernel), `text` and `html` (the
views; a lost GPU is a banner with its fix in each), `panel_html` and `chart` (the
widget panel's sections).

JSON (``to_dict()`` / ``to_json()``; ``GpuStatus.from_dict`` reads it back equal) follows
`json_schema()`: the dataclass fields by name, tuples as arrays, missing values as null,
bytes as integers, times as Unix seconds, ``unavailable`` as ``[[field, reason], ...]``.
``schema_version`` is bumped on any incompatible change; `from_dict` refuses other versions.
"""

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
