"""%seed_all --every-cell: reseed every already-imported RNG before each cell."""

from __future__ import annotations

import sys
from typing import Any

from ..frameworks import cupy as cupy_support
from ..frameworks import python_random
from ..frameworks import tensorflow as tensorflow_support
from ..frameworks import torch as torch_support
from . import seed as seed_module
from .seed import derive_seed, validate_seed


class CellReseeder:
    """Reseeds every already-imported RNG before each cell, from (base seed, cell source),
    so a cell draws the same numbers each time it runs, whatever ran before it.

    Runs on IPython's pre_run_cell: never imports anything, never builds a report.
    """

    _CACHED_SOURCES = 1024

    def __init__(self, base_seed: int) -> None:
        self.base_seed = validate_seed(base_seed)
        self._seeds: dict[str, int] = {}  # cell source -> its seed (reruns skip the hash)

    def seed_for(self, source: str) -> int:
        seed = self._seeds.get(source)
        if seed is None:
            if len(self._seeds) >= self._CACHED_SOURCES:
                self._seeds.clear()
            seed = self._seeds[source] = derive_seed(self.base_seed, source)
        return seed

    def __call__(self, info: Any = None) -> None:
        source = getattr(info, "raw_cell", None) or ""
        reseed_loaded(self.seed_for(source))

    def rebase(self, base_seed: int) -> None:
        """Reseed every cell from `base_seed` from now on."""
        self.base_seed = validate_seed(base_seed)
        self._seeds.clear()

    def follow_seed_all(self) -> None:
        """Take every later seed_all seed as the base (the magic's and Python's calls)."""
        seed_module.follow_new_seeds(self.rebase)

    def stop_following(self) -> None:
        if active_reseeder() is self:
            seed_module.follow_new_seeds(None)


def active_reseeder() -> Any:
    """The CellReseeder that follows seed_all now, if per-cell reseeding is on."""
    return getattr(seed_module.new_seed_listener(), "__self__", None)


def reseed_loaded(value: int) -> None:
    """Seed the RNGs of frameworks already in sys.modules (no imports, no report).

    The per-cell fast path, with what `seed_all` seeds: for torch the CPU generator and,
    once CUDA is up, each device's generator directly (what `torch.manual_seed` does minus
    its ~150 us of lazy-call bookkeeping; no CUDA context is created, a device without one
    keeps the seed until its first use); before CUDA starts, a deferred seed queued in
    torch's own slot for it. CuPy: see `frameworks.cupy.seed`.
    """
    python_random.seed_fast(value)
    modules = sys.modules
    numpy_random = modules.get("numpy.random")  # never import it (lazy in NumPy 2)
    if numpy_random is not None and hasattr(numpy_random, "seed"):
        numpy_random.seed(value)
    torch = modules.get("torch")
    if torch is not None and hasattr(torch, "default_generator"):
        torch.default_generator.manual_seed(value)
        if torch_support.cuda_initialized(torch):
            torch_support.seed_cuda_generators(torch, value)
        elif torch_support.cuda_version(torch) is not None or getattr(torch.version, "hip", None):
            torch_support.queue_cuda_seed_all(torch, value)
        accelerators = torch_support.other_accelerators(torch)
        if accelerators:
            if "mps" in accelerators:
                torch.mps.manual_seed(value)
            if "xpu" in accelerators:
                torch.xpu.manual_seed_all(value)
    if "tensorflow" in modules and tensorflow_support.loaded() is not None:
        tensorflow_support.seed(value)
    if "cupy" in modules and cupy_support.loaded() is not None:
        cupy_support.seed(value)
