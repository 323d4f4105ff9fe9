"""Why do two runs differ? `repro_diff(saved, current)` compares two reproducibility records
and explains each difference that can change results, most important first."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from ..serialize import to_data
from ..units import escape_lines
from .repro import ReproRecord, gpu_summary, supports_tf32

STRICT_HINT = "run with %seed_all --strict to rule it out"
TF32_EFFECT = "expect relative differences around 1e-3"

# rank: most important first
GPU, CPU, PRECISION, SEEDS, FLAGS, LIBRARIES, RANKS, ENVIRONMENT, OTHER_VERSIONS = range(9)
NO_CUDA = "no effect here: neither record's machine can run CUDA"
# environment variables read only by CUDA libraries (or torch's CUDA code)
CUDA_ENV = {
    "CUBLAS_WORKSPACE_CONFIG",
    "CUBLASLT_WORKSPACE_SIZE",
    "NVIDIA_TF32_OVERRIDE",
    "CUDA_VISIBLE_DEVICES",
    "FLASH_ATTENTION_DETERMINISTIC",
    "TF_CUDNN_DETERMINISTIC",
    "CUPY_SEED",
}
# environment variables that cap the CPU instruction set: what they did shows in the CPU
# capability torch used, compared on its own
CPU_ISA_ENV = {"ATEN_CPU_CAPABILITY"}

ENV_EFFECTS: dict[str, tuple[bool, str]] = {  # name -> (changes results, why)
    "NVIDIA_TF32_OVERRIDE": (
        True,
        "NVIDIA_TF32_OVERRIDE=0 switches TF32 off in cuBLAS and cuDNN whatever torch's flags say",
    ),
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": (
        True,
        "read once, when torch is imported: =1 starts float32_matmul_precision at 'high' "
        "(TF32 matmuls on Ampere or newer) until the program sets another; the torch flags "
        "show what was in force",
    ),
    "CUBLAS_WORKSPACE_CONFIG": (
        True,
        "with several CUDA streams, cuBLAS is deterministic only with :4096:8 or :16:8 "
        "(NVIDIA's cuBLAS docs); under use_deterministic_algorithms(True), torch before "
        "2.10 raises at cuBLAS calls without one",
    ),
    "CUDA_VISIBLE_DEVICES": (True, "decides which GPUs (and how many) this process uses"),
    "PYTHONHASHSEED": (
        True,
        "fixes str hashing in new Python processes (spawned workers, scripts): the "
        "iteration order of sets of strings there differs",
    ),
    "OMP_NUM_THREADS": (
        True,
        "CPU reductions are split over another number of threads: float sums may differ "
        "in the last bits",
    ),
    "MKL_NUM_THREADS": (
        True,
        "MKL splits CPU work over another number of threads: float results may differ "
        "in the last bits",
    ),
    "TF_DETERMINISTIC_OPS": (True, "switches TensorFlow's deterministic ops on or off"),
    "TF_CUDNN_DETERMINISTIC": (True, "switches TensorFlow's deterministic cuDNN on or off"),
    "TF_ENABLE_ONEDNN_OPTS": (True, "TensorFlow's oneDNN CPU kernels round differently"),
    "XLA_FLAGS": (True, "XLA (JAX, TensorFlow) compiles and fuses kernels differently"),
    "FLASH_ATTENTION_DETERMINISTIC": (
        True,
        "decides whether flash-attention's backward pass is deterministic",
    ),
    "CUPY_SEED": (True, "seeds CuPy's generators at their first use"),
    "CUDA_LAUNCH_BLOCKING": (False, "makes kernel launches synchronous: slower, same numbers"),
    "ATEN_CPU_CAPABILITY": (
        True,
        "caps the instruction set torch's CPU kernels use (default, avx2, avx512): "
        "vectorised sums, softmax, tanh, matmuls and norms round differently",
    ),
    "MKL_CBWR": (
        True,
        "MKL's conditional numerical reproducibility: picks MKL's code path by name "
        "instead of by this CPU",
    ),
    "ONEDNN_MAX_CPU_ISA": (True, "caps the instruction set oneDNN's CPU kernels use"),
    "DNNL_MAX_CPU_ISA": (True, "caps the instruction set oneDNN's CPU kernels use"),
    "CUBLASLT_WORKSPACE_SIZE": (True, "cuBLASLt may choose other matmul algorithms"),
    "XLA_PYTHON_CLIENT_PREALLOCATE": (False, "decides how much GPU memory JAX takes up front"),
}

FLAG_EFFECTS: dict[str, tuple[int, bool, str]] = {  # field -> (rank, changes results, why)
    "deterministic_algorithms": (
        FLAGS,
        True,
        "without deterministic algorithms, ops that accumulate in parallel may differ from "
        "run to run (on CUDA: index_add_, scatter_add_, many backward passes; on the CPU: "
        "index_put_/put_ with accumulate=True, index_copy_)",
    ),
    "cudnn_deterministic": (
        FLAGS,
        True,
        "without it cuDNN may choose nondeterministic convolution algorithms",
    ),
    "cudnn_benchmark": (
        FLAGS,
        True,
        "with benchmark on, cuDNN times candidate algorithms at the first call and may "
        "choose different ones each run",
    ),
    "deterministic_warn_only": (
        FLAGS,
        False,
        "decides only whether ops without a deterministic implementation raise or warn",
    ),
    "cpu_threads": (
        FLAGS,
        True,
        "torch splits CPU ops over another number of threads (torch.get_num_threads(): the "
        "machine's cores unless set), so CPU sums, matmuls and softmax may add in another "
        "order and differ in the last bits; torch.set_num_threads(N) in both runs rules "
        "this out",
    ),
}
# torch settings beyond determinism and fp32 precision: (CUDA only, rank, why)
BACKEND_EFFECTS: dict[str, tuple[bool, int, str]] = {
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": (
        True,
        PRECISION,
        "fp16 GEMMs on the GPU may add up partial sums in fp16 instead of fp32",
    ),
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": (
        True,
        PRECISION,
        "bf16 GEMMs on the GPU may add up partial sums in bf16 instead of fp32",
    ),
    "torch.backends.cuda.matmul.allow_fp16_accumulation": (
        True,
        PRECISION,
        "fp16 GEMMs on the GPU accumulate in fp16 (faster, much less precise)",
    ),
    "torch.backends.cuda.flash_sdp_enabled()": (
        True,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (flash attention on or off)",
    ),
    "torch.backends.cuda.mem_efficient_sdp_enabled()": (
        True,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (memory-efficient attention)",
    ),
    "torch.backends.cuda.math_sdp_enabled()": (
        True,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (the math fallback on the GPU)",
    ),
    "torch.backends.cuda.cudnn_sdp_enabled()": (
        True,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (cuDNN attention)",
    ),
    "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()": (
        True,
        PRECISION,
        "the math attention kernel on the GPU may reduce fp16/bf16 in that precision",
    ),
    "torch.backends.cuda.preferred_blas_library()": (
        True,
        FLAGS,
        "GPU matmuls run in another BLAS library (cuBLAS or cuBLASLt): other kernels",
    ),
    "torch.backends.cudnn.enabled": (
        True,
        FLAGS,
        "convolutions and RNNs on the GPU run without cuDNN (other kernels) or with it",
    ),
    "torch.backends.mkldnn.enabled": (
        False,
        FLAGS,
        "CPU convolutions, matmuls and RNNs run without oneDNN (other kernels) or with it",
    ),
    "torch.backends.mkldnn.deterministic": (
        False,
        FLAGS,
        "without it oneDNN may use nondeterministic algorithms on the CPU",
    ),
    "torch.utils.deterministic.fill_uninitialized_memory": (
        False,
        FLAGS,
        "under deterministic algorithms, torch.empty and friends fill new memory (NaN or "
        "the integer maximum) or leave what was there",
    ),
}
PRECISION_FIELDS = ("matmul_allow_tf32", "cudnn_allow_tf32", "float32_matmul_precision")
# Which CPUs oneDNN runs float32 matmuls on in a lower precision (ATen's mkldnn/Matmul.cpp:
# bf16 needs mkldnn_bf16_device_check, TF32 needs AMX-FP16), and the size of the effect.
CPU_REDUCED = {
    "bf16": "bf16 on CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: expect relative "
    "differences around 1e-2",
    "tf32": "TF32 on CPUs with AMX-FP16: expect relative differences around 1e-3",
}
CPU_OPS = {"matmul": "matmuls", "conv": "convolutions", "rnn": "RNNs"}
CPU_MODE = {"highest": "ieee", "high": "tf32", "medium": "bf16"}  # set_float32_matmul_precision
# what one set_float32_matmul_precision call writes besides itself (ATen's Context.cpp):
# torch.backends.cuda.matmul.allow_tf32 and the cuda/mkldnn matmul fp32_precision leaves
MATMUL_PRECISION_WRITES = {
    "highest": {"torch matmul_allow_tf32": False, "cuda.matmul": "ieee", "mkldnn.matmul": "ieee"},
    "high": {"torch matmul_allow_tf32": True, "cuda.matmul": "tf32", "mkldnn.matmul": "tf32"},
    "medium": {"torch matmul_allow_tf32": True, "cuda.matmul": "tf32", "mkldnn.matmul": "bf16"},
}


@dataclass(frozen=True)
class Difference:
    """One field that differs, with what it means for the numbers."""

    what: str
    before: str
    after: str
    explanation: str
    rank: int  # lower is more important
    changes_results: bool = True

    def __str__(self) -> str:
        return f"{self.what} {self.before} → {self.after}: {self.explanation}"


@dataclass(frozen=True)
class ReproDiff:
    """How two reproducibility records differ: result-changing differences first."""

    before_label: str
    after_label: str
    differences: tuple[Difference, ...] = ()  # can change results, most important first
    other: tuple[Difference, ...] = ()  # differ, not expected to change results
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        count = len(self.differences)
        head = f"repro diff: {self.before_label} → {self.after_label}: "
        if count == 0:
            lines = [head + "nothing that can change results differs"]
        else:
            plural = "difference" if count == 1 else "differences"
            lines = [head + f"{count} {plural} that can change results, most important first"]
        lines += [f"  {n}. {d}" for n, d in enumerate(self.differences, 1)]
        lines += [f"  also differs (does not change the numbers here): {d}" for d in self.other]
        lines += [f"  note: {note}" for note in self.notes]
        return escape_lines(lines)  # GPU names, labels, env values: a saved file's, escaped

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # the report as text, not the dataclass repr

    def _repr_html_(self) -> str:
        import html

        text = str(self).splitlines()
        items = "".join(f"<li>{html.escape(line.strip())}</li>" for line in text[1:])
        return f"<div><b>{html.escape(text[0])}</b><ul>{items}</ul></div>"

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


def _text(value: object) -> str:
    return "unset" if value is None else str(value)


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
        found.append(Difference("CPU capability", ca.capability, cb.capability, why, CPU))
    if None not in (ca.model, cb.model) and ca.model != cb.model:
        why = (
            "MKL and oneDNN choose their CPU kernels by the CPU they run on: CPU float "
            "results may differ in the last bits"
        )
        found.append(Difference("CPU", ca.model, cb.model, why, CPU))


def _precision(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    fa, fb = a.torch_flags, b.torch_flags
    if fa.cudnn_allow_tf32 is None or fb.cudnn_allow_tf32 is None:
        return
    pairs = [(f"torch {name}", getattr(fa, name), getattr(fb, name)) for name in PRECISION_FIELDS]
    precision_a, precision_b = dict(fa.fp32_precision), dict(fb.fp32_precision)
    for name in sorted(set(precision_a) & set(precision_b)):
        pairs.append((name, precision_a[name], precision_b[name]))
    pairs = _one_entry_per_call(pairs, fa.float32_matmul_precision, fb.float32_matmul_precision)
    capable = [
        bool(r.gpus) and all(supports_tf32(g.compute_capability) for g in r.gpus) for r in (a, b)
    ]
    if all(capable):
        gpu = "changes where TF32 is used on these Ampere-or-newer GPUs: " + TF32_EFFECT
        if a.tf32() != b.tf32():
            gpu += f"; {STRICT_HINT}"
    elif any(capable):
        gpu = (
            "takes effect only on Ampere-or-newer GPUs (sm_80+), which only one of the runs "
            "has: the GPU difference decides"
        )
    elif a.gpus or b.gpus:
        gpu = "no effect on these GPUs (TF32 needs Ampere or newer, sm_80+)"
    else:
        gpu = "no effect on a GPU here (neither record lists one)"
    for what, was, now in pairs:
        if _fp32(was) == _fp32(now):
            continue  # "none" inherits, and reads back as "none" only when nothing is set
        cpu, cpu_changes = _cpu_precision(what, was, now, a, b)
        if what.startswith("torch.backends.mkldnn."):  # oneDNN: the CPU only
            explanation, changes = cpu or "no effect on CPU float32 results", cpu_changes
        else:
            explanation = gpu + (f"; {cpu}" if cpu else "")
            changes = all(capable) or cpu_changes
        if what == "torch float32_matmul_precision":
            explanation = (
                "one torch.set_float32_matmul_precision call (it also sets allow_tf32 and "
                "the matmul fp32_precision settings): " + explanation
            )
        # a CPU-only effect needs particular CPUs: ranked with the flags, after the seeds
        rank = PRECISION if all(capable) else FLAGS
        found.append(Difference(what, _text(was), _text(now), explanation, rank, changes))


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
        if key in wrote_a and (before, after) == (wrote_a[key], wrote_b[key]):
            continue
        kept.append((what, before, after))
    return kept


def _fp32(value: object) -> object:
    return "ieee" if value == "none" else value


def _cpu_precision(
    what: str, was: object, now: object, a: ReproRecord, b: ReproRecord
) -> tuple[Optional[str], bool]:
    """What a precision difference does to CPU float32 results through oneDNN, and whether
    it changes them on the CPUs of the two records: set_float32_matmul_precision and the
    generic and mkldnn fp32_precision settings reach it (torch's matmul_allow_tf32 and
    cudnn settings do not); bf16 runs only on CPUs with it, TF32 only with AMX-FP16."""
    if what == "torch float32_matmul_precision":
        modes = {CPU_MODE.get(str(was)), CPU_MODE.get(str(now))}
    elif what == "torch.backends.fp32_precision" or what.startswith("torch.backends.mkldnn."):
        modes = {_fp32(was), _fp32(now)}
    else:
        return None, False
    asked = [mode for mode in ("bf16", "tf32") if mode in modes]
    if not asked:
        return None, False
    ops = next((ops for key, ops in CPU_OPS.items() if key in what), "ops")
    here = [
        mode for mode in asked if _cpu_can(a, mode) is not False or _cpu_can(b, mode) is not False
    ]
    if not here:
        lacks = " or ".join("bf16" if mode == "bf16" else "AMX-FP16 (TF32)" for mode in asked)
        return (
            f"no effect on these CPUs: oneDNN runs float32 {ops} below fp32 only on CPUs with "
            f"{lacks}, which neither record's CPU has",
            False,
        )
    reduced = [CPU_REDUCED[mode] for mode in here]
    return f"oneDNN may run CPU float32 {ops} in " + " or ".join(reduced), True


def _cpu_can(record: ReproRecord, mode: str) -> Optional[bool]:
    """Whether the record's CPU runs oneDNN in `mode` ("bf16", "tf32"); None: not recorded."""
    return record.cpu.bf16 if mode == "bf16" else record.cpu.tf32


