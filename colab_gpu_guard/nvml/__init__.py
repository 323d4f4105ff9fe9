"""What NVML (the NVIDIA driver's management library) says about this machine's GPUs.

`snapshot()` returns one immutable `NvmlSnapshot` (see `snapshot.py` for what it holds);
`used_memory()` is the cheap reading taken after each cell and by `%gpu_reset`. Both take
"used" from `memory.read` (the v2 memory call, else v1, saying which). `lib` is the only
module that imports ``pynvml``; `records` holds the immutable records. This package imports
neither IPython nor torch.
"""

from __future__ import annotations

from .lib import initialised, known_unavailable, reason_for, reset, set_pynvml
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
