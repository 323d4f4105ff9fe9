"""colab_gpu_guard: reproducible seeding, GPU memory hygiene and readable CUDA errors for
notebooks. Load it with ``%load_ext colab_gpu_guard``.

The API below works outside notebooks too; the magics are a thin layer over it, imported
only when the extension is loaded.
"""

from __future__ import annotations

from typing import Any

from .seeding import (
    SeedReport,
    current_rank,
    dataloader_generator,
    jax_key,
    seed_all,
    seed_worker,
)

__version__ = "0.1.0"

__all__ = [
    "SeedReport",
    "current_rank",
    "dataloader_generator",
    "jax_key",
    "load_ipython_extension",
    "seed_all",
    "seed_worker",
    "unload_ipython_extension",
]


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext colab_gpu_guard`: register the magics and event callbacks."""
    from . import magics

    magics.load(ipython)


def unload_ipython_extension(ipython: Any) -> None:
    """`%unload_ext colab_gpu_guard`: remove every magic, callback and handler we added."""
    from . import magics

    magics.unload(ipython)
