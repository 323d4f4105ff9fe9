"""Seeds for DataLoader workers, distributed ranks and JAX keys, derived from the last
seed_all seed."""

from __future__ import annotations

import os

from ..frameworks import jax as jax_support
from ..frameworks import numpy as numpy_support
from ..frameworks import python_random
from ..frameworks import torch as torch_support
from .seed import SEED_MAX, derive_seed, last_seed, validate_seed


def current_rank() -> int:
    """This process's rank: torch.distributed when initialised, else $RANK, else 0."""
    torch = torch_support.loaded()
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:  # torch.distributed: a process group torn down meanwhile
        pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _base_seed(seed: object) -> int:
    if seed is not None:
        return validate_seed(seed)
    if last_seed() is not None:
        return last_seed()
    torch = torch_support.loaded()
    if torch is not None:
        return int(torch.initial_seed()) & SEED_MAX
    raise ValueError("no seed given and none set yet: call seed_all(SEED) first or pass seed=")


def dataloader_generator(seed: object = None):
    """A `torch.Generator` for `DataLoader(generator=...)`, seeded from (seed, rank).

    The DataLoader draws its shuffle order and each worker's base seed from this generator,
    so each rank gets its own reproducible stream. seed=None uses the last seed_all seed.
    """
    torch = torch_support.loaded() or torch_support.import_torch()
    generator = torch.Generator()
    generator.manual_seed(derive_seed("dataloader", _base_seed(seed), current_rank()))
    return generator


def seed_worker(worker_id: int) -> None:
    """`DataLoader(worker_init_fn=seed_worker)`: give each rank's workers their own Python
    `random` and NumPy streams.

    torch already seeds `random`, NumPy and torch in every worker (since torch 1.9, in
    torch/utils/data/_utils/worker.py) from the loader's base seed and the worker id, so
    the workers of one loader do not repeat each other. But the base seed is drawn from
    the loader's generator (or torch's global RNG), which a DDP script usually seeds alike
    on every rank: without rank-aware seeding, rank 1's workers draw exactly rank 0's
    augmentations. This reseeds `random` and NumPy from (torch's worker seed, rank, worker
    id): reproducible, and different per worker and per rank. For torch's own draws in
    workers (and the shuffle order), pass `generator=dataloader_generator()`, seeded from
    (seed, rank).
    """
    torch = torch_support.loaded() or torch_support.import_torch()
    value = derive_seed("worker", int(torch.initial_seed()), current_rank(), int(worker_id))
    python_random.seed(value)
    if numpy_support.installed():
        numpy_support.seed(value)


def jax_key(seed: object = None):
    """`jax.random.key(seed)` for the given seed, or the last seed_all seed (imports JAX)."""
    return jax_support.key(_base_seed(seed))
