"""What each setting a reproducibility record holds does to results: which variables and
torch switches change numbers, where (CPU, CUDA), and by how much; and `Difference`, one
field that differs with what it means. The diff (repro_diff.py, repro_precision.py) reads
these to judge each difference on the two machines."""

from __future__ import annotations

from dataclasses import dataclass

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

# environment variables only a framework reads, and which (the record's framework names):
# they change nothing where neither run had it imported
FRAMEWORK_ENV = {
    "TF_DETERMINISTIC_OPS": ("TensorFlow",),
    "TF_CUDNN_DETERMINISTIC": ("TensorFlow",),
    "TF_ENABLE_ONEDNN_OPTS": ("TensorFlow",),
    "XLA_FLAGS": ("JAX", "TensorFlow"),
    "XLA_PYTHON_CLIENT_PREALLOCATE": ("JAX",),
    "CUPY_SEED": ("CuPy",),
}

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
    # torch's CPU attention has a flash kernel and the math one, chosen by the same
    # switches (ATen's sdp_utils_cpp.cpp): flash off changes CPU results too
    "torch.backends.cuda.flash_sdp_enabled()": (
        False,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (flash attention on or off, "
        "on the GPU and on the CPU)",
    ),
    "torch.backends.cuda.mem_efficient_sdp_enabled()": (
        True,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (memory-efficient attention)",
    ),
    "torch.backends.cuda.math_sdp_enabled()": (
        False,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (the math fallback, on the GPU "
        "and on the CPU)",
    ),
    "torch.backends.cuda.cudnn_sdp_enabled()": (
        True,
        FLAGS,
        "scaled_dot_product_attention may run another kernel (cuDNN attention)",
    ),
    "torch.backends.cuda.fp16_bf16_reduction_math_sdp_allowed()": (
        False,
        PRECISION,
        "the math attention kernel (GPU and CPU) may reduce fp16/bf16 in that precision",
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
    "torch.get_default_dtype()": (
        False,
        PRECISION,
        "new float tensors (torch.tensor of floats, torch.randn, a new layer's weights) are "
        "made in another dtype: every result differs",
    ),
    # measured: a TransformerEncoderLayer in inference on the CPU moved by 5e-7
    "torch.backends.mha.get_fastpath_enabled()": (
        False,
        FLAGS,
        "nn.MultiheadAttention and Transformer layers in inference run their fused fast path "
        "or the plain one (CPU and GPU): results differ in the last bits",
    ),
    "torch.backends.cuda.preferred_linalg_library()": (
        True,
        FLAGS,
        "torch.linalg on the GPU runs in another library (cuSOLVER or MAGMA): other kernels",
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
    # measured on an AMD EPYC with AVX512-BF16 (no AMX): a 1024x1024 float32 matmul at
    # 'medium' differed from 'highest' by 8e-7 of its largest value (float32 rounding is
    # 3e-7 there); the same matmul in plain bf16 differs by 3e-3
    "bf16": "bf16 on CPUs with AVX-512 (BW, VL, DQ) or AVX-NE-CONVERT: results change, "
    "from the last float32 digits (as on a CPU with AVX512-BF16) up to bf16 rounding "
    "(~3e-3 relative)",
    "tf32": "TF32 on CPUs with AMX-FP16: expect relative differences around 1e-3",
}
# The same, in a PyTorch user's words, for the default line.
CPU_MODE_WORDS = {"bf16": "bfloat16", "tf32": "TF32"}
CPU_EFFECT = {
    "bf16": "results change, up to bfloat16 rounding (~3e-3 relative)",
    "tf32": TF32_EFFECT,
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
    detail: str = ""  # how it works, for -v: the library, the CPU feature, the settings

    def __str__(self) -> str:
        return self.text()

    def text(self, verbose: bool = False) -> str:
        line = f"{self.what} {self.before} → {self.after}: {self.explanation}"
        return line + (f" ({self.detail})" if verbose and self.detail else "")


def value_text(value: object) -> str:
    return "unset" if value is None else str(value)
