"""Seeds for DataLoader workers, distributed ranks and JAX keys, derived from the last
seed_all seed (or the one a parent process passed down)."""

from __future__ import annotations

from typing import Optional

from ..frameworks import jax as jax_support
from ..frameworks import numpy as numpy_support
from ..frameworks import python_random
from ..frameworks import torch as torch_support
from .seed import SEED_MAX, current_rank, derive_seed, inherited_seed, validate_seed

__all__ = ["current_rank", "dataloader_generator", "jax_key", "seed_worker"]


def _base_seed(seed: object) -> int:
    if seed is not None:
        return validate_seed(seed)
    inherited = inherited_seed()
    if inherited is not None:
        return inherited
    torch = torch_support.loaded()
    if torch is not None:
        return int(torch.initial_seed()) & SEED_MAX
    raise ValueError("no seed given and none set yet: call seed_all(SEED) first or pass seed=")


def dataloader_generator(seed: object = None, device: object = None):
    """A `torch.Generator` for `DataLoader(generator=...)`, seeded from (seed, rank).

    The DataLoader draws its shuffle order and each worker's base seed from this generator,
    so each rank gets its own reproducible stream. seed=None uses the last seed_all seed.
    device: where its draws happen (default the CPU); a loader shuffling on a GPU default
    device (`torch.set_default_device('cuda')`) needs `device='cuda'`.
    """
    torch = torch_support.loaded() or torch_support.import_torch()
    generator = torch.Generator() if device is None else torch.Generator(device=device)
    generator.manual_seed(derive_seed("dataloader", _base_seed(seed), current_rank()))
    return generator


class SeedWorker:
    """`DataLoader(worker_init_fn=seed_worker)`: give each rank's workers their own torch,
    Python `random` and NumPy streams.

    torch already seeds `random`, NumPy and torch in every worker (since torch 1.9, in
    torch/utils/data/_utils/worker.py) from the loader's base seed and the worker id, so
    the workers of one loader do not repeat each other. But the base seed is drawn from
    the loader's generator (or torch's global RNG), which a DDP script usually seeds alike
    on every rank: without rank-aware seeding, rank 1's workers draw exactly rank 0's
    augmentations (torchvision's v2 transforms draw from torch). This reseeds torch,
    `random` and NumPy from (torch's worker seed, rank, worker id), each from its own
    derived seed: reproducible, different per worker, per rank and per epoch (the worker
    seed is drawn anew each epoch). `generator=dataloader_generator()` also gives each rank
    its own shuffle order.

    The rank is torch.distributed's (else $RANK), read in the process that starts the
    workers: a spawned worker (``multiprocessing_context="spawn"``) has no process group
    of its own, so `seed_worker` takes its parent's rank with it when it is sent there.
    """

    def __init__(self, rank: Optional[int] = None) -> None:
        self._rank = rank

    def __call__(self, worker_id: int) -> None:
        torch = torch_support.loaded() or torch_support.import_torch()
        rank = self._rank if self._rank is not None else current_rank()
        parts = (int(torch.initial_seed()), rank, int(worker_id))
        torch.manual_seed(derive_seed("worker torch", *parts))
        value = derive_seed("worker", *parts)
        python_random.seed(value)
        if numpy_support.installed():
            numpy_support.seed(value)

    def __reduce__(self) -> tuple:
        # pickled in the parent as a DataLoader starts spawned workers: the rank read
        # there (where torch.distributed is initialised) goes with it
        return (SeedWorker, (self._rank if self._rank is not None else current_rank(),))

    def __repr__(self) -> str:
        rank = "" if self._rank is None else f" (rank {self._rank})"
        return f"<colab_gpu_guard.seed_worker{rank}>"


seed_worker = SeedWorker()


def jax_key(seed: object = None):
    """`jax.random.key(seed)` for the given seed, or the last seed_all seed (imports JAX)."""
    return jax_support.key(_base_seed(seed))
