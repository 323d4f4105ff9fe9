"""Seed every RNG that matters, optionally switch on deterministic algorithms, and say
exactly what was done and what could not be done.

What is true about PyTorch (and what popular advice gets wrong):
- ``torch.manual_seed`` already seeds the CPU generator *and every CUDA device*
  (torch/random.py calls ``torch.cuda.manual_seed_all``), plus MPS and XPU.
- CUDA seeding is deferred until CUDA initialises (``torch.cuda._lazy_call``), so seeding
  before or after the first CUDA use both work.
- ``CUBLAS_WORKSPACE_CONFIG`` matters only for torch builds that still carry the cuBLAS
  workspace check (before pytorch/pytorch#161749); such builds read it once per process.
"""

from __future__ import annotations

import hashlib
import numbers
import os
import re
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from .frameworks import cupy as cupy_support
from .frameworks import jax as jax_support
from .frameworks import numpy as numpy_support
from .frameworks import python_random
from .frameworks import tensorflow as tensorflow_support
from .frameworks import torch as torch_support

SEED_MAX = 2**32 - 1  # NumPy's legacy RNG accepts 0..2**32-1
VALID_SEED_FORM = f"an integer from 0 to {SEED_MAX}"
_SEED_TEXT = re.compile(r"\s*\+?\d+\s*")

# Env vars that a library reads to choose deterministic kernels, and which library reads it.
DETERMINISM_ENV = {
    "FLASH_ATTENTION_DETERMINISTIC": ("1", "transformers' flash-attention path"),
    "TF_DETERMINISTIC_OPS": ("1", "TensorFlow, when imported later"),
}


# ---------------------------------------------------------------- reports


@dataclass
class SeededRng:
    name: str
    version: str
    how: str


@dataclass
class SkippedRng:
    name: str
    reason: str


@dataclass
class Change:
    """A flag or environment variable this call changed."""

    name: str
    old: Optional[str]
    new: Optional[str]
    kind: str  # "env" or "flag"


