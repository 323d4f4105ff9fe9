"""The float32 precision part of a reproducibility diff: TF32 and float32 matmul
precision, the fp32_precision settings, one entry per setting a user set (the settings that
follow it folded in), judged on the GPUs and CPUs of the two records."""

from __future__ import annotations

from typing import NamedTuple, Optional

from .precision import PARENT, TF32_GPUS
from .repro import ReproRecord
from .repro_effects import (
    CPU_EFFECT,
    CPU_MODE,
    CPU_MODE_WORDS,
    CPU_OPS,
    CPU_REDUCED,
    FLAGS,
    MATMUL_PRECISION_WRITES,
    PRECISION,
    PRECISION_FIELDS,
    STRICT_HINT,
    TF32_EFFECT,
    Difference,
    value_text,
)
from .repro_parts import supports_tf32


def precision_differences(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    fa, fb = a.torch_flags, b.torch_flags
    if a.versions.torch is None or b.versions.torch is None:
        return
    # a legacy setting torch refused to read (None: the legacy and fp32_precision settings
    # were mixed) is not compared: the fp32_precision settings show what is in force
    pairs = [
        (f"torch {name}", getattr(fa, name), getattr(fb, name))
        for name in PRECISION_FIELDS
        if None not in (getattr(fa, name), getattr(fb, name))
    ]
    precision_a, precision_b = dict(fa.fp32_precision), dict(fb.fp32_precision)
    for name in sorted(set(precision_a) & set(precision_b)):
        pairs.append((name, precision_a[name], precision_b[name]))
    pairs = _one_entry_per_call(pairs, fa.float32_matmul_precision, fb.float32_matmul_precision)
    pairs = _one_entry_per_setting(pairs)
    capable = [
        bool(r.gpus) and all(supports_tf32(g.compute_capability) for g in r.gpus) for r in (a, b)
    ]
    if all(capable):
        gpu = "changes where TF32 is used on these Ampere-or-newer GPUs: " + TF32_EFFECT
        if a.tf32() != b.tf32():
            gpu += f"; {STRICT_HINT}"
    elif any(capable):
        who = "the saved run" if capable[0] else "this run"
        gpu = (
            f"on the GPU it matters only on an Ampere-or-newer one ({TF32_GPUS}), which only "
            f"{who} has: see the GPU difference"
        )
    elif a.gpus or b.gpus:
        gpu = "no effect on these GPUs (TF32 needs Ampere or newer, sm_80+)"
    else:
        gpu = "no effect on a GPU here (neither record lists one)"
    for what, was, now in pairs:
        if _fp32(was) == _fp32(now):
            continue  # "none" inherits, and reads back as "none" only when nothing is set
        cpu = _cpu_precision(what, was, now, a, b)
        if what.startswith("torch.backends.mkldnn."):  # oneDNN: the CPU only
            explanation = cpu.words if cpu else "no effect on CPU float32 results"
            changes = bool(cpu) and cpu.changes
        else:
            explanation = gpu + (f"; {cpu.words}" if cpu else "")
            changes = all(capable) or (bool(cpu) and cpu.changes)
        details = [cpu.detail] if cpu else []
        if what == "torch float32_matmul_precision":
            details.append(
                "set by torch.set_float32_matmul_precision or "
                "torch.backends.cuda.matmul.allow_tf32; one entry for the call and the "
                "settings it writes with it: torch.backends.cuda.matmul.allow_tf32 and the "
                "cuda and mkldnn matmul fp32_precision settings"
            )
        # a CPU-only effect needs particular CPUs: ranked with the flags, after the seeds
        rank = PRECISION if all(capable) else FLAGS
        found.append(
            Difference(
                what,
                value_text(was),
                value_text(now),
                explanation,
                rank,
                changes,
                "; ".join(details),
            )
        )


def _one_entry_per_call(pairs: list, was: object, now: object) -> list:
    """Where float32_matmul_precision differs, the settings that set_float32_matmul_precision
    wrote with it, holding what it wrote in both records, are left out: one call, one entry."""
    if was == now:
        return pairs
    wrote_a, wrote_b = MATMUL_PRECISION_WRITES.get(str(was)), MATMUL_PRECISION_WRITES.get(str(now))
    if wrote_a is None or wrote_b is None:
        return pairs
    kept = []
    for what, before, after in pairs:
        key = what.removeprefix("torch.backends.").removesuffix(".fp32_precision")
        # "none" (a fresh torch's leaves, inheriting) is what "highest" writes as "ieee"
        if key in wrote_a and (_fp32(before), _fp32(after)) == (wrote_a[key], wrote_b[key]):
            continue
        kept.append((what, before, after))
    return kept


def _one_entry_per_setting(pairs: list) -> list:
    """A setting that differs is one entry, not one per setting that follows it: an
    fp32_precision leaf reads its parent's value where it holds "none" (torch resolves it),
    so one `torch.backends.fp32_precision = 'tf32'` changes every leaf below it; and
    `torch.backends.cudnn.allow_tf32` writes the cuDNN conv and rnn leaves. A setting that
    now reads what a changed ancestor gives it is left out (the ancestor's entry says what
    it does)."""
    changed = {
        what: (before, after) for what, before, after in pairs if _fp32(before) != _fp32(after)
    }
    kept = []
    for what, before, after in pairs:
        node = what.removeprefix("torch.backends.")
        follows = False
        parent = PARENT.get(node)
        while parent is not None and not follows:
            ancestor = changed.get(f"torch.backends.{parent}")
            follows = ancestor is not None and _fp32(after) == _fp32(_given(node, ancestor[1]))
            parent = PARENT.get(parent)
        legacy = changed.get("torch cudnn_allow_tf32")
        if legacy is not None and node in ("cudnn.conv.fp32_precision", "cudnn.rnn.fp32_precision"):
            follows = follows or _fp32(after) == ("tf32" if legacy[1] else "ieee")
        if not follows:
            kept.append((what, before, after))
    return kept


def _given(node: str, value: object) -> object:
    """What a leaf under `node`'s backend reads when an ancestor holds `value`: CUDA's
    settings have no bf16 (they read "none")."""
    return "none" if value == "bf16" and node.startswith(("cuda.", "cudnn.")) else value


def _fp32(value: object) -> object:
    return "ieee" if value == "none" else value


class CpuEffect(NamedTuple):
    """What a precision difference does on the two records' CPUs: `words` for the default
    line (only what the records say of their CPUs), `detail` for -v (which library, which
    CPU feature), `changes` whether it can change results there."""

    words: str
    detail: str
    changes: bool


def _cpu_precision(
    what: str, was: object, now: object, a: ReproRecord, b: ReproRecord
) -> Optional[CpuEffect]:
    """What a precision difference does to CPU float32 results through oneDNN, on the CPUs
    of the two records (`a` the saved run's, `b` this one's): set_float32_matmul_precision
    and the generic and mkldnn fp32_precision settings reach it (torch's matmul_allow_tf32
    and cudnn settings do not); bf16 runs only on CPUs with it, TF32 only with AMX-FP16.
    None where it does not reach the CPU."""
    if what == "torch float32_matmul_precision":
        # what oneDNN's matmuls run at: the mkldnn matmul leaf where torch has one (the call
        # writes it; torch.backends.cuda.matmul.allow_tf32, which also moves this setting,
        # does not), else what the call meant for oneDNN before the leaves existed
        leaf = "torch.backends.mkldnn.matmul.fp32_precision"
        leaves = (
            dict(a.torch_flags.fp32_precision).get(leaf),
            dict(b.torch_flags.fp32_precision).get(leaf),
        )
        if None not in leaves:
            modes = {_fp32(leaves[0]), _fp32(leaves[1])}
        else:
            modes = {CPU_MODE.get(str(was)), CPU_MODE.get(str(now))}
    elif what == "torch.backends.fp32_precision" or what.startswith("torch.backends.mkldnn."):
        modes = {_fp32(was), _fp32(now)}
    else:
        return None
    asked = [mode for mode in ("bf16", "tf32") if mode in modes]
    if not asked:
        return None
    ops = next((ops for key, ops in CPU_OPS.items() if key in what), "ops")
    here = [
        mode for mode in asked if _cpu_can(a, mode) is not False or _cpu_can(b, mode) is not False
    ]
    if not here:
        lacks = " or ".join("bf16" if mode == "bf16" else "AMX-FP16 (TF32)" for mode in asked)
        names = " or ".join(CPU_MODE_WORDS[mode] for mode in asked)
        return CpuEffect(
            f"no effect on these CPUs (neither run's CPU computes float32 {ops} in {names})",
            f"oneDNN runs float32 {ops} below fp32 only on CPUs with {lacks}, which neither "
            "record's CPU has",
            False,
        )
    words = "; ".join(_cpu_words(a, b, mode, ops) for mode in here)
    detail = f"oneDNN may run CPU float32 {ops} in " + " or ".join(
        CPU_REDUCED[mode] for mode in here
    )
    return CpuEffect(words, detail, True)


def _cpu_words(a: ReproRecord, b: ReproRecord, mode: str, ops: str) -> str:
    """What the records say of their CPUs and `mode`, in a PyTorch user's words: where a
    record does not say whether its CPU has it, the line says so and claims nothing."""
    name = CPU_MODE_WORDS[mode]
    can = {"the saved run's CPU": _cpu_can(a, mode), "this CPU": _cpu_can(b, mode)}
    has = [who for who, value in can.items() if value]
    lacks = [who for who, value in can.items() if value is False]
    silent = [who for who, value in can.items() if value is None]
    if len(has) == 2:
        return f"CPU float32 {ops} may run in {name} on both runs' CPUs: {CPU_EFFECT[mode]}"
    if has and lacks:
        return f"CPU float32 {ops} may run in {name} on {has[0]} only: {CPU_EFFECT[mode]}"
    said = [f"{who} can" for who in has] + [f"{who} cannot" for who in lacks]
    unknown = " and ".join(
        "the saved record" if who.startswith("the saved") else "this record" for who in silent
    )
    said.append(f"{unknown} {'does' if len(silent) == 1 else 'do'} not say")
    return f"on the CPU only where the CPU computes {ops} in {name} ({'; '.join(said)})"


def _cpu_can(record: ReproRecord, mode: str) -> Optional[bool]:
    """Whether the record's CPU runs oneDNN in `mode` ("bf16", "tf32"); None: not recorded."""
    return record.cpu.bf16 if mode == "bf16" else record.cpu.tf32
