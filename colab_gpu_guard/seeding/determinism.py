"""Deterministic mode: torch's global determinism switches, cuBLAS's workspace
requirement, the env vars libraries read, and how to switch it all on and back off.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Iterable, Optional

from ..frameworks import tensorflow as tensorflow_support
from ..frameworks import torch as torch_support
from . import precision
from .report import Change, SeedReport

# ``CUBLAS_WORKSPACE_CONFIG`` matters only for torch builds that still carry the cuBLAS
# workspace check, torch before 2.10.0 (pytorch/pytorch#161749 removed it). Such a build
# reads the variable at the first cuBLAS matmul in the process, deterministic mode on or off
# (``Context::alertCuBLASConfigNotDeterministic`` keeps it in a function-local static), and
# keeps that value for the life of the process: setting it after CUDA started is fine, after
# the first CUDA matmul it is too late.
#
# The literal that ATen's Context.cpp compiles in while it still enforces a cuBLAS workspace
# configuration under deterministic mode (removed by pytorch/pytorch#161749).
CUBLAS_CHECK_MARKER = b"it uses CuBLAS and you have CUDA >= 10.2"
CUBLAS_DETERMINISTIC_CONFIGS = (":4096:8", ":16:8")

# Env vars that a library reads to choose deterministic kernels, and which library reads it.
DETERMINISM_ENV = {
    "FLASH_ATTENTION_DETERMINISTIC": (
        "1",
        "transformers' flash-attention path; older releases read it once, at import",
    ),
    "TF_DETERMINISTIC_OPS": ("1", "TensorFlow, when imported later"),
}


@dataclass(frozen=True)
class DeterministicFlags:
    """torch's global determinism switches, as read or to be written."""

    algorithms: bool
    warn_only: bool
    cudnn_deterministic: bool
    cudnn_benchmark: bool

    def describe(self) -> dict[str, str]:
        return {
            "torch.use_deterministic_algorithms": (
                f"{self.algorithms} (warn_only={self.warn_only})"
            ),
            "torch.backends.cudnn.deterministic": str(self.cudnn_deterministic),
            "torch.backends.cudnn.benchmark": str(self.cudnn_benchmark),
        }


def read_flags(torch: ModuleType) -> DeterministicFlags:
    warn_only_reader = getattr(torch, "is_deterministic_algorithms_warn_only_enabled", None)
    return DeterministicFlags(
        algorithms=bool(torch.are_deterministic_algorithms_enabled()),
        warn_only=bool(warn_only_reader()) if warn_only_reader else False,
        cudnn_deterministic=bool(torch.backends.cudnn.deterministic),
        cudnn_benchmark=bool(torch.backends.cudnn.benchmark),
    )


def write_flags(torch: ModuleType, flags: DeterministicFlags) -> None:
    try:
        torch.use_deterministic_algorithms(flags.algorithms, warn_only=flags.warn_only)
    except TypeError:  # torch < 1.11 has no warn_only
        torch.use_deterministic_algorithms(flags.algorithms)
    torch.backends.cudnn.deterministic = flags.cudnn_deterministic
    torch.backends.cudnn.benchmark = flags.cudnn_benchmark


# ---------------------------------------------------------------- cuBLAS workspace


@dataclass(frozen=True)
class CublasRequirement:
    """Whether this torch insists on CUBLAS_WORKSPACE_CONFIG in deterministic mode."""

    needed: Optional[bool]  # None: could not tell
    evidence: str


def _torch_libraries(torch: ModuleType) -> list[Path]:
    lib_dir = Path(torch.__file__).parent / "lib"
    names = ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll")
    return [lib_dir / name for name in names if (lib_dir / name).is_file()]


def _file_contains(path: Path, marker: bytes) -> bool:
    with open(path, "rb") as handle:
        if os.fstat(handle.fileno()).st_size == 0:
            return False
        with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            return data.find(marker) != -1


def cublas_requirement_from_libraries(libraries: Iterable[Path]) -> CublasRequirement:
    """Feature-detect the cuBLAS workspace check in torch's compiled ATen library.

    torch builds that still enforce the workspace configuration carry the error message
    in ``libtorch_cpu``; builds after pytorch/pytorch#161749 no longer do.
    """
    libraries = list(libraries)
    for library in libraries:
        try:
            if _file_contains(library, CUBLAS_CHECK_MARKER):
                return CublasRequirement(
                    True, f"{library.name} still carries the cuBLAS workspace check"
                )
        except OSError as error:
            return CublasRequirement(None, f"could not read {library.name}: {error}")
    if libraries:
        names = ", ".join(library.name for library in libraries)
        return CublasRequirement(
            False, f"{names} has no cuBLAS workspace check (pytorch/pytorch#161749)"
        )
    return CublasRequirement(None, "torch's ATen library was not found")