def _seeds(a: ReproRecord, b: ReproRecord, found: list, notes: list) -> None:
    sa, sb = a.seeding, b.seeding
    torch_differs = _torch_seeds_differ(sa, sb)
    torch_words = f"torch.initial_seed() {sa.torch_initial_seed} → {sb.torch_initial_seed}"
    if sa.seed != sb.seed:
        why = "every random draw differs (initial weights, dropout, shuffling)"
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
        found.append(Difference("seed", _text(sa.seed), _text(sb.seed), why, SEEDS))
    elif torch_differs:
        why = (
            "torch's generator was seeded with another seed (torch.manual_seed, Lightning's "
            "seed_everything, accelerate's set_seed...; an unseeded process starts from a "
            "random one): torch's random draws differ"
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
    if sa.every_cell != sb.every_cell:
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
        found.append(Difference(f"torch {name}", _text(was), _text(now), why, rank, changes))


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
            found.append(Difference(label, was or "none", now or "none", why, rank))
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
        if was != now:
            changes, why = ENV_EFFECTS.get(name, (True, "read by a library at start"))
            if changes and name in CUDA_ENV and a.without_cuda() and b.without_cuda():
                changes, why = False, f"{NO_CUDA} ({why})"
            elif changes and name in CPU_ISA_ENV and _same_capability(a, b):
                changes = False
                why = f"no effect here: torch's CPU kernels used {a.cpu.capability} in both ({why})"
            found.append(Difference(name, _text(was), _text(now), why, ENVIRONMENT, changes))


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
    _precision,
    _seeds,
    _backends,
    _flags,
    _versions,
    _ranks,
    _env,
)
