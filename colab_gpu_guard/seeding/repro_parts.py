"""The parts of a reproducibility record (`repro.ReproRecord`): its seeds, torch's flags,
the CPU, the versions, each GPU and the process group, each a small frozen record; the
environment variables and torch settings it reads, and what TF32 needs of a GPU."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

SCHEMA_VERSION = 1
TF32_MIN_CAPABILITY = (8, 0)  # Ampere: the first GPUs with TF32 tensor cores
TF32_GPUS = "Ampere (A100, sm_80)"
# what TF32 costs, as PyTorch's CUDA notes measure it: a 10240x10240 float32 matmul ~7x
# faster on an A100, its relative error 0.0022 against 0.000039 in full float32
TF32_MEANS = "may use TF32 (faster, ~1e-3 relative error)"

# Environment variables that change results or which device runs, and what reads them.
REPRO_ENV = (
    "CUBLAS_WORKSPACE_CONFIG",
    "PYTHONHASHSEED",
    "CUDA_VISIBLE_DEVICES",
    "CUDA_LAUNCH_BLOCKING",
    "NVIDIA_TF32_OVERRIDE",
    "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
    "TF_DETERMINISTIC_OPS",
    "TF_CUDNN_DETERMINISTIC",
    "TF_ENABLE_ONEDNN_OPTS",
    "XLA_FLAGS",
    "XLA_PYTHON_CLIENT_PREALLOCATE",
    "FLASH_ATTENTION_DETERMINISTIC",
    "CUPY_SEED",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "DNNL_MAX_CPU_ISA",
    "CUBLASLT_WORKSPACE_SIZE",
)
Pairs = tuple[tuple[str, Optional[str]], ...]
RECORD_FORM = (
    "a record is the JSON that %repro --save FILE or `python -m colab_gpu_guard repro --json` "
    "writes"
)


@dataclass(frozen=True)
class Seeding:
    """The seeds in force: the last seed_all seed and the per-cell base seed (None: off),
    and the seeds torch's generators hold, however they were seeded (seed_all,
    torch.manual_seed, Lightning's seed_everything; a new process starts from a random one)."""

    seed: Optional[int] = None
    every_cell: Optional[int] = None
    torch_initial_seed: Optional[int] = None  # torch.initial_seed(): the CPU generator's
    # each CUDA device's generator (devices with a CUDA context only: reading another
    # would create one), e.g. (("cuda:0", 42),)
    cuda_initial_seeds: tuple[tuple[str, int], ...] = ()
    # this process's own str hash seed, fixed when it started (PYTHONHASHSEED set later
    # reaches only new processes): "random", the seed's digits, or None where unknown (not
    # readable, or a record from before it was kept)
    kernel_hash_seed: Optional[str] = None


@dataclass(frozen=True)
class TorchFlags:
    """torch's determinism and float32 precision settings (None: torch not imported)."""

    deterministic_algorithms: Optional[bool] = None
    deterministic_warn_only: Optional[bool] = None
    cudnn_deterministic: Optional[bool] = None
    cudnn_benchmark: Optional[bool] = None
    matmul_allow_tf32: Optional[bool] = None  # torch.backends.cuda.matmul.allow_tf32
    cudnn_allow_tf32: Optional[bool] = None  # torch.backends.cudnn.allow_tf32
    float32_matmul_precision: Optional[str] = None  # highest / high / medium
    # the fp32_precision settings of torch >= 2.9 this torch has, by attribute path
    fp32_precision: Pairs = ()
    # torch.get_num_threads(): the threads CPU ops split their work over (the machine's
    # cores unless set), which decides the order a CPU sum or matmul adds in
    cpu_threads: Optional[int] = None
    # the other torch settings that change numbers (see BACKEND_SETTINGS), by name: "True",
    # "False" or a backend's name; absent where this torch has no such setting
    backends: Pairs = ()


