"""Exact mid-epoch resume of a DataLoader: `ResumableEpoch` iterates one epoch and can
checkpoint it at any batch; a later `ResumableEpoch(loader, resume=checkpoint)` goes on
with the very batches, augmentations and main-process draws the interrupted run had next.

A new iterator over a shuffling DataLoader draws a new permutation (and its workers' base
seed) from the loader's generator, or torch's global RNG without one: restoring a state
taken mid-epoch and iterating again starts another epoch. So the checkpoint keeps the RNG
state from the epoch's start as well as the one at the checkpoint: resuming restores the
first, makes the iterator (the same permutation and worker seeds), loads and drops the
batches already done (so each worker's augmentation stream reaches the same point), then
restores the second. The dropped batches cost their loading time. The loader's own
generator (``generator=``, or its sampler's) is captured with the rest, named for where it
was found.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Optional

from ..frameworks import torch as torch_support
from .rng_state import Generators, RngState, _named, restore_rng_state, rng_state


@dataclass(frozen=True)
class EpochCheckpoint:
    """Where an epoch stood: its RNG state at the start, the batches done, the RNG state
    after them. Plain values: pickle it (or put it in a torch.save dict)."""

    start: RngState
    batches_done: int
    now: RngState

    def __str__(self) -> str:
        return f"EpochCheckpoint: {self.batches_done} batches done"


class ResumableEpoch:
    """One epoch of `loader`, resumable exactly from any batch.

    ``epoch = ResumableEpoch(loader)`` before the loop, ``for batch in epoch: ...``, and
    ``epoch.checkpoint()`` after a training step saves where it stands. After a restart,
    ``ResumableEpoch(loader, resume=checkpoint)`` yields the rest of that epoch: the same
    batches, worker augmentations and main-process draws as the uninterrupted run, and the
    epochs after it go on as they would have. The loader's own ``generator=`` is captured
    with it; pass any other generator your steps draw from as ``generators={"name": g}``.
    Create it where the epoch begins: it captures the RNG state there. Persistent workers
    carry their streams across epochs, out of reach: checkpoint() refuses after the first.
    """

    def __init__(
        self,
        loader: Any,
        generators: Generators = None,
        resume: Optional[EpochCheckpoint] = None,
    ) -> None:
        if resume is not None and not isinstance(resume, EpochCheckpoint):
            raise TypeError(
                "resume must be an EpochCheckpoint from ResumableEpoch.checkpoint(), not "
                f"{type(resume).__name__}"
            )
        if resume is not None and (
            not isinstance(resume.batches_done, int) or resume.batches_done < 0
        ):
            raise ValueError("the checkpoint's batches_done must be an int from 0 up")
        self.loader = loader
        self.generators = _with_loader_generators(loader, generators)
        # persistent workers keep their random streams from the epochs before this one, in
        # their own processes: a checkpoint made now could not be resumed exactly
        self._workers_ran_before = bool(
            _attribute(loader, "persistent_workers")
            and _attribute(loader, "num_workers")
            and _attribute(loader, "_iterator") is not None
        )
        self.resume = resume
        self.start = resume.start if resume is not None else rng_state(self.generators)
        self.batches_done = 0
        self._started = False

    def __iter__(self) -> Iterator[Any]:
        if self._started:
            raise RuntimeError("a ResumableEpoch is one epoch: make a new one for the next")
        self._started = True
        resume = self.resume
        if resume is not None:
            restore_rng_state(resume.start, self.generators)
        iterator = iter(self.loader)
        if resume is not None:
            for _ in range(resume.batches_done):
                next(iterator)  # loaded and dropped: the workers' streams move on as before
            self.batches_done = resume.batches_done
            restore_rng_state(resume.now, self.generators)
        for batch in iterator:
            self.batches_done += 1
            yield batch

    def checkpoint(self) -> EpochCheckpoint:
        """Where this epoch stands now: call it after a step has used its batch."""
        if self._workers_ran_before:
            raise RuntimeError(
                "this loader's persistent workers (persistent_workers=True) carry their random "
                "streams over from the epochs before, which a new session cannot restore: "
                "make the loader with persistent_workers=False to checkpoint mid-epoch"
            )
        return EpochCheckpoint(self.start, self.batches_done, rng_state(self.generators))


# where a DataLoader keeps the generator its shuffle order and worker seeds come from
LOADER_GENERATORS = (
    ("loader.generator", ("generator",)),
    ("loader.sampler.generator", ("sampler", "generator")),
    ("loader.batch_sampler.sampler.generator", ("batch_sampler", "sampler", "generator")),
)


def _with_loader_generators(loader: Any, generators: Generators) -> dict[str, Any]:
    """The caller's generators, by name, and each torch.Generator the loader draws from
    that the caller did not pass (read as instance attributes: no user code runs)."""
    pairs = dict(_named(generators))
    torch = torch_support.loaded()
    kind = getattr(torch, "Generator", None)
    held = {id(generator) for generator in pairs.values()}
    for name, path in LOADER_GENERATORS:
        found: Any = loader
        for part in path:
            found = _attribute(found, part)
        if isinstance(kind, type) and isinstance(found, kind) and id(found) not in held:
            pairs[name] = found
            held.add(id(found))
    return pairs


def _attribute(owner: Any, name: str) -> Any:
    """An instance attribute, read without properties or __getattr__; None where absent."""
    try:
        return vars(owner).get(name)
    except TypeError:  # no __dict__
        return None