@functools.cache
def _cublas_requirement_cached(torch_file: str) -> CublasRequirement:
    torch = torch_support.loaded()
    assert torch is not None
    return cublas_requirement_from_libraries(_torch_libraries(torch))


FIRST_RELEASE_WITHOUT_CHECK = (2, 10)
_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.\d+)?(?P<pre>(?:a|b|rc|\.dev|\.post)\d*)?(?:\+.*)?")


def cublas_requirement_from_version(version: str) -> Optional[CublasRequirement]:
    """Decide from torch's version where it is conclusive, else None.

    A release or release candidate is built from its release branch: 2.10 and later have
    no check, older ones have it. A development build (``2.10.0a0+git...``, a nightly
    ``2.10.0.dev...``, a vendor's ``a0`` build) is a snapshot of the main branch: one of
    2.9 or 2.10 may predate or follow the change, so only its library can tell.
    """
    match = _VERSION.fullmatch(version.strip())
    if match is None:
        return None
    release = (int(match.group(1)), int(match.group(2)))
    pre = match.group("pre") or ""
    development = pre.startswith(("a", "b", ".dev"))
    if development and (2, 9) <= release <= FIRST_RELEASE_WITHOUT_CHECK:
        return None
    if release >= FIRST_RELEASE_WITHOUT_CHECK:
        return CublasRequirement(
            False,
            f"torch {version} is 2.10 or later, which has no such check (pytorch/pytorch#161749)",
        )
    return CublasRequirement(
        True, f"torch {version} is older than 2.10, the first release without the check"
    )


def cublas_requirement(torch: ModuleType) -> CublasRequirement:
    """Whether this torch needs CUBLAS_WORKSPACE_CONFIG: from its version where that
    decides (a string compare), else from its compiled library (a scan of libtorch_cpu,
    ~0.1 s from the page cache, ~0.6 s from disk for 430 MB; once per process)."""
    if torch_support.cuda_version(torch) is None:
        return CublasRequirement(False, "this torch build has no CUDA, so no cuBLAS")
    by_version = cublas_requirement_from_version(str(torch.__version__))
    if by_version is not None:
        return by_version
    return _cublas_requirement_cached(str(torch.__file__))


# ---------------------------------------------------------------- switching it on and off


class _DeterminismMemory:
    """torch flags and env vars as they were before deterministic mode was switched on,
    and the modes switched on (what torch cannot tell: strict, and all of them without it)."""

    flags: Optional[DeterministicFlags] = None
    env: Optional[dict[str, Optional[str]]] = None
    precision: Optional[precision.PrecisionFlags] = None  # before --strict
    warn_only: bool = False
    strict: bool = False


_memory = _DeterminismMemory()


def was_switched_on() -> bool:
    """Whether deterministic mode was switched on and not yet restored."""
    return _memory.flags is not None or _memory.env is not None or _memory.precision is not None


@dataclass(frozen=True)
class Modes:
    """The modes in force: deterministic, and with it warn-only and strict."""

    deterministic: bool = False
    warn_only: bool = False
    strict: bool = False


def modes_in_force(torch: Optional[ModuleType]) -> Modes:
    """Deterministic and warn-only as torch reports them (a user may have switched them by
    hand); without torch, as this package switched them. Strict is this package's own mode:
    in force while it switched it on and deterministic mode is on."""
    enabled = getattr(torch, "are_deterministic_algorithms_enabled", None)
    if enabled is not None:  # torch 1.8+; a module without it: as this package switched them
        warn = getattr(torch, "is_deterministic_algorithms_warn_only_enabled", None)
        deterministic, warn_only = bool(enabled()), bool(warn()) if warn else False
    else:
        deterministic, warn_only = _memory.env is not None, _memory.warn_only
    return Modes(deterministic, deterministic and warn_only, deterministic and _memory.strict)


def resolve_modes(
    current: Modes,
    deterministic: Optional[bool],
    warn_only: Optional[bool],
    strict: Optional[bool],
) -> Modes:
    """The modes a call asks for: None keeps the mode in force, True switches it on (warn-only
    and strict switch deterministic on too), False off (deterministic off ends the other two).
    Switching deterministic off and another mode on at once is a ValueError."""
    if deterministic is False and (warn_only or strict):
        named = "warn_only" if warn_only else "strict"
        raise ValueError(
            f"deterministic=False and {named}=True contradict each other: {named} needs "
            "deterministic mode"
        )
    if deterministic is False:
        return Modes()
    on = bool(deterministic or warn_only or strict or current.deterministic)
    if not on:
        return Modes()
    keep_warn = current.warn_only if warn_only is None else warn_only
    keep_strict = current.strict if strict is None else strict
    return Modes(True, keep_warn, keep_strict)


