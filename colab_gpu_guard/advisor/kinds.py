"""The kinds of CUDA error the advisor recognises, and their titles."""

from __future__ import annotations

OUT_OF_MEMORY = "out_of_memory"
MEMORY_IN_DISGUISE = "memory_in_disguise"
CUDA_DRIVER_OOM = "cuda_driver_oom"
STICKY_ERROR = "sticky_error"
STICKY_ERROR_ELSEWHERE = "sticky_error_elsewhere"
LATE_KERNEL_ERROR = "late_kernel_error"
DEVICE_MISMATCH = "device_mismatch"
GENERATOR_DEVICE = "generator_device"
INVALID_DEVICE = "invalid_device"
DEVICE_BUSY = "device_busy"
FORKED_CUDA = "forked_cuda"
CUBLAS_DETERMINISM = "cublas_determinism"
NONDETERMINISTIC_OP = "nondeterministic_op"
DRIVER_MISMATCH = "driver_mismatch"
DRIVER_VERSIONS = "driver_versions_differ"
LIBRARY_SETUP = "library_setup"
GPU_TOO_OLD = "gpu_too_old"
NCCL_ERROR = "nccl_error"
STREAM_CAPTURE = "stream_capture"
LAUNCH_RESOURCES = "launch_out_of_resources"
ATTENTION_KERNELS = "no_attention_kernel"
NO_GPU = "no_gpu"

KINDS = (
    OUT_OF_MEMORY,
    MEMORY_IN_DISGUISE,
    CUDA_DRIVER_OOM,
    STICKY_ERROR,
    STICKY_ERROR_ELSEWHERE,
    LATE_KERNEL_ERROR,
    DEVICE_MISMATCH,
    GENERATOR_DEVICE,
    INVALID_DEVICE,
    DEVICE_BUSY,
    FORKED_CUDA,
    CUBLAS_DETERMINISM,
    NONDETERMINISTIC_OP,
    DRIVER_MISMATCH,
    DRIVER_VERSIONS,
    LIBRARY_SETUP,
    GPU_TOO_OLD,
    NCCL_ERROR,
    STREAM_CAPTURE,
    LAUNCH_RESOURCES,
    ATTENTION_KERNELS,
    NO_GPU,
)

# Kinds after which the failed cell's frames are released (they may hold device memory).
MEMORY_KINDS = (OUT_OF_MEMORY, MEMORY_IN_DISGUISE, CUDA_DRIVER_OOM)

TITLES = {
    OUT_OF_MEMORY: "GPU out of memory",
    MEMORY_IN_DISGUISE: "a CUDA library failed, most likely for lack of GPU memory",
    CUDA_DRIVER_OOM: "the CUDA driver is out of memory",
    STICKY_ERROR: "the CUDA context is broken - restart required",
    STICKY_ERROR_ELSEWHERE: "a CUDA error from another process or library - PyTorch's CUDA "
    "in this kernel is not affected",
    LATE_KERNEL_ERROR: "a GPU kernel failed - often an earlier error reported late",
    DEVICE_MISMATCH: "tensors on different devices",
    GENERATOR_DEVICE: "a random generator on another device than its draws",
    INVALID_DEVICE: "a GPU number this runtime does not have",
    DEVICE_BUSY: "the GPU is busy or unavailable",
    FORKED_CUDA: "CUDA used in a forked subprocess",
    CUBLAS_DETERMINISM: "cuBLAS determinism needs CUBLAS_WORKSPACE_CONFIG",
    NONDETERMINISTIC_OP: "operation without a deterministic implementation",
    DRIVER_MISMATCH: "NVIDIA driver / CUDA build mismatch",
    DRIVER_VERSIONS: "the NVIDIA driver running and its CUDA library differ in version",
    LIBRARY_SETUP: "a CUDA library the framework needs is missing or the wrong version",
    GPU_TOO_OLD: "this GPU is too old for the feature used",
    NCCL_ERROR: "NCCL (communication between GPUs or processes) failed",
    STREAM_CAPTURE: "an operation that cannot be recorded in a CUDA graph",
    LAUNCH_RESOURCES: "a GPU kernel asked for more than this GPU gives one launch",
    ATTENTION_KERNELS: "scaled_dot_product_attention had no kernel it may use",
    NO_GPU: "no usable GPU in this runtime",
}
