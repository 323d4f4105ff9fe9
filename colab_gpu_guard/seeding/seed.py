"""Seed every RNG that matters and say exactly what was done and what could not be done."""

from __future__ import annotations

import hashlib
import numbers
import os
import re
from typing import Any, Callable, Optional

from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import numpy as numpy_support
from ..frameworks import python_random
from ..frameworks import tensorflow as tensorflow_support
from ..frameworks import torch as torch_support
from ..units import counted
from . import determinism, hash_seed
from .report import Change, SeededRng, SeedReport, SkippedRng

SEED_MAX = 2**32 - 1  # NumPy's legacy RNG accepts 0..2**32-1
# seed_all's seed, for processes started from this one (spawned DataLoader workers and DDP
# ranks, subprocesses): seed_worker, dataloader_generator and jax_key read it where this
# process never called seed_all (as Lightning's PL_GLOBAL_SEED)
SEED_ENV = "COLAB_GPU_GUARD_SEED"
VALID_SEED_FORM = f"an integer from 0 to {SEED_MAX}"
# ASCII digits only: int() also takes "٤٢" and "４２", which are not a seed anyone typed on purpose.
_SEED_TEXT = re.compile(r"\s*\+?[0-9]+\s*", re.ASCII)


def validate_seed(seed: object) -> int:
    """Return `seed` as an int in NumPy's range, or raise TypeError/ValueError saying why."""
    if isinstance(seed, bool):
        raise TypeError(f"seed must be {VALID_SEED_FORM}, not a bool ({seed!r})")
    if isinstance(seed, numbers.Integral):
        value = int(seed)
    elif isinstance(seed, float):
        if not seed.is_integer():
            raise ValueError(f"seed must be {VALID_SEED_FORM}; {seed!r} has a fraction")
        value = int(seed)
    elif isinstance(seed, str):
        if not _SEED_TEXT.fullmatch(seed):
            raise ValueError(f"seed must be {VALID_SEED_FORM}, got {seed!r}")
        value = int(seed)
    else:
        raise TypeError(f"seed must be {VALID_SEED_FORM}, not {type(seed).__name__}")
    if not 0 <= value <= SEED_MAX:
        raise ValueError(f"seed must be {VALID_SEED_FORM}, got {value}")
    return value


def fresh_seed() -> int:
    return int.from_bytes(os.urandom(4), "little")