def _set_env(name: str, value: str, report: SeedReport, why: str) -> None:
    old = os.environ.get(name)
    if old == value:
        return
    assert _memory.env is not None
    _memory.env.setdefault(name, old)
    os.environ[name] = value
    report.changes.append(Change(f"{name} (read by {why})", old, value, "env"))


def enable(torch, warn_only: bool, strict: bool, report: SeedReport) -> None:
    if _memory.env is None:
        _memory.env = {}
    _memory.warn_only, _memory.strict = warn_only, strict
    for name, (value, reader) in DETERMINISM_ENV.items():
        _set_env(name, value, report, reader)

    if torch is not None:
        before = read_flags(torch)
        if _memory.flags is None:
            _memory.flags = before
        if before.cudnn_benchmark:
            report.warnings.append(
                "torch.backends.cudnn.benchmark was True; it picks kernels by timing and "
                "breaks reproducibility, so it is now False"
            )
        wanted = DeterministicFlags(
            algorithms=True, warn_only=warn_only, cudnn_deterministic=True, cudnn_benchmark=False
        )
        write_flags(torch, wanted)
        _report_changes(before.describe(), wanted.describe(), report)
        _configure_cublas(torch, report)
        _set_precision(torch, strict, report)
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


CUBLAS_READER = "torch, at the first cuBLAS matmul"


def _configure_cublas(torch, report: SeedReport) -> None:
    requirement = cublas_requirement(torch)
    name = "CUBLAS_WORKSPACE_CONFIG"
    current = os.environ.get(name)
    if requirement.needed is False:
        report.notes.append(f"{name} not needed: {requirement.evidence}")
        return
    if requirement.needed is None:
        report.notes.append(
            f"{name}: could not tell if this torch needs it ({requirement.evidence})"
        )
    if current in CUBLAS_DETERMINISTIC_CONFIGS:
        report.notes.append(f"{name} already {current!r}")
        return
    if current is not None:
        report.warnings.append(
            f"{name}={current!r} is not one cuBLAS accepts for determinism "
            f"({' or '.join(CUBLAS_DETERMINISTIC_CONFIGS)}); left as it is"
        )
        return
    _set_env(name, CUBLAS_DETERMINISTIC_CONFIGS[0], report, CUBLAS_READER)
    if torch_support.cuda_initialized(torch):
        report.warnings.append(
            f"CUDA is already initialised, so a cuBLAS matmul may have run: torch reads {name} "
            "at the first one and keeps that value. If a CUDA matmul now fails with the "
            "CuBLAS determinism error, restart the runtime and run %seed_all SEED "
            "--deterministic before any CUDA matmul"
        )


def _set_precision(torch, strict: bool, report: SeedReport) -> None:
    """--strict: full fp32 (remembering the settings before); deterministic mode without
    it after --strict: the settings from before --strict. Then report what is in force."""
    if strict:
        before = precision.read_precision(torch)
        if _memory.precision is None:
            _memory.precision = before
        precision.make_strict(torch)
        _report_changes(before.describe(), precision.read_precision(torch).describe(), report)
    else:
        _restore_precision(torch, report)
    report.precision = precision.precision_report(torch, strict)
    if report.precision.tf32_gpus and report.precision.tf32_uses:
        report.warnings.append(report.precision.meaning())


def _restore_precision(torch, report: SeedReport) -> None:
    if _memory.precision is None:
        return
    before = precision.read_precision(torch)
    precision.restore_precision(torch, _memory.precision)
    _report_changes(before.describe(), precision.read_precision(torch).describe(), report)
    _memory.precision = None


def _report_changes(old: dict[str, str], new: dict[str, str], report: SeedReport) -> None:
    for name in new:
        if old.get(name) != new[name]:
            report.changes.append(Change(name, old.get(name), new[name], "flag"))


def restore(torch, report: SeedReport) -> None:
    if torch is not None and _memory.flags is not None:
        before = read_flags(torch)
        write_flags(torch, _memory.flags)
        _report_changes(before.describe(), _memory.flags.describe(), report)
    if torch is not None:
        _restore_precision(torch, report)
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
    _memory.precision = None
    _memory.warn_only = _memory.strict = False
    report.notes.append("deterministic mode off: flags restored to what they were before")


def disable(torch, report: SeedReport) -> None:
    """Deterministic mode off: what this package set goes back as it was, then torch's own
    switch off if it is still on (switched on by hand, or on before this package set it)."""
    if was_switched_on():
        restore(torch, report)
    if torch is None:
        return
    before = read_flags(torch)
    if before.algorithms:
        after = DeterministicFlags(False, False, before.cudnn_deterministic, before.cudnn_benchmark)
        write_flags(torch, after)
        _report_changes(before.describe(), after.describe(), report)
        report.notes.append("deterministic mode off: torch.use_deterministic_algorithms(False)")
