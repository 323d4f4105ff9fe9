"""colab_gpu_guard: reproducible seeding, GPU memory hygiene and readable CUDA errors for
notebooks. Load it with ``%load_ext colab_gpu_guard``.

The API below works outside notebooks too; the magics are a thin layer over it, imported
only when the extension is loaded.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "CellMemory",
    "Diagnosis",
    "GpuStatus",
    "Leftover",
    "ReleaseReport",
    "SeedReport",
    "TraceReport",
    "gpu_status",
    "current_rank",
    "isolated_rng",
    "restore_rng_state",
    "rng_state",
    "RngState",
    "ResumableEpoch",
    "ReproDiff",
    "ReproRecord",
    "repro_diff",
    "repro_record",
    "dataloader_generator",
    "find_leftovers",
    "format_history",
    "gpu_reset",
    "jax_key",
    "load_ipython_extension",
    "memory_history",
    "panel",
    "reference",
    "seed_all",
    "seed_worker",
    "trace_cell",
    "unload_ipython_extension",
]


# Public name -> module holding it. Imported on first use so that `%load_ext` stays cheap.
_EXPORTS = {
    "SeedReport": "seeding",
    "current_rank": "seeding",
    "dataloader_generator": "seeding",
    "jax_key": "seeding",
    "seed_all": "seeding",
    "seed_worker": "seeding",
    "RngState": "seeding",
    "isolated_rng": "seeding",
    "restore_rng_state": "seeding",
    "rng_state": "seeding",
    "ResumableEpoch": "seeding",
    "ReproDiff": "seeding",
    "ReproRecord": "seeding",
    "repro_diff": "seeding",
    "repro_record": "seeding",
    "Diagnosis": "advisor",
    "advise": "advisor",
    "classify": "advisor",
    "GpuStatus": "status",
    "gpu_status": "status",
    "ReleaseReport": "reset",
    "gpu_reset": "reset",
    "Leftover": "leftovers",
    "find_leftovers": "cells.notebook_leftovers",
    "CellMemory": "cells.tracker",
    "format_history": "cells.history_text",
    "memory_history": "cells.tracker",
    "panel": "ipython.panel",
    "reference": "ipython.magics.reference",
    "TraceReport": "trace",
    "trace_cell": "trace",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'colab_gpu_guard' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext colab_gpu_guard`: register the magics and event callbacks."""
    from . import ipython as layer

    layer.load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext colab_gpu_guard`: remove every magic, callback and handler we added."""
    from . import ipython as layer

    layer.unload(ipython)
