"""The kinds of CUDA error the advisor recognises, and their titles."""

from __future__ import annotations

OUT_OF_MEMORY = "out_of_memory"
STICKY_ERROR = "sticky_error"
STICKY_ERROR_ELSEWHERE = "sticky_error_elsewhere"
FORKED_CUDA = "forked_cuda"
CUBLAS_DETERMINISM = "cublas_determinism"
NONDETERMINISTIC_OP = "nondeterministic_op"
DRIVER_MISMATCH = "driver_mismatch"
CUDA_DRIVER_OOM = "cuda_driver_oom"
NO_GPU = "no_gpu"

KINDS = (
    OUT_OF_MEMORY,
    STICKY_ERROR,
    STICKY_ERROR_ELSEWHERE,
    FORKED_CUDA,
    CUBLAS_DETERMINISM,
    NONDETERMINISTIC_OP,
    DRIVER_MISMATCH,
    CUDA_DRIVER_OOM,
    NO_GPU,
)

# Kinds after which the failed cell's frames are released (they may hold device memory).
MEMORY_KINDS = (OUT_OF_MEMORY, CUDA_DRIVER_OOM)

TITLES = {
    OUT_OF_MEMORY: "GPU out of memory",
    STICKY_ERROR: "the CUDA context is broken - restart required",
    STICKY_ERROR_ELSEWHERE: "a CUDA error from another process or library - PyTorch's CUDA "
    "in this kernel is not affected",
    FORKED_CUDA: "CUDA used in a forked subprocess",
    CUBLAS_DETERMINISM: "cuBLAS determinism needs CUBLAS_WORKSPACE_CONFIG",
    NONDETERMINISTIC_OP: "operation without a deterministic implementation",
    DRIVER_MISMATCH: "NVIDIA driver / PyTorch build mismatch",
    CUDA_DRIVER_OOM: "the CUDA driver is out of memory (another process may hold the GPU)",
    NO_GPU: "no usable GPU in this runtime",
}