# torch settings beyond determinism and fp32 precision that change numbers, by the name a
# user sets them with (what each does is judged in repro_diff: BACKEND_EFFECTS), and
# torch's default for each (a fresh process; tests check them against torch), to show only
# what was changed
BACKEND_DEFAULTS = {
    "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction": "True",
    "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction": "True",
    "torch.backends.cuda.matmul.allow_fp16_accumulation": "False",
    "torch.backends.cuda.flash_sdp_enabled()": "True",
    "torch.backends.cuda.mem_efficient_sdp_enabled()": "True",
    "torch.backends.cuda.math_sdp_enabled()": "True",
    "torch.backends.cuda.cudnn_sdp_enabled()": "True",
    "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()": "False",
    "torch.backends.cuda.preferred_blas_library()": "Cublas",
    "torch.backends.cudnn.enabled": "True",
    "torch.backends.mkldnn.enabled": "True",
    "torch.backends.mkldnn.deterministic": "False",
    "torch.utils.deterministic.fill_uninitialized_memory": "True",
    "torch.get_default_dtype()": "torch.float32",
    "torch.backends.mha.get_fastpath_enabled()": "True",
    "torch.backends.cuda.preferred_linalg_library()": "Default",
}
BACKEND_SETTINGS = tuple(BACKEND_DEFAULTS)


@dataclass(frozen=True)
class Cpu:
    """The CPU, as far as it decides CPU results: torch's CPU kernels are compiled for
    several instruction sets and dispatch to the best this CPU has (or ATEN_CPU_CAPABILITY
    allows); oneDNN runs float32 matmuls in bf16 or TF32 only where the CPU has them."""

    model: Optional[str] = None
    capability: Optional[str] = None  # torch.backends.cpu.get_cpu_capability(): "AVX512"
    bf16: Optional[bool] = None  # torch.ops.mkldnn._is_mkldnn_bf16_supported()
    tf32: Optional[bool] = None  # torch.cpu._is_amx_fp16_supported(): oneDNN's TF32
    cores: Optional[int] = None  # os.cpu_count()


@dataclass(frozen=True)
class Versions:
    python: str
    numpy: Optional[str] = None
    torch: Optional[str] = None
    cuda_runtime: Optional[str] = None  # the CUDA torch was built with
    cudnn: Optional[str] = None
    driver: Optional[str] = None
    cuda_driver: Optional[str] = None  # the newest CUDA the driver supports
    # installed, imported or not: torch.compile's kernels come from Triton; torchvision's
    # ops and transforms (its v2 transforms draw from torch's RNG)
    triton: Optional[str] = None
    torchvision: Optional[str] = None


@dataclass(frozen=True)
class Gpu:
    """One GPU as NVML (or torch, for a device with a context) names it."""

    index: int
    name: Optional[str] = None
    compute_capability: Optional[str] = None  # "8.0"
    memory_total: Optional[int] = None  # bytes
    source: str = "nvml"
    lost: bool = False  # NVML: the GPU is lost (fallen off the bus or inaccessible)
    unknown: Optional[str] = None  # why NVML gave no name or compute capability

    def words(self, numbered: bool = True) -> str:
        """'Tesla T4 (sm_75)'; a lost GPU or one NVML could not read, said so (as 'GPU 1
        lost...', or 'lost...' where the line numbers the GPU already)."""
        number = f"GPU {self.index} " if numbered else ""
        if self.lost:
            return f"{number}lost (NVML cannot reach it)"
        if self.name is None:
            why = f": {self.unknown}" if self.unknown else ""
            return f"{number}(NVML gave no name{why})"
        return f"{self.name} (sm_{_sm(self.compute_capability)})"

    def same_model(self, other: Gpu) -> bool:
        return (self.name, self.compute_capability, self.lost) == (
            other.name,
            other.compute_capability,
            other.lost,
        )


@dataclass(frozen=True)
class Distributed:
    world_size: int = 1
    rank: int = 0
    local_rank: Optional[int] = None
    source: str = "single process"  # "torch.distributed (backend)", "environment"


def supports_tf32(capability: Optional[str]) -> bool:
    try:
        major, minor = (int(part) for part in (capability or "").split("."))
    except ValueError:
        return False
    return (major, minor) >= TF32_MIN_CAPABILITY


def _sm(capability: Optional[str]) -> str:
    return (capability or "?").replace(".", "")


def gpu_summary(gpus: tuple[Gpu, ...]) -> str:
    return ", ".join(g.words() for g in gpus)
