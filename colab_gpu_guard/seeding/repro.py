"""The reproducibility record: what decides a run's numbers, in one JSON-ready dataclass.

`repro_record()` (repro_read.py) reads seeds (seed_all's and torch's own initial seeds) and
per-cell mode, torch's deterministic flags, TF32 and float32 precision settings, reduced-
precision reductions and attention backends, the environment variables libraries read, the
versions of Python / NumPy / torch / CUDA runtime / cuDNN / driver / Triton / torchvision,
the CPU (model, the instruction set torch's kernels use, bf16/TF32 in oneDNN), each GPU's
model and compute capability, world size and rank, and the imported frameworks' versions.
`repro_diff` (repro_diff.py) compares two records.

JSON: `ReproRecord.to_json()` / `from_json()`, schema `json_schema()`; ``schema_version``
is bumped on any incompatible change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from ..serialize import from_versioned, to_data
from ..serialize import json_schema as _json_schema
from ..units import escape_html, escape_lines
from .hash_seed import RANDOM
from .repro_parts import (
    BACKEND_DEFAULTS,
    RECORD_FORM,
    SCHEMA_VERSION,
    TF32_GPUS,
    TF32_MEANS,
    Cpu,
    Distributed,
    Gpu,
    Pairs,
    Seeding,
    TorchFlags,
    Versions,
    gpu_summary,
    supports_tf32,
)

HASH_SEED = "PYTHONHASHSEED"


@dataclass(frozen=True)
class ReproRecord:
    """What decides a run's numbers: seeds, flags, precision, env, versions, GPUs, ranks."""

    schema_version: int
    taken_at: float  # Unix seconds
    versions: Versions
    seeding: Seeding = Seeding()
    torch_flags: TorchFlags = TorchFlags()
    env: Pairs = ()  # each of REPRO_ENV, None when unset
    gpus: tuple[Gpu, ...] = ()
    gpu_note: Optional[str] = None  # why no GPU is listed
    distributed: Distributed = Distributed()
    frameworks: tuple[tuple[str, str], ...] = ()  # imported frameworks and their versions
    platform: str = ""
    label: Optional[str] = None  # what this record is (e.g. "example record, not measured")
    cpu: Cpu = Cpu()

    # ------------------------------------------------------------ questions

    def env_value(self, name: str) -> Optional[str]:
        return dict(self.env).get(name)

    def backend(self, name: str) -> Optional[str]:
        return dict(self.torch_flags.backends).get(name)

    def without_cuda(self) -> bool:
        """Nothing here can run CUDA: the torch recorded has no CUDA, or no GPU is listed
        and no NVIDIA driver was found."""
        if self.versions.torch is not None and self.versions.cuda_runtime is None:
            return True
        return not self.gpus and self.versions.driver is None

    def tf32(self) -> tuple[Optional[bool], Optional[bool]]:
        """(convolutions, matmuls) use TF32 on this record's GPUs: None when unknown (no
        torch or no GPU); False on GPUs older than Ampere, whatever the flags."""
        if self.torch_flags.cudnn_allow_tf32 is None or not self.gpus:
            return None, None
        if any(gpu.compute_capability is None for gpu in self.gpus):
            return None, None  # a GPU NVML could not read (lost, or no answer)
        if not all(supports_tf32(gpu.compute_capability) for gpu in self.gpus):
            return False, False
        if self.env_value("NVIDIA_TF32_OVERRIDE") == "0":
            return False, False
        return self.tf32_allowed()

    def tf32_allowed(self) -> tuple[bool, bool]:
        """(convolutions, matmuls) may use TF32 under these settings on an Ampere or newer
        GPU: the fp32_precision leaf where it is set, else the legacy flags."""
        flags = self.torch_flags
        conv = self.precision_of("torch.backends.cudnn.conv.fp32_precision")
        conv_tf32 = conv == "tf32" if conv is not None else bool(flags.cudnn_allow_tf32)
        matmul = self.precision_of("torch.backends.cuda.matmul.fp32_precision")
        if matmul is not None:
            matmul_tf32 = matmul == "tf32"
        else:
            matmul_tf32 = bool(flags.matmul_allow_tf32) or (
                flags.float32_matmul_precision in ("high", "medium")
            )
        # TORCH_ALLOW_TF32_CUBLAS_OVERRIDE only seeds float32_matmul_precision when torch is
        # imported (ATen's Context.h): the flags read above already hold what is in force
        return conv_tf32, matmul_tf32

    def precision_of(self, node: str) -> Optional[str]:
        """An fp32_precision setting ('ieee', 'tf32', 'bf16'); None where this torch has
        none or it is 'none' (it follows its parent, then the legacy flags)."""
        value = dict(self.torch_flags.fp32_precision).get(node)
        return None if value in (None, "none") else value

    def set_by(self, node: str) -> str:
        """The fp32_precision setting `node` reads its value from: itself, or the highest
        parent holding the same value (torch resolves a "none" leaf to its parent)."""
        from .precision import PARENT

        values = dict(self.torch_flags.fp32_precision)
        found, name = node, node.removeprefix("torch.backends.")
        while (parent := PARENT.get(name)) is not None:
            if values.get(f"torch.backends.{parent}") != values.get(node):
                break
            found, name = f"torch.backends.{parent}", parent
        return found

    # ------------------------------------------------------------ JSON

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)

    def to_json(self, indent: Optional[int] = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> ReproRecord:
        if not isinstance(data, dict):
            raise ValueError(f"expected a JSON object, got {type(data).__name__}")
        record = from_versioned(cls, data, SCHEMA_VERSION, _wrong_schema)
        # from_data zips a short [name, value] pair into a 1-tuple: reject it here, not
        # later as a dict() error in the middle of a diff
        for field, pairs in (
            ("env", record.env),
            ("frameworks", record.frameworks),
            ("torch_flags.fp32_precision", record.torch_flags.fp32_precision),
            ("torch_flags.backends", record.torch_flags.backends),
            ("seeding.cuda_initial_seeds", record.seeding.cuda_initial_seeds),
        ):
            for pair in pairs:
                if len(pair) != 2:
                    raise ValueError(f"{field}: expected [name, value] pairs, got {list(pair)!r}")
        return record

    @classmethod
    def from_json(cls, text: str) -> ReproRecord:
        return cls.from_dict(json.loads(text))

    # ------------------------------------------------------------ views

    def summary(self) -> list[str]:
        v, s, flags = self.versions, self.seeding, self.torch_flags
        seed = "not seeded with seed_all" if s.seed is None else f"seed {s.seed}"
        if s.every_cell is not None:
            seed += f", reseeded every cell from {s.every_cell}"
        lines = [f"repro: {seed}" + (f"  [{self.label}]" if self.label else "")]
        if v.torch is None:
            lines.append("  torch not imported: its flags are not recorded")
        else:
            lines.append(
                f"  torch {v.torch} (CUDA {v.cuda_runtime or '-'}, cuDNN {v.cudnn or '-'}): "
                f"deterministic {_on(flags.deterministic_algorithms)}, cudnn.benchmark "
                f"{_on(flags.cudnn_benchmark)}, {self._tf32_words()}"
            )
        lines.append(f"  GPUs: {gpu_summary(self.gpus) or self.gpu_note or 'none'}")
        if self.distributed.world_size > 1:
            d = self.distributed
            lines.append(f"  rank {d.rank} of {d.world_size} ({d.source})")
        return lines

    def _tf32_words(self) -> str:
        """'TF32 for convolutions, not for float32 matmuls': where TF32 is used here."""
        conv, matmul = self.tf32()
        if conv is None:
            if not self.gpus:
                return "TF32 not used (no GPU listed)"
            return "TF32 unknown" + (
                " (a GPU NVML could not read)"
                if any(g.compute_capability is None for g in self.gpus)
                else ""
            )
        if not (conv or matmul):
            if not all(supports_tf32(gpu.compute_capability) for gpu in self.gpus):
                return f"TF32 not used (it needs an {TF32_GPUS} or newer GPU)"
            return "TF32 off"
        if conv and matmul:
            return "TF32 for convolutions and float32 matmuls"
        if conv:
            return "TF32 for convolutions, not for float32 matmuls"
        return "TF32 for float32 matmuls, not for convolutions"

    def details(self) -> list[str]:
        v, flags = self.versions, self.torch_flags
        lines = [
            f"  versions: Python {v.python}, NumPy {v.numpy or '-'}, NVIDIA driver "
            f"{v.driver or '-'} (CUDA {v.cuda_driver or '-'}), platform {self.platform}"
        ]
        if v.torch is not None:
            lines.append(
                f"  determinism: torch.use_deterministic_algorithms "
                f"{_on(flags.deterministic_algorithms)}"
                + (" (warn only)" if flags.deterministic_warn_only else "")
                + f", cudnn.deterministic {_on(flags.cudnn_deterministic)}"
            )
            lines += [f"  {line}" for line in self.precision_lines()]
            if flags.cpu_threads is not None:
                lines.append(
                    f"  CPU threads: {flags.cpu_threads} (torch.get_num_threads(); each thread "
                    "adds up its own part of a large CPU sum, so another count can change "
                    "float results slightly)"
                )
        lines += [self.cpu_line()]
        lines += [f"  {line}" for line in self.backend_lines()]
        lines += [f"  GPU {g.index}: {g.words(numbered=False)}" for g in self.gpus]
        initial = self.seeding.torch_initial_seed
        seeds = [f"cpu {initial}"] if initial is not None else []
        seeds += [f"{name} {seed}" for name, seed in self.seeding.cuda_initial_seeds]
        if seeds:
            lines.append(f"  torch generators' initial seeds: {', '.join(seeds)}")
        if v.triton or v.torchvision:
            lines.append(
                f"  installed: Triton {v.triton or '-'}, torchvision {v.torchvision or '-'}"
            )
        lines += [
            f"  env {name}={value}" + (self.hash_seed_words(value) if name == HASH_SEED else "")
            for name, value in self.env
            if value is not None
        ]
        lines += [f"  imported {name} {version}" for name, version in self.frameworks]
        return lines

    def hash_seed_words(self, value: str) -> str:
        """What PYTHONHASHSEED=value in the environment means for this record's process: its
        own str hash seed was fixed when it started; the value reaches processes started
        after it was set (seed_all sets it for those)."""
        kernel = self.seeding.kernel_hash_seed
        if kernel is None:
            return " (Python reads it when a process starts; this process's own was not recorded)"
        if kernel == value:
            return " (this process started with it too: its str hashes use it)"
        own = "random" if kernel == RANDOM else f"seeded with {kernel}"
        return f" (for new processes; this process's str hashes stay {own}, as set when it started)"

    def cpu_line(self) -> str:
        c = self.cpu
        low = [name for name, on in (("bf16", c.bf16), ("TF32", c.tf32)) if on]
        line = f"  CPU: {c.model or 'model unknown'}, {c.cores or '?'} logical cores"
        if c.capability is not None:
            line += f", torch's kernels use {c.capability}"
        return line + (f", oneDNN can compute in {' and '.join(low)}" if low else "")

    def backend_lines(self) -> list[str]:
        """The other torch settings that change numbers, those not at torch's default."""
        return [
            f"{name} = {value}"
            for name, value in self.torch_flags.backends
            if BACKEND_DEFAULTS.get(name) != value
        ]

    def precision_lines(self) -> list[str]:
        """What the float32 precision settings mean, a line each: GPU matmuls, GPU
        convolutions (each with the setting that decides it), whether this machine's GPUs
        can use TF32 at all, and the CPU's oneDNN where it may go below float32."""
        flags = self.torch_flags
        conv, matmul = self.tf32_allowed()
        # the setting named is the one users know (and torch's default) where the
        # fp32_precision leaf holds what it says: a fresh torch's conv leaf reads 'tf32'
        # because cudnn.allow_tf32 is True, not because anyone set the leaf
        node = self.precision_of("torch.backends.cuda.matmul.fp32_precision")
        legacy = flags.float32_matmul_precision
        if node is not None and (legacy is None or (node == "tf32") != (legacy != "highest")):
            matmul_set = f"{self.set_by('torch.backends.cuda.matmul.fp32_precision')} = {node!r}"
        else:
            matmul_set = f"torch.get_float32_matmul_precision() = {_read(legacy)}"
        node = self.precision_of("torch.backends.cudnn.conv.fp32_precision")
        allowed = flags.cudnn_allow_tf32
        if node is not None and (allowed is None or (node == "tf32") != allowed):
            conv_set = f"{self.set_by('torch.backends.cudnn.conv.fp32_precision')} = {node!r}"
        else:
            conv_set = f"torch.backends.cudnn.allow_tf32 = {_read(allowed)}"
        lines = [
            f"float32 matmuls on the GPU: {_precision_words(matmul)}; set by {matmul_set}",
            f"float32 convolutions on the GPU: {_precision_words(conv)}; set by {conv_set}",
        ]
        if (conv or matmul) and self.env_value("NVIDIA_TF32_OVERRIDE") == "0":
            lines.append("NVIDIA_TF32_OVERRIDE=0: NVIDIA's libraries use no TF32 at all")
        elif (conv or matmul) and not self.gpus:
            lines.append(f"TF32 runs only on an {TF32_GPUS} or newer GPU: none is listed here")
        elif (conv or matmul) and not all(
            supports_tf32(gpu.compute_capability) for gpu in self.gpus
        ):
            lines.append(f"TF32 runs only on an {TF32_GPUS} or newer GPU: not on every GPU here")
        for what, leaf in (("matmuls", "matmul"), ("convolutions", "conv"), ("RNNs", "rnn")):
            value = self.precision_of(f"torch.backends.mkldnn.{leaf}.fp32_precision")
            if value in ("bf16", "tf32"):
                name = "bfloat16" if value == "bf16" else "TF32"
                lines.append(
                    f"float32 {what} on the CPU: may compute in {name} inside oneDNN, on CPUs "
                    f"that support it; set by torch.backends.mkldnn.{leaf}.fp32_precision = "
                    f"{value!r}"
                )
        return lines

    def to_text(self, verbose: bool = False) -> str:
        # GPU names, labels, env values and the platform may come from a saved file: escaped
        return escape_lines(self.summary() + (self.details() if verbose else []))

    def __str__(self) -> str:
        return self.to_text()

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # the report as text, not the dataclass repr

    def _repr_html_(self) -> str:
        summary = "<br>".join(escape_html(line.strip()) for line in self.summary())
        details = "<br>".join(escape_html(line.strip()) for line in self.details())
        return (
            f"<div>{summary}<details><summary>details</summary><code>{details}</code>"
            "</details></div>"
        )


def read_record(path: str) -> ReproRecord:
    """The record saved in `path` (by ``%repro --save``); ValueError naming what is wrong
    with the file otherwise (missing, not JSON, not a record of this schema)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except OSError as error:
        raise ValueError(f"cannot read {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path!r} is not a text file") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(
            f"{path!r} is not JSON: {error.msg} at line {error.lineno} ({RECORD_FORM})"
        ) from None
    try:
        return ReproRecord.from_dict(data)
    except (ValueError, TypeError) as error:
        raise ValueError(
            f"{path!r} is not a reproducibility record: {error} ({RECORD_FORM})"
        ) from None


def _wrong_schema(found: Any) -> str:
    if isinstance(found, int) and not isinstance(found, bool) and found > SCHEMA_VERSION:
        return (
            f"it was written by a newer colab_gpu_guard (schema_version {found}; this one "
            f"reads {SCHEMA_VERSION}): upgrade colab_gpu_guard here to compare with it"
        )
    return f"expected schema_version {SCHEMA_VERSION}, found {found!r}"


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of `ReproRecord.to_dict()`."""
    return _json_schema(ReproRecord, "colab_gpu_guard ReproRecord")


def _read(value: object) -> str:
    """A setting as recorded: None where torch refused to read it (or has no such one)."""
    if value is None:
        return "unknown (torch did not say: its old and new precision settings disagree)"
    return repr(value)


def _precision_words(tf32: bool) -> str:
    return TF32_MEANS if tf32 else "full float32 precision"


def _on(value: Optional[bool]) -> str:
    return "?" if value is None else ("on" if value else "off")
