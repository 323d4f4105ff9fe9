"""Reproducibility: seed every RNG that matters (seed.py), deterministic mode
(determinism.py), per-cell reseeding (every_cell.py), exact RNG save/restore
(rng_state.py), exact mid-epoch DataLoader resume (resume.py), the reproducibility record
and its diff (repro.py, repro_diff.py, repro_precision.py), and seeds for DataLoader
workers, ranks and JAX keys (workers.py)."""

from .determinism import DETERMINISM_ENV
from .every_cell import CellReseeder, reseed_loaded
from .report import Change, SeededRng, SeedReport, SkippedRng
from .repro import ReproRecord, read_record
from .repro_diff import Difference, ReproDiff, program_set_env, repro_diff
from .repro_read import repro_record
from .resume import EpochCheckpoint, ResumableEpoch
from .rng_state import (
    GeneratorState,
    NumpyState,
    RngState,
    RngStateError,
    isolated_rng,
    restore_rng_state,
    rng_state,
)
from .seed import (
    SEED_MAX,
    VALID_SEED_FORM,
    derive_seed,
    fresh_seed,
    last_seed,
    seed_all,
    validate_seed,
)
from .workers import current_rank, dataloader_generator, jax_key, seed_worker

__all__ = [
    "Difference",
    "ReproDiff",
    "ReproRecord",
    "program_set_env",
    "read_record",
    "repro_diff",
    "repro_record",
    "EpochCheckpoint",
    "ResumableEpoch",
    "GeneratorState",
    "NumpyState",
    "RngState",
    "RngStateError",
    "isolated_rng",
    "restore_rng_state",
    "rng_state",
    "DETERMINISM_ENV",
    "SEED_MAX",
    "VALID_SEED_FORM",
    "CellReseeder",
    "Change",
    "SeedReport",
    "SeededRng",
    "SkippedRng",
    "current_rank",
    "dataloader_generator",
    "derive_seed",
    "fresh_seed",
    "jax_key",
    "last_seed",
    "reseed_loaded",
    "seed_all",
    "seed_worker",
    "validate_seed",
]