@dataclass
class SeedReport:
    seed: int
    seed_source: str  # "given" or "drawn from the OS"
    seeded: list[SeededRng] = field(default_factory=list)
    skipped: list[SkippedRng] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    deterministic: bool = False
    every_cell: Optional[bool] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        lines = [f"seed_all: seed {self.seed} ({self.seed_source})"]
        if self.seed_source != "given":
            lines[0] += f" - rerun with %seed_all {self.seed} to reproduce this run"
        for rng in self.seeded:
            lines.append(f"  seeded   {rng.name} {rng.version}: {rng.how}")
        for rng in self.skipped:
            lines.append(f"  skipped  {rng.name}: {rng.reason}")
        for change in self.changes:
            lines.append(f"  set      {change.name}: {_show(change.old)} -> {_show(change.new)}")
        if self.every_cell is not None:
            lines.append(f"  every cell: {'reseeded' if self.every_cell else 'off'}")
        for note in self.notes:
            lines.append(f"  note     {note}")
        for warning in self.warnings:
            lines.append(f"  WARNING  {warning}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        esc = html.escape
        rows = [
            f"<tr><td>seeded</td><td>{esc(r.name)} {esc(r.version)}</td><td>{esc(r.how)}</td></tr>"
            for r in self.seeded
        ]
        rows += [
            f"<tr><td>skipped</td><td>{esc(r.name)}</td><td>{esc(r.reason)}</td></tr>"
            for r in self.skipped
        ]
        rows += [
            f"<tr><td>set</td><td>{esc(c.name)}</td>"
            f"<td>{esc(_show(c.old))} &rarr; {esc(_show(c.new))}</td></tr>"
            for c in self.changes
        ]
        rows += [f"<tr><td>note</td><td colspan=2>{esc(n)}</td></tr>" for n in self.notes]
        rows += [
            f"<tr><td><b>warning</b></td><td colspan=2>{esc(w)}</td></tr>" for w in self.warnings
        ]
        return (
            f"<div><b>seed_all</b>: seed <code>{self.seed}</code> ({esc(self.seed_source)})"
            f"<table>{''.join(rows)}</table></div>"
        )


def _show(value: Optional[str]) -> str:
    return "(unset)" if value is None else repr(value)


# ---------------------------------------------------------------- validation


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


class _DeterminismMemory:
    """torch flags and env vars as they were before deterministic mode was switched on."""

    flags: Optional[torch_support.DeterministicFlags] = None
    env: Optional[dict[str, Optional[str]]] = None


_memory = _DeterminismMemory()
_last_seed: Optional[int] = None


def last_seed() -> Optional[int]:
    """The seed of the last `seed_all` call in this process, if any."""
    return _last_seed


def seed_all(
    seed: object = None, *, deterministic: bool = False, warn_only: bool = False
) -> SeedReport:
    """Seed Python `random`, NumPy, PyTorch (CPU and every CUDA/MPS/XPU device) and any
    TensorFlow or CuPy the user already imported; return what was done as a SeedReport.

    seed: an integer 0..2**32-1 (or a string of one); None draws a fresh seed from the OS
        and the report shows it so the run can be reproduced.
    deterministic: switch on torch's deterministic algorithms, cuDNN determinism, and the
        env vars libraries read; `deterministic=False` after it was on restores the flags
        as they were before.
    warn_only: with deterministic mode, ops without a deterministic implementation warn
        instead of raising. Implies `deterministic=True`.
    """
    global _last_seed
    value = fresh_seed() if seed is None else validate_seed(seed)
    if not isinstance(deterministic, bool) or not isinstance(warn_only, bool):
        raise TypeError("deterministic and warn_only must be True or False")
    deterministic = deterministic or warn_only

    report = SeedReport(
        seed=value, seed_source="given" if seed is not None else "drawn from the OS"
    )
    torch = _torch_for_seeding(report)

    _seed_python_and_numpy(value, report)
    if torch is not None:
        _seed_torch(torch, value, report)
    _seed_imported_only(value, report)
    _set_hash_seed(value, report)
    if deterministic:
        _enable_determinism(torch, warn_only, report)
    elif _memory.flags is not None or _memory.env is not None:
        _restore_determinism(torch, report)
    report.deterministic = deterministic
    _last_seed = value
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
    except Exception as error:  # a broken install must not stop the other RNGs
        report.skipped.append(SkippedRng("PyTorch", f"installed but import failed: {error}"))
        return None


def _seed_python_and_numpy(value: int, report: SeedReport) -> None:
    report.seeded.append(
        SeededRng(python_random.NAME, python_random.version(), python_random.seed(value))
    )
    if not numpy_support.installed():
        report.skipped.append(SkippedRng(numpy_support.NAME, "not installed"))
        return
    try:
        how = numpy_support.seed(value)
    except Exception as error:
        report.skipped.append(SkippedRng(numpy_support.NAME, f"could not be seeded: {error}"))
        return
    report.seeded.append(SeededRng(numpy_support.NAME, numpy_support.version(), how))
    report.notes.append(
        "numpy.random.default_rng() generators do not use the global RNG: "
        "create them with default_rng(seed)"
    )


def _seed_torch(torch, value: int, report: SeedReport) -> None:
    version = str(torch.__version__)
    torch.manual_seed(value)
    report.seeded.append(SeededRng("PyTorch CPU", version, "torch.manual_seed"))

    devices = torch_support.cuda_device_count(torch)
    if torch_support.cuda_version(torch) is None:
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
        when = (
            "applied now"
            if torch_support.cuda_initialized(torch)
            else "queued by torch until CUDA initialises, so seeding first is fine"
        )
        report.seeded.append(
            SeededRng(
                f"PyTorch CUDA ({devices} device{'s' if devices != 1 else ''})",
                f"CUDA {torch_support.cuda_version(torch)}",
                f"by torch.manual_seed itself (torch.cuda.manual_seed_all), {when}",
            )
        )
    if torch_support.mps_available(torch):
        report.seeded.append(SeededRng("PyTorch MPS", version, "by torch.manual_seed itself"))
    if torch_support.xpu_available(torch):
        report.seeded.append(SeededRng("PyTorch XPU", version, "by torch.manual_seed itself"))


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
        try:
            how = framework.seed(value)
        except Exception as error:
            report.skipped.append(SkippedRng(framework.NAME, f"could not be seeded: {error}"))
            continue
        report.seeded.append(SeededRng(framework.NAME, framework.version(), how))
    if jax_support.loaded() is not None or jax_support.installed():
        report.skipped.append(
            SkippedRng(
                jax_support.NAME,
                "JAX has no global RNG: pass keys explicitly, "
                "e.g. colab_gpu_guard.jax_key(seed) == jax.random.key(seed)",
            )
        )


def _initial_environ_value(name: str) -> Optional[str]:
    """The value `name` had when this interpreter started (Linux), else None if unknown."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return None
    prefix = name.encode() + b"="
    for entry in entries:
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return ""


def _set_hash_seed(value: int, report: SeedReport) -> None:
    old = os.environ.get("PYTHONHASHSEED")
    new = str(value)
    if old != new:
        os.environ["PYTHONHASHSEED"] = new
        report.changes.append(Change("PYTHONHASHSEED", old, new, "env"))
    at_start = _initial_environ_value("PYTHONHASHSEED")
    if at_start is None:
        current = "unknown on this platform"
    elif at_start in ("", "random"):
        current = "random (PYTHONHASHSEED was unset when it started)"
    else:
        current = f"PYTHONHASHSEED={at_start}"
    report.notes.append(
        "PYTHONHASHSEED applies to child processes only; this interpreter's str hash seed "
        f"was fixed at start: {current}"
    )


def _set_env(name: str, value: str, report: SeedReport, why: str) -> None:
    old = os.environ.get(name)
    if old == value:
        return
    assert _memory.env is not None
    _memory.env.setdefault(name, old)
    os.environ[name] = value
    report.changes.append(Change(f"{name} (read by {why})", old, value, "env"))


def _enable_determinism(torch, warn_only: bool, report: SeedReport) -> None:
    if _memory.env is None:
        _memory.env = {}
    for name, (value, reader) in DETERMINISM_ENV.items():
        _set_env(name, value, report, reader)

    if torch is not None:
        before = torch_support.read_flags(torch)
        if _memory.flags is None:
            _memory.flags = before
        if before.cudnn_benchmark:
            report.warnings.append(
                "torch.backends.cudnn.benchmark was True; it picks kernels by timing and "
                "breaks reproducibility, so it is now False"
            )
        wanted = torch_support.DeterministicFlags(
            algorithms=True, warn_only=warn_only, cudnn_deterministic=True, cudnn_benchmark=False
        )
        torch_support.write_flags(torch, wanted)
        _report_flag_changes(before, wanted, report)
        _configure_cublas(torch, report)
    else:
        report.notes.append("deterministic mode: no torch, so no torch flags were set")

    if tensorflow_support.loaded() is not None:
        if tensorflow_support.enable_op_determinism():
            report.changes.append(
                Change("tf.config.experimental.enable_op_determinism()", None, "called", "flag")
            )
        else:
            report.warnings.append(
                "this TensorFlow has no enable_op_determinism (TF < 2.8): "
                "TF_DETERMINISTIC_OPS=1 must be set before TensorFlow is imported"
            )


def _configure_cublas(torch, report: SeedReport) -> None:
    requirement = torch_support.cublas_requirement(torch)
    name = "CUBLAS_WORKSPACE_CONFIG"
    current = os.environ.get(name)
    if requirement.needed is False:
        report.notes.append(f"{name} not needed: {requirement.evidence}")
        return
    if requirement.needed is None:
        report.notes.append(
            f"{name}: could not tell if this torch needs it ({requirement.evidence})"
        )
    if current in torch_support.CUBLAS_DETERMINISTIC_CONFIGS:
        report.notes.append(f"{name} already {current!r}")
    elif current is not None:
        report.warnings.append(
            f"{name}={current!r} is not one cuBLAS accepts for determinism "
            f"({' or '.join(torch_support.CUBLAS_DETERMINISTIC_CONFIGS)}); left as it is"
        )
        return
    else:
        _set_env(name, torch_support.CUBLAS_DETERMINISTIC_CONFIGS[0], report, "cuBLAS")
    if torch_support.cuda_initialized(torch):
        report.warnings.append(
            f"CUDA is already initialised in this process, so {name} may be set too late "
            "(cuBLAS reads it once per process). If you get the CuBLAS determinism error, "
            "restart the runtime and run %seed_all SEED --deterministic in the first cell"
        )


def _report_flag_changes(
    before: torch_support.DeterministicFlags,
    after: torch_support.DeterministicFlags,
    report: SeedReport,
) -> None:
    old, new = before.describe(), after.describe()
    for name in new:
        if old[name] != new[name]:
            report.changes.append(Change(name, old[name], new[name], "flag"))


def _restore_determinism(torch, report: SeedReport) -> None:
    if torch is not None and _memory.flags is not None:
        before = torch_support.read_flags(torch)
        torch_support.write_flags(torch, _memory.flags)
        _report_flag_changes(before, _memory.flags, report)
    for name, old in (_memory.env or {}).items():
        now = os.environ.get(name)
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
        if now != old:
            report.changes.append(Change(name, now, old, "env"))
    _memory.flags = None
    _memory.env = None
    report.notes.append("deterministic mode off: flags restored to what they were before")


# ---------------------------------------------------------------- per-cell reseeding


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


def reseed_loaded(value: int) -> None:
    """Seed the RNGs of frameworks already in sys.modules (no imports, no report).

    The per-cell fast path, with what `seed_all` seeds: for torch the CPU generator and,
    once CUDA is up, each device's generator directly (what `torch.manual_seed` does minus
    its ~150 us of lazy-call bookkeeping); before CUDA starts, a deferred seed queued in
    torch's own slot for it.
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
            for generator in torch.cuda.default_generators:
                generator.manual_seed(value)
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


# ---------------------------------------------------------------- workers and ranks


def current_rank() -> int:
    """This process's rank: torch.distributed when initialised, else $RANK, else 0."""
    torch = torch_support.loaded()
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_rank())
    except Exception:
        pass
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _base_seed(seed: object) -> int:
    if seed is not None:
        return validate_seed(seed)
    if _last_seed is not None:
        return _last_seed
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
    """`DataLoader(worker_init_fn=seed_worker)`: seed `random` and NumPy in each worker.

    torch seeds itself in each worker (base seed + worker id); Python `random` and NumPy
    are not, so workers would repeat each other's augmentations. The seed is derived from
    (torch's worker seed, rank, worker id), so it is reproducible and differs per worker
    and per rank.
    """
    torch = torch_support.loaded() or torch_support.import_torch()
    value = derive_seed("worker", int(torch.initial_seed()), current_rank(), int(worker_id))
    python_random.seed(value)
    if numpy_support.installed():
        numpy_support.seed(value)


def jax_key(seed: object = None):
    """`jax.random.key(seed)` for the given seed, or the last seed_all seed (imports JAX)."""
    return jax_support.key(_base_seed(seed))
