"""Why do two runs differ? `repro_diff(saved, current)` compares two reproducibility records
and explains each difference that can change results, most important first (the float32
precision settings are judged in repro_precision.py)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..serialize import to_data
from ..units import counted, escape_html, escape_lines
from .repro import ReproRecord
from .repro_effects import (
    BACKEND_EFFECTS,
    CPU,
    CPU_ISA_ENV,
    CUDA_ENV,
    ENV_EFFECTS,
    ENVIRONMENT,
    FLAG_EFFECTS,
    FLAGS,
    FRAMEWORK_ENV,
    GPU,
    LIBRARIES,
    NO_CUDA,
    OTHER_VERSIONS,
    RANKS,
    SEEDS,
    STRICT_HINT,
    TF32_EFFECT,
    Difference,
    value_text,
)
from .repro_parts import gpu_summary
from .repro_precision import precision_differences


@dataclass(frozen=True)
class ReproDiff:
    """How two reproducibility records differ: result-changing differences first."""

    before_label: str
    after_label: str
    differences: tuple[Difference, ...] = ()  # can change results, most important first
    other: tuple[Difference, ...] = ()  # differ, not expected to change results
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        return self.to_text()

    def to_text(self, verbose: bool = False) -> str:
        """The differences, one line each; `verbose` adds how each works (the library,
        the CPU feature, the settings a call writes)."""
        count = len(self.differences)
        head = f"repro diff: {self.before_label} → {self.after_label}: "
        if count == 0:
            lines = [head + "nothing that can change results differs"]
        else:
            differ = counted(count, "difference")
            lines = [head + f"{differ} that can change results, most important first"]
        lines += [f"  {n}. {d.text(verbose)}" for n, d in enumerate(self.differences, 1)]
        lines += [
            f"  also differs (does not change the numbers here): {d.text(verbose)}"
            for d in self.other
        ]
        lines += [f"  note: {note}" for note in self.notes]
        return escape_lines(lines)  # GPU names, labels, env values: a saved file's, escaped

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # the report as text, not the dataclass repr

    def _repr_html_(self) -> str:
        return self.to_html()

    def to_html(self, verbose: bool = False) -> str:
        text = self.to_text(verbose).splitlines()
        items = "".join(f"<li>{escape_html(line.strip())}</li>" for line in text[1:])
        return f"<div><b>{escape_html(text[0])}</b><ul>{items}</ul></div>"

    def to_dict(self) -> dict[str, Any]:
        return to_data(self)


def repro_diff(
    before: ReproRecord,
    after: ReproRecord,
    before_label: Optional[str] = None,
    after_label: str = "this process",
) -> ReproDiff:
    """What differs between `before` (e.g. a saved record) and `after`, explained."""
    found: list[Difference] = []
    notes: list[str] = []
    for check in _CHECKS:
        check(before, after, found, notes)
    label = before_label or "saved record"
    if before.label:
        label += f" ({before.label})"
    found.sort(key=lambda d: d.rank)
    return ReproDiff(
        label,
        after_label,
        tuple(d for d in found if d.changes_results),
        tuple(d for d in found if not d.changes_results),
        tuple(notes),
    )


def program_set_env(record: ReproRecord) -> dict[str, str]:
    """The environment variables `record`'s program set itself with seed_all
    (deterministic=True), as the record shows them: a terminal's record of this machine
    lacks them, and the program would set them here too."""
    from .determinism import CUBLAS_DETERMINISTIC_CONFIGS, DETERMINISM_ENV

    if not record.torch_flags.deterministic_algorithms or record.seeding.seed is None:
        return {}  # deterministic mode not set by seed_all
    found = {
        name: value
        for name, (value, _) in DETERMINISM_ENV.items()
        if record.env_value(name) == value
    }
    cublas = record.env_value("CUBLAS_WORKSPACE_CONFIG")
    if cublas in CUBLAS_DETERMINISTIC_CONFIGS:
        found["CUBLAS_WORKSPACE_CONFIG"] = cublas
    return found


def _tf32_change(before: ReproRecord, after: ReproRecord) -> list[str]:
    (conv_a, mm_a), (conv_b, mm_b) = before.tf32(), after.tf32()
    changes = []
    for label, setting, was, now in (
        ("cuDNN convolutions", "allow_tf32=True", conv_a, conv_b),
        ("float32 matmuls", "TF32 matmul precision", mm_a, mm_b),
    ):
        if was is None or now is None or was == now:
            continue
        if now:
            changes.append(f"{label} now use TF32 ({setting}): {TF32_EFFECT}; {STRICT_HINT}")
        else:
            changes.append(f"{label} no longer use TF32 (the saved run's did): {TF32_EFFECT}")
    return changes


def _gpus(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    before, after = gpu_summary(a.gpus) or "none", gpu_summary(b.gpus) or "none"
    if not a.gpus or not b.gpus:
        if bool(a.gpus) != bool(b.gpus):
            reasons = [
                "a CPU run and a GPU run use different kernels: expect float differences; "
                "tensors drawn on the GPU come from the GPU's own random number generator, "
                "not the CPU's: the same seed draws other numbers there"
            ]
            used = [
                label
                for label, on in zip(
                    ("convolutions", "float32 matmuls"), (a.tf32() if a.gpus else b.tf32())
                )
                if on
            ]
            if used:
                run = "saved run" if a.gpus else "current run"
                reasons.append(f"the {run} used TF32 on its GPU ({', '.join(used)}): {TF32_EFFECT}")
            found.append(Difference("GPU", before, after, "; ".join(reasons), GPU))
        return
    if len(a.gpus) == len(b.gpus) and all(x.same_model(y) for x, y in zip(a.gpus, b.gpus)):
        return
    reasons = _tf32_change(a, b) or [
        "other kernels and reduction orders: expect float32 differences in the last bits, "
        "growing through a network; bitwise-equal results across GPU models are not "
        "guaranteed"
    ]
    found.append(Difference("GPU", before, after, "; ".join(reasons), GPU))


def _cpu(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    ca, cb = a.cpu, b.cpu
    if None not in (ca.capability, cb.capability) and ca.capability != cb.capability:
        why = (
            "torch's CPU kernels run another instruction set (torch.backends.cpu."
            "get_cpu_capability(); ATEN_CPU_CAPABILITY caps it): vectorised sums, softmax, "
            "tanh, matmuls and norms round differently, so CPU float results differ in the "
            "last bits"
        )
        for name in sorted(CPU_ISA_ENV):  # the variable that capped it: this entry says so
            was, now = a.env_value(name), b.env_value(name)
            if was != now:
                why += f"; {name} {value_text(was)} → {value_text(now)} set it"
        found.append(Difference("CPU capability", ca.capability, cb.capability, why, CPU))
    if None not in (ca.model, cb.model) and ca.model != cb.model:
        why = (
            "MKL and oneDNN choose their CPU kernels by the CPU they run on: CPU float "
            "results may differ in the last bits"
        )
        found.append(Difference("CPU", ca.model, cb.model, why, CPU))


def _seeds(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    sa, sb = a.seeding, b.seeding
    torch_differs = _torch_seeds_differ(sa, sb)
    torch_words = f"torch.initial_seed() {sa.torch_initial_seed} → {sb.torch_initial_seed}"
    if sa.seed != sb.seed:
        why = "every random draw differs (initial weights, dropout, shuffling)"
        followed = [
            words
            for words, follows in (
                ("the per-cell reseeding base", _base_follows_seed(a, b)),
                ("PYTHONHASHSEED", _hash_seed_follows_seed(a, b)),
            )
            if follows
        ]
        if followed:  # one seed_all call: one entry
            why += f"; seed_all set {' and '.join(followed)} to it"
        if None in (sa.seed, sb.seed):
            run = "the saved run" if sa.seed is None else "this process"
            why = (
                f"{run} was not seeded with seed_all: Python's and NumPy's draws may differ "
                "(seeds set another way are recorded for torch only)"
            )
            if torch_differs:
                why += f"; torch's draws differ ({torch_words})"
            elif sa.torch_initial_seed is not None and sb.torch_initial_seed is not None:
                why += "; torch's generator holds the same seed in both"
        found.append(Difference("seed", value_text(sa.seed), value_text(sb.seed), why, SEEDS))
    elif torch_differs:
        why = (
            "torch's generator was seeded with another seed (torch.manual_seed, Lightning's "
            "seed_everything, accelerate's set_seed...; an unseeded process starts from a "
            "random one): torch's random draws differ (Python's and NumPy's seeds are "
            "recorded only when seed_all sets them)"
        )
        found.append(
            Difference(
                "torch seed",
                str(sa.torch_initial_seed),
                str(sb.torch_initial_seed),
                why,
                SEEDS,
            )
        )
    cuda_a, cuda_b = dict(sa.cuda_initial_seeds), dict(sb.cuda_initial_seeds)
    for device in sorted(set(cuda_a) & set(cuda_b)):
        if cuda_a[device] != cuda_b[device] and sa.every_cell is None and sb.every_cell is None:
            why = "this GPU's generator was seeded with another seed: draws on it differ"
            found.append(
                Difference(
                    f"{device} generator's seed",
                    str(cuda_a[device]),
                    str(cuda_b[device]),
                    why,
                    SEEDS,
                )
            )
    if sa.every_cell != sb.every_cell and not _base_follows_seed(a, b):
        why = (
            "per-cell reseeding makes each cell's draws depend only on (seed, cell source); "
            "without it they depend on every cell run before"
        )
        found.append(
            Difference(
                "per-cell reseeding base",
                "off" if sa.every_cell is None else str(sa.every_cell),
                "off" if sb.every_cell is None else str(sb.every_cell),
                why,
                SEEDS,
            )
        )


def _base_follows_seed(a: ReproRecord, b: ReproRecord) -> bool:
    """Per-cell reseeding is on in both runs, from each run's seed_all seed (seed_all
    moves the base with the seed)."""
    return all(r.seeding.every_cell is not None for r in (a, b)) and all(
        r.seeding.every_cell == r.seeding.seed for r in (a, b)
    )


def _hash_seed_follows_seed(a: ReproRecord, b: ReproRecord) -> bool:
    """PYTHONHASHSEED holds each run's seed_all seed (seed_all sets it)."""
    return all(
        r.seeding.seed is not None and r.env_value("PYTHONHASHSEED") == str(r.seeding.seed)
        for r in (a, b)
    )