def derive_seed(*parts: object) -> int:
    """A reproducible seed in range for a tuple of parts (ints and strings).

    Plays the role of numpy's SeedSequence without needing NumPy: different parts give
    statistically independent seeds, equal parts always the same seed.
    """
    digest = hashlib.blake2b(repr(parts).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") & SEED_MAX


# ---------------------------------------------------------------- seeding

_last_seed: Optional[int] = None
# while %seed_all --every-cell is on: called with each new seed_all seed (every_cell.py)
_new_seed_listener: Optional[Callable[[int], None]] = None


def last_seed() -> Optional[int]:
    """The seed of the last `seed_all` call in this process, if any."""
    return _last_seed


def inherited_seed() -> Optional[int]:
    """The last seed_all seed here, else the one a parent process passed down in
    COLAB_GPU_GUARD_SEED (a spawned worker or rank), else None."""
    if _last_seed is not None:
        return _last_seed
    text = os.environ.get(SEED_ENV)
    try:
        return validate_seed(text) if text is not None else None
    except ValueError:
        return None


def follow_new_seeds(listener: Optional[Callable[[int], None]]) -> None:
    """Have `listener` called with every new seed_all seed (None: stop); per-cell
    reseeding uses it to take each new seed as its base, from the magic or from Python."""
    global _new_seed_listener
    _new_seed_listener = listener


def new_seed_listener() -> Optional[Callable[[int], None]]:
    return _new_seed_listener


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


def seed_all(
    seed: object = None,
    *,
    deterministic: Optional[bool] = None,
    warn_only: Optional[bool] = None,
    strict: Optional[bool] = None,
    per_rank: bool = False,
) -> SeedReport:
    """Seed Python `random`, NumPy, PyTorch (CPU and every CUDA/MPS/XPU device) and any
    TensorFlow or CuPy the user already imported; return what was done as a SeedReport.

    seed: an integer 0..2**32-1 (or a string of one); None draws a fresh seed from the OS
        and the report shows it so the run can be reproduced.
    per_rank: seed this process with seed + its rank (torch.distributed's, else $RANK), as
        accelerate's ``set_seed(seed, device_specific=True)``. By default every rank gets
        the same seed (so a model initialised on each rank starts alike, as in Lightning
        and accelerate); DataLoader workers differ per rank either way with seed_worker.
    deterministic: True switches on torch's deterministic algorithms, cuDNN determinism,
        and the env vars libraries read; False switches it off (the flags go back as they
        were before, and warn-only and strict end with it); None (the default) keeps the
        mode in force, as torch reports it (switched on by hand counts).
    warn_only: with deterministic mode, ops without a deterministic implementation warn
        instead of raising. True implies `deterministic=True`; False raises again; None
        keeps what is in force.
    strict: with deterministic mode, also run matmuls, convolutions and RNNs in full fp32
        (TF32 off: it is on for cuDNN convolutions and RNNs by default on Ampere and newer
        GPUs; no bf16 in oneDNN on the CPU). True implies `deterministic=True`; False
        restores the precision from before; None keeps what is in force.

    Switching deterministic off and warn_only or strict on in one call is a ValueError.
    """
    global _last_seed
    value = fresh_seed() if seed is None else validate_seed(seed)
    base = value
    rank = current_rank() if per_rank else None
    if rank:
        value = (value + rank) % (SEED_MAX + 1)
    if not all(
        flag is None or isinstance(flag, bool) for flag in (deterministic, warn_only, strict)
    ):
        raise TypeError("deterministic, warn_only and strict must be True, False or None")
    determinism.resolve_modes(determinism.Modes(), deterministic, warn_only, strict)  # refuse first

    report = SeedReport(
        seed=value, seed_source="given" if seed is not None else "drawn from the OS"
    )
    if per_rank:
        report.rank, report.base_seed = rank, base
    torch = _torch_for_seeding(report)
    modes = determinism.resolve_modes(
        determinism.modes_in_force(torch), deterministic, warn_only, strict
    )

    _seed_python_and_numpy(value, report)
    if torch is not None:
        _seed_torch(torch, value, report)
    _seed_imported_only(value, report)
    _set_hash_seed(value, report)
    _set_env(SEED_ENV, str(base), report)
    if modes.deterministic:
        determinism.enable(torch, modes.warn_only, modes.strict, report)
    else:
        determinism.disable(torch, report)
    report.deterministic = modes.deterministic
    report.warn_only = modes.warn_only
    report.strict = modes.strict
    asked = (deterministic, warn_only, strict) != (None, None, None)
    report.modes_kept = modes.deterministic and not asked  # reseeding: the modes stay
    _last_seed = value
    if _new_seed_listener is not None:  # per-cell reseeding is on: this seed is its base now
        _new_seed_listener(value)
        report.every_cell = True
    return report


def _torch_for_seeding(report: SeedReport):
    torch = torch_support.loaded()
    if torch is not None:
        return torch
    if not torch_support.installed():
        report.skipped.append(SkippedRng("PyTorch", "not installed"))
        return None
    try:
        return torch_support.import_torch()
    except Exception as error:  # torch: a broken install must not stop the other RNGs
        report.skipped.append(SkippedRng("PyTorch", f"installed but import failed: {error}"))
        return None


def _seed_framework(framework: Any, value: int, report: SeedReport) -> bool:
    """Seed one framework's global RNG and record it as seeded, or as skipped with why."""
    try:
        how = framework.seed(value)
    except Exception as error:  # a framework's seed: a broken one must not stop the others
        report.skipped.append(SkippedRng(framework.NAME, f"could not be seeded: {error}"))
        return False
    report.seeded.append(SeededRng(framework.NAME, framework.version(), how))
    return True


def _seed_python_and_numpy(value: int, report: SeedReport) -> None:
    report.seeded.append(
        SeededRng(python_random.NAME, python_random.version(), python_random.seed(value))
    )
    if not numpy_support.installed():
        report.skipped.append(SkippedRng(numpy_support.NAME, "not installed"))
        return
    if not _seed_framework(numpy_support, value, report):
        return
    report.notes.append(
        "numpy.random.default_rng() generators do not use the global RNG: "
        "create them with default_rng(seed)"
    )


def _seed_torch(torch, value: int, report: SeedReport) -> None:
    """Seed torch with ``torch.manual_seed`` and report which of its generators that seeded.

    What is true about PyTorch (and what popular advice gets wrong):

    - ``torch.manual_seed`` already seeds the CPU generator *and every CUDA device*
      (torch/random.py calls ``torch.cuda.manual_seed_all``), plus MPS and XPU.
    - CUDA seeding is deferred until CUDA initialises (``torch.cuda._lazy_call``), so
      seeding before or after the first CUDA use both work.
    """
    version = str(torch.__version__)
    devices = torch_support.cuda_device_count(torch)
    initialised = torch_support.cuda_initialized(torch)
    contexts_before = torch_support.devices_with_context(torch)
    with torch_support.seeding_device(torch):
        torch.manual_seed(value)
    report.seeded.append(SeededRng("PyTorch CPU", version, "torch.manual_seed"))

    hip = torch_support.hip_version(torch)  # a ROCm build drives AMD GPUs via torch.cuda
    if torch_support.cpu_only_build(torch):
        report.skipped.append(SkippedRng("PyTorch CUDA", "this torch build has no CUDA"))
    elif devices == 0:
        report.skipped.append(SkippedRng("PyTorch CUDA", "no CUDA device visible"))
    elif torch_support.cuda_in_bad_fork(torch):
        report.skipped.append(
            SkippedRng(
                "PyTorch CUDA",
                "this process was forked after CUDA initialised; CUDA cannot be used here",
            )
        )
    else:
        how = "by torch.manual_seed itself (torch.cuda.manual_seed_all), "
        if initialised:
            how += _cuda_seeding_applied(torch, devices, contexts_before)
        else:
            how += "queued by torch until CUDA initialises, so seeding first is fine"
        report.seeded.append(
            SeededRng(
                f"PyTorch {'ROCm' if hip else 'CUDA'} ({counted(devices, 'device')})",
                f"ROCm {hip}" if hip else f"CUDA {torch_support.cuda_version(torch)}",
                how,
            )
        )
    if torch_support.mps_available(torch):
        report.seeded.append(SeededRng("PyTorch MPS", version, "by torch.manual_seed itself"))
    if torch_support.xpu_available(torch):
        report.seeded.append(SeededRng("PyTorch XPU", version, "by torch.manual_seed itself"))


def _device_names(indices) -> str:
    return ", ".join(f"cuda:{index}" for index in indices)


def _cuda_seeding_applied(torch, devices: int, contexts_before: list[int]) -> str:
    """What seeding did on each device, CUDA being initialised: every device's generator
    holds the seed now; those without a context use it when first touched."""
    waiting = [index for index in range(devices) if index not in contexts_before]
    if not waiting:
        text = "applied now"
    elif not contexts_before:
        text = (
            "applied now to every device's generator; no device has a CUDA context yet, "
            "each uses the seed when first touched"
        )
    else:
        text = (
            f"applied now ({_device_names(contexts_before)}); {_device_names(waiting)} "
            "(no CUDA context yet) use the seed when first touched"
        )
    created = [i for i in torch_support.devices_with_context(torch) if i not in contexts_before]
    if created:
        text += f"; this torch created a CUDA context on {_device_names(created)} while seeding"
    return text


def _seed_imported_only(value: int, report: SeedReport) -> None:
    for framework in (tensorflow_support, cupy_support):
        if framework.loaded() is None:
            if framework.installed():
                report.skipped.append(
                    SkippedRng(
                        framework.NAME,
                        "installed but not imported: not seeded, "
                        "run %seed_all again after importing it",
                    )
                )
            continue
        _seed_framework(framework, value, report)
    if jax_support.loaded() is not None or jax_support.installed():
        report.skipped.append(
            SkippedRng(
                jax_support.NAME,
                "JAX has no global RNG: pass keys explicitly, "
                "e.g. colab_gpu_guard.jax_key(seed) == jax.random.key(seed)",
            )
        )


def _set_env(name: str, new: str, report: SeedReport) -> None:
    old = os.environ.get(name)
    if old != new:
        os.environ[name] = new
        report.changes.append(Change(name, old, new, "env"))


def _set_hash_seed(value: int, report: SeedReport) -> None:
    _set_env("PYTHONHASHSEED", str(value), report)
    report.notes.append(
        f"PYTHONHASHSEED={value} applies to Python processes started from now on (subprocess, "
        f"spawn workers); {hash_seed.kernel_words(hash_seed.hash_seed_at_start())}; forked "
        "workers inherit that"
    )
