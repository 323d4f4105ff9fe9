"""fp32 precision under deterministic mode: which TF32 / matmul precision settings are in
force, what they mean on this machine's GPUs, and the strict switch to full fp32.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Optional

from ..frameworks import torch as torch_support

# fp32_precision attributes, parents before children (the order restore writes them in).
FP32_NODES = (
    "fp32_precision",
    "cuda.matmul.fp32_precision",
    "cudnn.fp32_precision",
    "cudnn.conv.fp32_precision",
    "cudnn.rnn.fp32_precision",
    "mkldnn.fp32_precision",
    "mkldnn.matmul.fp32_precision",
    "mkldnn.conv.fp32_precision",
    "mkldnn.rnn.fp32_precision",
)
PARENT = {  # ATen resolves "none" leaf -> its backend's "all" -> generic
    "cudnn.fp32_precision": "fp32_precision",  # cudnn.fp32_precision is ("cuda", "all")
    "mkldnn.fp32_precision": "fp32_precision",
    "cuda.matmul.fp32_precision": "cudnn.fp32_precision",
    "cudnn.conv.fp32_precision": "cudnn.fp32_precision",
    "cudnn.rnn.fp32_precision": "cudnn.fp32_precision",
    "mkldnn.matmul.fp32_precision": "mkldnn.fp32_precision",
    "mkldnn.conv.fp32_precision": "mkldnn.fp32_precision",
    "mkldnn.rnn.fp32_precision": "mkldnn.fp32_precision",
}
STRICT_NODES = (
    "cuda.matmul.fp32_precision",
    "cudnn.conv.fp32_precision",
    "cudnn.rnn.fp32_precision",
    # oneDNN on the CPU: bf16 where the user (or precision "medium") asked for it
    "mkldnn.matmul.fp32_precision",
    "mkldnn.conv.fp32_precision",
    "mkldnn.rnn.fp32_precision",
)
# What strict mode changes (set_float32_matmul_precision also writes mkldnn.matmul), so
# what restore writes back. Never a parent: torch 2.13's mkldnn.fp32_precision setter
# writes the generic node, and strict mode leaves the parents alone anyway.
RESTORED_NODES = STRICT_NODES
# TF32 (10-bit mantissa inside fp32 matmuls and convolutions) runs only on compute
# capability 8.0 and newer (Ampere: A100, L4, H100...). torch's defaults leave cuDNN
# convolutions on TF32 and cuBLAS matmuls on full fp32, so the same seed gives different
# numbers on a T4 and an A100.
TF32_MIN_CAPABILITY = (8, 0)
TF32_GPUS = "A100/L4/H100"


@dataclass(frozen=True)
class PrecisionFlags:
    """The fp32 precision settings as torch reads them back; None where torch refuses to
    answer (its two views disagree) or this torch has no such setting."""

    matmul_allow_tf32: Optional[bool]
    cudnn_allow_tf32: Optional[bool]
    matmul_precision: Optional[str]
    fp32: tuple[tuple[str, str], ...] = ()  # (node, resolved value) where this torch has it

    def describe(self) -> dict[str, str]:
        shown = {
            "torch.backends.cuda.matmul.allow_tf32": _shown(self.matmul_allow_tf32),
            "torch.backends.cudnn.allow_tf32": _shown(self.cudnn_allow_tf32),
            "torch.get_float32_matmul_precision()": _shown(self.matmul_precision),
        }
        shown.update({f"torch.backends.{node}": value for node, value in self.fp32})
        return shown

    def node(self, name: str) -> Optional[str]:
        return dict(self.fp32).get(name)

    @property
    def conv_tf32(self) -> bool:
        value = self.node("cudnn.conv.fp32_precision")
        return value == "tf32" if value is not None else bool(self.cudnn_allow_tf32)

    @property
    def matmul_tf32(self) -> bool:
        value = self.node("cuda.matmul.fp32_precision")
        if value is not None:
            return value == "tf32"
        return bool(self.matmul_allow_tf32) or self.matmul_precision not in (None, "highest")

    @property
    def rnn_tf32(self) -> bool:
        value = self.node("cudnn.rnn.fp32_precision")
        return value == "tf32" if value is not None else bool(self.cudnn_allow_tf32)

    def tf32_uses(self) -> list[str]:
        return [
            what
            for what, used in (
                ("cuBLAS matmuls", self.matmul_tf32),
                ("cuDNN convolutions", self.conv_tf32),
                ("cuDNN RNNs", self.rnn_tf32),
            )
            if used
        ]

    def cpu_reduced(self, supported: Optional[dict[str, Optional[bool]]] = None) -> list[str]:
        """What oneDNN is set to run below fp32 on the CPU: 'CPU matmuls (bf16)', ...;
        given `supported` ({"bf16": bool or None, "tf32": ...}, from `cpu_low_precision`),
        only those this CPU can run that way or may (None: unknown)."""
        return [
            f"CPU {what} ({value})"
            for what, value in self._cpu_settings()
            if supported is None or supported.get(value) is not False
        ]

    def cpu_reduced_not_here(self, supported: dict[str, Optional[bool]]) -> list[str]:
        """Set below fp32 but this CPU lacks it, so oneDNN runs them in full fp32."""
        return [
            f"CPU {what} ({value})"
            for what, value in self._cpu_settings()
            if supported.get(value) is False
        ]

    def _cpu_settings(self) -> list[tuple[str, str]]:
        return [
            (what, value)
            for what, node in (
                ("matmuls", "mkldnn.matmul.fp32_precision"),
                ("convolutions", "mkldnn.conv.fp32_precision"),
                ("RNNs", "mkldnn.rnn.fp32_precision"),
            )
            if (value := self.node(node)) not in (None, "ieee", "none")
        ]


def cpu_low_precision(torch: ModuleType) -> tuple[Optional[bool], Optional[bool]]:
    """(bf16, TF32): whether oneDNN can run float32 matmuls in them on this CPU, as ATen
    decides it (mkldnn/Matmul.cpp: bf16 needs mkldnn_bf16_device_check, which
    torch.ops.mkldnn._is_mkldnn_bf16_supported() reports; TF32 needs AMX-FP16,
    torch.cpu._is_amx_fp16_supported()). None where this torch cannot say."""
    bf16 = tf32 = None
    with contextlib.suppress(AttributeError, RuntimeError):  # torch: a build without oneDNN
        bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    reader = getattr(getattr(torch, "cpu", None), "_is_amx_fp16_supported", None)
    if reader is not None:
        with contextlib.suppress(RuntimeError):  # torch: cpuinfo could not start
            tf32 = bool(reader())
    return bf16, tf32


def _shown(value: object) -> str:
    if value is None:
        return "(torch refuses to read it: legacy and fp32_precision settings were mixed)"
    return str(value)


def _owner(torch: ModuleType, node: str) -> tuple[Optional[object], str]:
    *parents, attribute = node.split(".")
    owner: object = torch.backends
    for name in parents:
        owner = getattr(owner, name, None)
        if owner is None:
            return None, attribute
    return owner, attribute


def _read(read, *args) -> Optional[object]:
    try:
        return read(*args)
    except (RuntimeError, AttributeError):
        return None


def read_precision(torch: ModuleType) -> PrecisionFlags:
    fp32 = []
    for node in FP32_NODES:
        owner, attribute = _owner(torch, node)
        value = _read(getattr, owner, attribute) if owner is not None else None
        if isinstance(value, str):
            fp32.append((node, value))
    reader = getattr(torch, "get_float32_matmul_precision", None)
    return PrecisionFlags(
        matmul_allow_tf32=_read(lambda: bool(torch.backends.cuda.matmul.allow_tf32)),
        cudnn_allow_tf32=_read(lambda: bool(torch.backends.cudnn.allow_tf32)),
        matmul_precision=_read(reader) if reader else None,
        fp32=tuple(fp32),
    )


def _write_node(torch: ModuleType, node: str, value: str) -> None:
    owner, attribute = _owner(torch, node)
    if owner is not None and hasattr(owner, attribute):
        setattr(owner, attribute, value)


def make_strict(torch: ModuleType) -> None:
    """Full fp32 for CUDA matmuls, cuDNN convolutions / RNNs (TF32 off) and oneDNN's on the
    CPU (no bf16).

    torch keeps two views of these settings (ATen's Context.cpp). The legacy one:
    ``torch.backends.cuda.matmul.allow_tf32`` / ``torch.set_float32_matmul_precision`` and
    ``torch.backends.cudnn.allow_tf32``. The newer ``fp32_precision`` tree (generic -> cuda
    / mkldnn -> matmul / conv / rnn; "none" inherits from the parent, reads return the
    resolved value). The legacy setters write both views; reading a legacy flag raises when
    the two disagree ("a mix of the legacy and new APIs"). So strict mode writes through the
    legacy setters first (keeping both views agreed) and then pins the leaves to "ieee",
    which a ``torch.backends.fp32_precision = "tf32"`` higher up can no longer override.
    """
    if hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    for node in STRICT_NODES:
        _write_node(torch, node, "ieee")


def restore_precision(torch: ModuleType, saved: PrecisionFlags) -> None:
    """Put back what `read_precision` read: legacy setters first, then each fp32_precision
    leaf strict mode changed; a leaf whose value equalled its parent's goes back to "none"
    (inheriting). A legacy flag torch refused to read (mixed APIs) stays as strict mode
    left it; the precision each op runs at is restored all the same."""
    if saved.matmul_precision is not None and hasattr(torch, "set_float32_matmul_precision"):
        torch.set_float32_matmul_precision(saved.matmul_precision)
    elif saved.matmul_allow_tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = saved.matmul_allow_tf32
    if saved.cudnn_allow_tf32 is not None:
        torch.backends.cudnn.allow_tf32 = saved.cudnn_allow_tf32
    values = dict(saved.fp32)
    for node in RESTORED_NODES:
        if node not in values:
            continue
        parent = PARENT.get(node)
        inherits = parent is not None and values.get(parent) == values[node]
        _write_node(torch, node, "none" if inherits else values[node])


# ---------------------------------------------------------------- what it means here


@dataclass(frozen=True)
class GpuArch:
    index: int
    name: str
    capability: Optional[tuple[int, int]]

    @property
    def label(self) -> str:
        sm = f"sm_{self.capability[0]}{self.capability[1]}" if self.capability else "sm unknown"
        return f"cuda:{self.index} {self.name} ({sm})"

    @property
    def has_tf32(self) -> Optional[bool]:
        return None if self.capability is None else self.capability >= TF32_MIN_CAPABILITY


def gpu_archs(torch: ModuleType) -> list[GpuArch]:
    """Each visible GPU's name and compute capability: from torch once CUDA is up (its own
    device numbering), else from NVML (no CUDA context is created either way)."""
    if torch_support.cuda_version(torch) is None:
        return []
    if torch_support.cuda_initialized(torch):
        archs = []
        for index in range(torch_support.cuda_device_count(torch)):
            props = _read(torch.cuda.get_device_properties, index)
            capability = (props.major, props.minor) if props is not None else None
            archs.append(GpuArch(index, getattr(props, "name", "?"), capability))
        return archs
    from .. import nvml

    snapshot = nvml.snapshot(processes=False)
    archs = []
    for device in snapshot.devices if snapshot.available else ():
        text = str(device.compute_capability or "")
        major, _, minor = text.partition(".")
        capability = (int(major), int(minor)) if major.isdigit() and minor.isdigit() else None
        archs.append(GpuArch(device.index, device.name or "?", capability))
    return archs


@dataclass
class PrecisionReport:
    """The precision settings in force and what they mean on this machine's GPUs."""

    flags: dict[str, str]
    tf32_uses: list[str]  # what may use TF32 on an sm_80+ GPU under these settings
    gpus: list[str] = field(default_factory=list)
    tf32_gpus: list[str] = field(default_factory=list)  # those of them that have TF32
    strict: bool = False
    cpu_reduced: list[str] = field(default_factory=list)  # oneDNN below fp32: 'CPU matmuls (bf16)'
    # set below fp32, but this CPU lacks bf16 / AMX-FP16: oneDNN runs them in fp32 here
    cpu_not_here: list[str] = field(default_factory=list)

    def meaning(self) -> str:
        cpu = _cpu_words(self.cpu_reduced)
        meaning = self._gpu_meaning() + (f"; {cpu}" if cpu else "")
        if self.cpu_not_here:
            meaning += (
                f"; {_and_join(self.cpu_not_here)} run in full fp32 here (this CPU lacks "
                "it), below fp32 on CPUs that have it"
            )
        return meaning

    def _gpu_meaning(self) -> str:
        uses = _and_join(self.tf32_uses)
        if not uses:
            return "TF32 is off: matmuls, convolutions and RNNs run in full fp32 on every GPU"
        if self.tf32_gpus:
            return (
                f"{uses} run in TF32 on {', '.join(self.tf32_gpus)}: results differ from "
                "full fp32 around 1e-3 (relative) and between GPU generations; "
                "add --strict for full fp32"
            )
        here = f"{', '.join(self.gpus)}: below sm_80" if self.gpus else "no CUDA GPU"
        return (
            f"TF32 does not apply here ({here}), but on an {TF32_GPUS} (sm_80+) these "
            f"settings run {uses} in TF32, so numbers there will differ; add --strict for "
            "full fp32 everywhere"
        )

    def clause(self) -> str:
        """A few words for the one-line summary ('' where none is worth its place). What
        TF32 would do on another GPU is said there only where this machine has a CUDA GPU
        (a T4 user may move to an A100 and see other numbers); without one it is off-topic,
        and `meaning` (-v) still says it."""
        uses = _and_join(self.tf32_uses)
        if not uses:
            words = "TF32 off" if self.cpu_reduced else "full fp32 (TF32 off)"
        elif self.tf32_gpus:
            words = f"{uses} use TF32 here"
        elif self.gpus:
            words = f"{uses} would use TF32 on an {TF32_GPUS} (not here)"
        else:
            words = ""
        return "; ".join(part for part in (words, _cpu_words(self.cpu_reduced)) if part)

    def lines(self) -> list[str]:
        """The settings, one line each, the fp32_precision tree on one line."""
        legacy = [f"{name} = {value}" for name, value in self.flags.items() if "fp32_" not in name]
        tree = [
            f"{_node_label(name)}={value}" for name, value in self.flags.items() if "fp32_" in name
        ]
        if tree:
            legacy.append("torch.backends.<node>.fp32_precision: " + ", ".join(tree))
        return legacy + [self.meaning()]


def _and_join(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else "".join(items)


def _cpu_words(reduced: list[str]) -> str:
    """'CPU matmuls (bf16) may run below fp32 here (oneDNN does where this CPU can)'."""
    if not reduced:
        return ""
    return f"{_and_join(reduced)} may run below fp32 here (oneDNN does where this CPU can)"


def _node_label(name: str) -> str:
    node = name.removeprefix("torch.backends.").removesuffix("fp32_precision").rstrip(".")
    return node or "(generic)"


def precision_report(torch: ModuleType, strict: bool) -> PrecisionReport:
    flags = read_precision(torch)
    archs = gpu_archs(torch)
    bf16, tf32 = cpu_low_precision(torch)
    supported = {"bf16": bf16, "tf32": tf32}
    return PrecisionReport(
        flags=flags.describe(),
        tf32_uses=flags.tf32_uses(),
        gpus=[arch.label for arch in archs],
        tf32_gpus=[arch.label for arch in archs if arch.has_tf32],
        strict=strict,
        cpu_reduced=flags.cpu_reduced(supported),
        cpu_not_here=flags.cpu_reduced_not_here(supported),
    )