def _torch_seeds_differ(sa, sb) -> bool:
    """torch's initial seeds differ, both recorded, and not because per-cell reseeding
    gave each cell its own (the base seed is compared then)."""
    if sa.every_cell is not None or sb.every_cell is not None:
        return False
    return None not in (sa.torch_initial_seed, sb.torch_initial_seed) and (
        sa.torch_initial_seed != sb.torch_initial_seed
    )


def _flags(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    if a.versions.torch is None or b.versions.torch is None:
        if a.versions.torch != b.versions.torch:
            which = "the saved record" if a.versions.torch is None else "the current record"
            notes.append(
                f"torch was not imported when {which} was taken: torch's version and flags "
                "were not compared (import torch before taking the record)"
            )
        return
    no_cudnn = a.versions.cudnn is None and b.versions.cudnn is None
    for name, (rank, changes, why) in FLAG_EFFECTS.items():
        was, now = getattr(a.torch_flags, name), getattr(b.torch_flags, name)
        if was == now or (name == "cpu_threads" and None in (was, now)):
            continue  # a record from before cpu_threads was recorded says nothing of them
        if name.startswith("cudnn_") and no_cudnn:  # torch consults them only in cuDNN calls
            changes, why = False, "no effect here: neither record's torch has cuDNN"
        found.append(
            Difference(f"torch {name}", value_text(was), value_text(now), why, rank, changes)
        )


def _versions(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    va, vb = a.versions, b.versions
    checks = (
        (
            "torch",
            LIBRARIES,
            "other kernels and default algorithms: expect small float differences; random "
            "draws may differ too (PyTorch does not promise reproducibility across releases)",
        ),
        (
            "cuda_runtime",
            LIBRARIES,
            "other cuBLAS/cuFFT/cuRAND kernels: expect small float differences",
        ),
        (
            "cudnn",
            LIBRARIES,
            "other convolution algorithms and heuristics: expect small float differences",
        ),
        (
            "numpy",
            OTHER_VERSIONS,
            "the legacy global RNG (numpy.random.seed/rand) keeps its stream across versions; "
            "other NumPy results may differ in the last bits",
        ),
        (
            "python",
            OTHER_VERSIONS,
            "random.random() keeps its stream for the same seed; other random functions "
            "(randrange, shuffle, choice...) are not guaranteed to",
        ),
        (
            "triton",
            LIBRARIES,
            "torch.compile generates its GPU (and some CPU) kernels with Triton: other "
            "kernels, small float differences in compiled code",
        ),
        (
            "torchvision",
            OTHER_VERSIONS,
            "its ops, models' default weights and transforms may change (its v2 random "
            "transforms draw from torch's generator)",
        ),
        (
            "driver",
            OTHER_VERSIONS,
            "rarely changes results (it compiles PTX for GPUs a library ships no code for)",
        ),
    )
    for name, rank, why in checks:
        was, now = getattr(va, name), getattr(vb, name)
        both = (
            va.torch is not None and vb.torch is not None
            if name in ("torch", "cuda_runtime", "cudnn")
            else True
        )
        if was != now and both and (name in ("cuda_runtime", "cudnn") or None not in (was, now)):
            label = {
                "cuda_runtime": "CUDA runtime",
                "cudnn": "cuDNN",
                "triton": "Triton",
            }.get(name, name)
            if None in (was, now):  # a torch built without CUDA / cuDNN
                why = {
                    "cuda_runtime": "a torch without CUDA runs every op on the CPU",
                    "cudnn": "a torch without cuDNN runs convolutions and RNNs without it",
                }.get(name, why)
            changes = True
            if name in ("cuda_runtime", "cudnn") and a.without_cuda() and b.without_cuda():
                changes = False  # the same CPU kernels ran in both (the torch entry says so)
                why = f"{NO_CUDA}: every op ran on the CPU in both"
            found.append(Difference(label, was or "none", now or "none", why, rank, changes))
    frameworks_a, frameworks_b = dict(a.frameworks), dict(b.frameworks)
    for name in sorted(set(frameworks_a) & set(frameworks_b)):
        if frameworks_a[name] != frameworks_b[name] and name not in ("NumPy", "PyTorch"):
            found.append(
                Difference(
                    name,
                    frameworks_a[name],
                    frameworks_b[name],
                    "another version may change kernels and random streams",
                    OTHER_VERSIONS,
                )
            )


def _ranks(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    da, db = a.distributed, b.distributed
    if da.world_size != db.world_size:
        why = (
            "each rank reads another shard and gradients are averaged over another number "
            "of ranks: results differ"
        )
        found.append(Difference("world size", str(da.world_size), str(db.world_size), why, RANKS))
    if da.rank != db.rank:
        why = (
            "per-rank seeds (dataloader_generator, seed_worker) derive from the rank: draws differ"
        )
        found.append(Difference("rank", str(da.rank), str(db.rank), why, RANKS))


def _env(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    env_a, env_b = dict(a.env), dict(b.env)
    for name in sorted(set(env_a) | set(env_b)):
        was, now = env_a.get(name), env_b.get(name)
        if (
            name == "PYTHONHASHSEED"
            and a.seeding.seed != b.seeding.seed
            and (_hash_seed_follows_seed(a, b))
        ):
            continue  # the seed entry says seed_all set it
        if was != now:
            changes, why = ENV_EFFECTS.get(name, (True, "read by a library at start"))
            readers = FRAMEWORK_ENV.get(name, ())
            imported = {framework for framework, _ in a.frameworks + b.frameworks}
            if changes and readers and not imported & set(readers):
                changes = False
                why = (
                    f"no effect here: only {' and '.join(readers)} reads it, and neither run "
                    f"had it imported when its record was taken ({why})"
                )
            elif changes and name in CUDA_ENV and a.without_cuda() and b.without_cuda():
                changes, why = False, f"{NO_CUDA} ({why})"
            elif name in CPU_ISA_ENV and _both_capabilities(a, b):
                continue  # its effect is the CPU capability entry, which names it
            elif changes and name in CPU_ISA_ENV and _same_capability(a, b):
                changes = False
                why = f"no effect here: torch's CPU kernels used {a.cpu.capability} in both ({why})"
            found.append(
                Difference(name, value_text(was), value_text(now), why, ENVIRONMENT, changes)
            )


def _both_capabilities(a: ReproRecord, b: ReproRecord) -> bool:
    """Both records hold a CPU capability, and they differ."""
    return None not in (a.cpu.capability, b.cpu.capability) and (
        a.cpu.capability != b.cpu.capability
    )


def _same_capability(a: ReproRecord, b: ReproRecord) -> bool:
    return a.cpu.capability is not None and a.cpu.capability == b.cpu.capability


def _backends(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    """The other torch settings that change numbers, judged on these machines: a CUDA
    setting does nothing where neither record can run CUDA."""
    backends_a, backends_b = dict(a.torch_flags.backends), dict(b.torch_flags.backends)
    no_cuda = a.without_cuda() and b.without_cuda()
    for name in sorted(set(backends_a) & set(backends_b)):
        was, now = backends_a[name], backends_b[name]
        if was == now:
            continue
        cuda_only, rank, why = BACKEND_EFFECTS.get(name, (False, FLAGS, "another setting"))
        changes = not (cuda_only and no_cuda)
        if not changes:
            why = f"{NO_CUDA} ({why})"
        found.append(Difference(name, was, now, why, rank, changes))


_CHECKS: tuple[Callable[[ReproRecord, ReproRecord, list, list], None], ...] = (
    _gpus,
    _cpu,
    precision_differences,
    _seeds,
    _backends,
    _flags,
    _versions,
    _ranks,
    _env,
)
