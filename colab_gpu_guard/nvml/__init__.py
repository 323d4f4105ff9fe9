"""What NVML (the NVIDIA driver's management library) says about this machine's GPUs:
`snapshot()` (one immutable `NvmlSnapshot`) and `used_memory()` (the cheap reading taken
after each cell and by `%gpu_reset`). This package imports neither IPython nor torch.
"""

from __future__ import annotations

# `lib` is the only module that imports ``pynvml``; `records` holds the immutable records
# (what an `NvmlSnapshot` holds: see `snapshot.py`). `snapshot()` and `used_memory()` both
# take "used" from `memory.read` (the v2 memory call, else v1, saying which).
from .lib import (
    initialised,
    known_unavailable,
    reason_for,
    reset,
    set_pynvml,
)
from .memory import INCLUDES_RESERVED, V1, V2, UsedMemory, used_by_process, used_memory
from .records import MigInstance, NvmlDevice, NvmlProcess, NvmlSnapshot, normalise_uuid
from .snapshot import COMPUTE_MODES, snapshot

__all__ = [
    "COMPUTE_MODES",
    "INCLUDES_RESERVED",
    "MigInstance",
    "NvmlDevice",
    "NvmlProcess",
    "NvmlSnapshot",
    "UsedMemory",
    "V1",
    "V2",
    "initialised",
    "known_unavailable",
    "normalise_uuid",
    "reason_for",
    "reset",
    "set_pynvml",
    "snapshot",
    "used_by_process",
    "used_memory",
]
