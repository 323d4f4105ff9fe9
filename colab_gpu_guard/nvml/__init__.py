"""What NVML (the NVIDIA driver's management library) says about this machine's GPUs.

`snapshot()` returns one immutable `NvmlSnapshot` (see `snapshot.py` for what it holds);
`used_per_device()` is the cheap reading taken after each cell. `lib` is the only module
that imports ``pynvml``; `records` holds the immutable records. This package imports
neither IPython nor torch.
"""

from __future__ import annotations

from .lib import initialised, known_unavailable, reason_for, reset, set_pynvml
from .records import MigInstance, NvmlDevice, NvmlProcess, NvmlSnapshot, normalise_uuid
from .snapshot import COMPUTE_MODES, snapshot, used_per_device

__all__ = [
    "COMPUTE_MODES",
    "MigInstance",
    "NvmlDevice",
    "NvmlProcess",
    "NvmlSnapshot",
    "initialised",
    "known_unavailable",
    "normalise_uuid",
    "reason_for",
    "reset",
    "set_pynvml",
    "snapshot",
    "used_per_device",
]
