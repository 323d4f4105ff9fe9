"""Recognising a CUDA error from its type and message, across torch, CuPy, JAX/XLA and
TensorFlow: the kind of error one exception is, whose framework it is, and the details its
message states (the figures of an out-of-memory message: oom_figures.py). Pure text work:
no CUDA, NVML or framework call."""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional

from ..units import cuda_version_text
from . import device_messages
from .kinds import (
    ATTENTION_KERNELS,
    CUBLAS_DETERMINISM,
    CUDA_DRIVER_OOM,
    DEVICE_BUSY,
    DEVICE_MISMATCH,
    DRIVER_MISMATCH,
    DRIVER_VERSIONS,
    FORKED_CUDA,
    GENERATOR_DEVICE,
    GPU_TOO_OLD,
    INVALID_DEVICE,
    LATE_KERNEL_ERROR,
    LAUNCH_RESOURCES,
    LIBRARY_SETUP,
    MEMORY_IN_DISGUISE,
    NCCL_ERROR,
    NO_GPU,
    NONDETERMINISTIC_OP,
    OUT_OF_MEMORY,
    STICKY_ERROR,
    STREAM_CAPTURE,
)
from .oom_figures import parse_oom_message

# ---------------------------------------------------------------- recognising the classes

# CUDA errors after which the context cannot be used again (cudaGetErrorString texts and the
# enum names CuPy, JAX and the driver API print).
STICKY_ERRORS = {
    "device-side assert triggered": ("cudaErrorAssert", "CUDA_ERROR_ASSERT"),
    "an illegal memory access was encountered": (
        "cudaErrorIllegalAddress",
        "CUDA_ERROR_ILLEGAL_ADDRESS",
    ),
    "unspecified launch failure": ("cudaErrorLaunchFailure", "CUDA_ERROR_LAUNCH_FAILED"),
    "an illegal instruction was encountered": (
        "cudaErrorIllegalInstruction",
        "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    ),
    "misaligned address": ("cudaErrorMisalignedAddress", "CUDA_ERROR_MISALIGNED_ADDRESS"),
    "the launch timed out and was terminated": (
        "cudaErrorLaunchTimeout",
        "CUDA_ERROR_LAUNCH_TIMEOUT",
    ),
    "hardware stack error": ("cudaErrorHardwareStackError", "CUDA_ERROR_HARDWARE_STACK_ERROR"),
    "invalid program counter": ("cudaErrorInvalidPc", "CUDA_ERROR_INVALID_PC"),
    "uncorrectable ECC error encountered": (
        "cudaErrorECCUncorrectable",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
    ),
}

_FORKED = re.compile(r"Cannot re-initialize CUDA in forked subprocess", re.IGNORECASE)
_CUBLAS = re.compile(r"not deterministic because it uses CuBLAS|CUBLAS_WORKSPACE_CONFIG=:")
_NONDET = re.compile(r"(?P<op>[\w.:<>]+) does not have a deterministic implementation")
_DRIVER_OLD = re.compile(r"NVIDIA driver on your system is too old \(found version (\d+)\)")
_DRIVER_INSUFFICIENT = re.compile(
    r"driver version is insufficient for CUDA runtime version|"
    r"cudaErrorInsufficientDriver|CUDA_ERROR_INSUFFICIENT_DRIVER",
    re.IGNORECASE,
)
# CUDA error 803, cudaErrorSystemDriverMismatch: "a mismatch between the versions of the
# display driver and the CUDA driver" (the kernel module and libcuda)
_DRIVER_VERSIONS = re.compile(
    r"unsupported display driver / cuda driver combination|"
    r"cudaErrorSystemDriverMismatch|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
    re.IGNORECASE,
)
_NO_KERNEL = re.compile(
    r"no kernel image is available for execution on the device|"
    r"cudaErrorNoKernelImageForDevice|CUDA_ERROR_NO_BINARY_FOR_GPU",
    re.IGNORECASE,
)
# CUDA error 200 (cudaErrorInvalidKernelImage, CUDA_ERROR_INVALID_IMAGE) and 300
# (CUDA_ERROR_INVALID_SOURCE) share this text: GPU code the driver could not load, most
# often a build from before this GPU's architecture (cupy/cupy#8045)
_INVALID_IMAGE = re.compile(
    r"device kernel image is invalid|cudaErrorInvalidKernelImage|CUDA_ERROR_INVALID_IMAGE",
    re.IGNORECASE,
)
# CUDA error 701: a kernel launched with more threads per block than its registers allow
# on this GPU, or with too many arguments (the CUDA runtime's own description)
_LAUNCH_RESOURCES = re.compile(
    r"too many resources requested for launch|cudaErrorLaunchOutOfResources|"
    r"CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
    re.IGNORECASE,
)
# scaled_dot_product_attention left without a kernel (torch's sdp_utils.cpp select_sdp_backend):
# the math kernel switched off and each fused kernel refusing the inputs, after a warning
# per kernel saying why; "No viable backend" where every kernel allowed is switched off or
# has no kernel on this device (attention.cpp, _fused_sdp_choice_cpp: the CPU has no
# memory-efficient or cuDNN kernel)
_NO_ATTENTION_KERNEL = re.compile(r"No available kernel\.\s+Aborting execution")
_NO_ATTENTION_BACKEND = re.compile(r"No viable backend for scaled_dot_product_attention")
_DRIVER_OOM = re.compile(
    r"CUDA error: out of memory|cudaErrorMemoryAllocation|CUDA_ERROR_OUT_OF_MEMORY|"
    r"cuda runtime error \(2\) : out of memory",
    re.IGNORECASE,
)
_ALLOCATOR_OOM = re.compile(
    r"CUDA out of memory|out of memory to allocate|Out of memory allocating|"
    r"Out of memory while trying to allocate|Failed to allocate request for|"
    r"OOM when allocating tensor|RESOURCE_EXHAUSTED",
    re.IGNORECASE,
)
_NO_GPU = re.compile(
    r"No CUDA GPUs are available|Torch not compiled with CUDA enabled|"
    r"Found no NVIDIA driver on your system|CUDA driver initialization failed|"
    r"CUDA unknown error - this may be due to an incorrectly set up environment|"
    r"cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE|"
    r"Unknown backend: '(gpu|cuda)' requested|No visible GPU devices|"
    r"Attempting to deserialize object on a CUDA device but torch\.cuda\.is_available\(\)",
    re.IGNORECASE,
)
# Out of memory that is not GPU memory: the host's (torch's CPU allocator, TensorFlow on
# /device:CPU), or a TPU's (XLA:TPU, "memory space hbm" on TPU). No GPU advice for these.
_NOT_GPU_MEMORY = re.compile(
    r"DefaultCPUAllocator|device:CPU:\d+ by allocator cpu|by allocator cpu\b|"
    r"XLA:TPU|\bTPU\b.*\bmemory space hbm|memory space hbm.*\bTPU\b",
    re.IGNORECASE | re.DOTALL,
)

# A cuBLAS or cuDNN call failing while running: usually an earlier kernel error surfacing late.
_LATE_KERNEL = re.compile(
    r"CUBLAS_STATUS_EXECUTION_FAILED|CUDNN_STATUS_EXECUTION_FAILED|CUDNN_STATUS_MAPPING_ERROR"
)
# Errors that are usually the GPU being full, raised by a library instead of an allocator;
# `also` names the other cause the message cannot rule out ("kernel": an earlier kernel
# error; "install": a cuDNN install or version problem); then the library whose copy
# (torch's own or another) may be at fault, where one is (`cuda_libraries`).
_IN_DISGUISE: tuple[tuple[re.Pattern, str, Optional[str], Optional[str]], ...] = (
    (re.compile(r"CUBLAS_STATUS_ALLOC_FAILED"), "CUBLAS_STATUS_ALLOC_FAILED", None, "cuBLAS"),
    (
        re.compile(r"NVML_SUCCESS == .{0,80}INTERNAL ASSERT FAILED at \S*CUDACachingAllocator"),
        "an NVML assert in PyTorch's allocator",
        None,
        None,
    ),
    (
        re.compile(r"CUBLAS_STATUS_NOT_INITIALIZED"),
        "CUBLAS_STATUS_NOT_INITIALIZED",
        "kernel",
        "cuBLAS",
    ),
    (
        re.compile(r"CUDNN_STATUS_NOT_INITIALIZED"),
        "CUDNN_STATUS_NOT_INITIALIZED",
        "install",
        "cuDNN",
    ),
    (
        re.compile(
            r"Unable to find a valid cuDNN algorithm to run convolution|"
            r"no valid convolution algorithms available in CuDNN"
        ),
        "no valid cuDNN algorithm",
        "install",
        "cuDNN",
    ),
    (
        re.compile(r"Failed to get convolution algorithm\. This is probably because cuDNN failed"),
        "cuDNN failed to initialize",
        "install",
        "cuDNN",
    ),
    (
        re.compile(r"CUDNN_STATUS_INTERNAL_ERROR"),
        "CUDNN_STATUS_INTERNAL_ERROR",
        "benchmark",
        "cuDNN",
    ),
    # torch's cuDNN v8 convolutions (aten/src/ATen/native/cudnn/Conv_v8.cpp): "GET" (or
    # "FIND" under cudnn.benchmark) once every engine failed; an out-of-memory error while
    # trying one is caught and the next tried, so a full GPU ends here, and so does a
    # convolution in a data type this GPU's cuDNN has no engine for
    (
        re.compile(r"unable to find an engine to execute this computation", re.IGNORECASE),
        "no cuDNN engine",
        "engine",
        "cuDNN",
    ),
    (  # torch 1.x (THC) for CUBLAS_STATUS_ALLOC_FAILED
        re.compile(r"cublas runtime error : resource allocation failed"),
        "cuBLAS: resource allocation failed",
        "kernel",
        "cuBLAS",
    ),
)
# torch's cuBLAS call refused (its shapes were checked before): a cuBLAS other than the
# one this torch was built with, as the threads found (huggingface/transformers#21663)
_CUBLAS_INVALID = re.compile(r"CUBLAS_STATUS_INVALID_VALUE when calling `cublas")
_LIBRARY_SETUP = re.compile(
    r"DNN library is not found|DNN library initialization failed|"
    r"Found cuDNN version \d+, but JAX was built against|Outdated cuDNN installation|"
    r"Unable to load cuDNN|Loaded runtime CuDNN library: [\d.]+ but source was compiled with|"
    r"Could not load (dynamic )?library '?libcudnn",
    re.IGNORECASE,
)

_INVALID_ORDINAL = re.compile(
    r"invalid device ordinal|cudaErrorInvalidDevice\b|CUDA_ERROR_INVALID_DEVICE\b",
    re.IGNORECASE,
)
_DESERIALIZE = re.compile(
    r"Attempting to deserialize object on CUDA device (?P<index>\d+) but "
    r"torch\.cuda\.device_count\(\) is (?P<count>\d+)"
)
_BUSY = re.compile(
    r"CUDA-capable devices?(\(s\))? (is/are |are |is )?busy or unavailable|"
    r"cudaErrorDevicesUnavailable|CUDA_ERROR_DEVICE_UNAVAILABLE",
    re.IGNORECASE,
)
_NCCL = re.compile(
    r"NCCL error|NCCL Error \d|nccl(?:Unhandled|System|Internal|InvalidUsage|Remote)\w*Error"
    r"|ncclUnhandledCudaError",
)
_NCCL_WHY = re.compile(
    r"(unhandled system error|unhandled cuda error|internal error|"
    r"invalid usage|remote process exited or there was a network error)",
    re.IGNORECASE,
)
_CAPTURE = re.compile(
    r"operation not permitted when stream is capturing|cudaErrorStreamCapture\w+|"
    r"operation failed due to a previous error during capture|"
    r"capturing stream has unjoined work|operation would make the legacy stream depend on a "
    r"capturing blocking stream",
    re.IGNORECASE,
)
# Features a GPU can be too old for: (pattern, feature, the compute capability it needs).
_TOO_OLD: tuple[tuple[re.Pattern, str, str], ...] = (
    (
        re.compile(
            r"Bfloat16 is only supported on GPUs with compute capability of at least 8\.0\. "
            r"Your (?P<gpu>.+?) GPU has compute capability (?P<cap>\d+\.\d+)"
        ),
        "bfloat16",
        "8.0",
    ),
    # torch.autocast(dtype=torch.bfloat16) where torch.cuda.is_bf16_supported() is False
    (re.compile(r"Current CUDA Device does not support bfloat16"), "bfloat16", "8.0"),
    # cuBLAS refusing a bfloat16 (CUDA_R_16BF) matrix multiply on an older GPU
    (re.compile(r"CUBLAS_STATUS_NOT_SUPPORTED\b.*\bCUDA_R_16BF\b", re.DOTALL), "bfloat16", "8.0"),
    (re.compile(r"FlashAttention only supports Ampere GPUs or newer"), "FlashAttention", "8.0"),
    (
        re.compile(
            r"Found (?P<gpu>.+?) which is too old to be supported by the triton GPU compiler"
            r"(?:.*?your device is of CUDA capability (?P<cap>\d+\.\d+))?",
            re.DOTALL,
        ),
        "Triton (torch.compile)",
        "7.0",
    ),
)
_FRAMEWORK_MODULES = {
    "torch": "torch",
    "cupy": "cupy",
    "cupy_backends": "cupy",
    "jax": "jax",
    "jaxlib": "jax",
    "tensorflow": "tensorflow",
    "keras": "tensorflow",
}
# Frameworks whose OutOfMemoryError types are device-memory errors (numpy's MemoryError and
# Python's are host memory and are left alone).
_OOM_MODULES = ("torch", "cupy", "cupy_backends", "jax", "jaxlib", "tensorflow")


def _message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:  # a user's exception class: a broken __str__
        try:
            text = " ".join(str(arg) for arg in exc.args)
        except Exception:  # a user's exception class: odd args
            text = ""
    return text


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in ("builtins", "") else f"{module}.{name}"


def first_line(exc: BaseException) -> str:
    message = _message(exc).strip().splitlines()
    head = message[0] if message else ""
    name = type(exc).__name__
    return f"{name}: {head}" if head else name


def _is_device_oom_type(exc: BaseException) -> bool:
    cls = type(exc)
    module = (getattr(cls, "__module__", "") or "").split(".")[0]
    return any(
        klass.__name__ == "OutOfMemoryError" and module in _OOM_MODULES for klass in cls.__mro__
    )


# Exceptions that carry another process's error into this one: torch.multiprocessing.spawn
# (mp.spawn, start_processes: "-- Process N terminated with the following error:" and the
# child's traceback), torchelastic's ChildFailedError (torchrun, accelerate's
# notebook_launcher: "Root Cause (first observed failure):"), and the traceback text that
# multiprocessing.Pool (RemoteTraceback) and ProcessPoolExecutor (_RemoteTraceback) attach
# as the __cause__ of the child's exception, re-raised here; DataLoader re-raises a worker's
# error as "Caught X in DataLoader worker process N" (torch/_utils.py ExceptionWrapper).
_CHILD_TYPES = ("ProcessRaisedException", "ChildFailedError", "RemoteTraceback", "_RemoteTraceback")
_SPAWN_CHILD = re.compile(
    r"-- Process (?P<spawned>\d+) terminated with the following error:|"
    r"Caught \w+ in DataLoader worker process (?P<worker>\d+)"
)
_ELASTIC_CHILD = re.compile(r"Root Cause \(first observed failure\):")


def child_process(exc: BaseException) -> Optional[str]:
    """'process 1 (pid 4242)', 'DataLoader worker process 0' or 'a child process' when
    `exc` carries the error of another process; None otherwise. From the type and message
    only."""
    name = type(exc).__name__
    message = _message(exc)
    match = _SPAWN_CHILD.search(message)
    if name in _CHILD_TYPES or match or _ELASTIC_CHILD.search(message):
        index = getattr(exc, "error_index", None)
        pid = getattr(exc, "error_pid", None)
        if isinstance(index, int) and isinstance(pid, int):
            return f"process {index} (pid {pid})"
        if match and match.group("worker") is not None:
            return f"DataLoader worker process {match.group('worker')}"
        if match:
            return f"process {match.group('spawned')}"
        return "a child process"
    return None


class Recognised(NamedTuple):
    """The kind of one exception and the details its message states."""

    kind: str
    details: dict[str, Any]


def framework(exc: BaseException, message: str) -> Optional[str]:
    """'torch', 'cupy', 'jax' or 'tensorflow': whose error this is, from the exception's
    module, else from wording only that framework uses; None when neither tells."""
    module = (getattr(type(exc), "__module__", "") or "").split(".")[0]
    if module in _FRAMEWORK_MODULES:
        return _FRAMEWORK_MODULES[module]
    if re.search(
        r"\b(XLA|XlaRuntimeError|JAX|jaxlib|JAX_PLATFORMS)\b|Platforms present are:|"
        r"^Unable to initialize backend '|"
        r"^(RESOURCE_EXHAUSTED|INTERNAL|"
        r"FAILED_PRECONDITION|UNKNOWN):",
        message,
    ):
        return "jax"
    if re.search(
        r"OOM when allocating tensor|/job:localhost|by allocator GPU_\d+_bfc|"
        r"Failed to get convolution algorithm|\[\[\{\{node ",
        message,
    ):
        return "tensorflow"
    if re.search(
        r"allocated so far:|^(cuda|cudnn|cublas|cusolver|curand|cufft)\w+Error|"
        r"^(cudaError|CUDA_ERROR_)\w+:",
        message,
    ):
        return "cupy"
    if re.search(
        r"PyTorch|torch\.|CUDA out of memory|^CUDA error: |TORCH_USE_CUDA_DSA|"
        r"CUDA_LAUNCH_BLOCKING",
        message,
    ):
        return "torch"
    return None


def recognise(exc: BaseException) -> Optional[Recognised]:
    """The kind and details of one exception, from its type and message only."""
    message = _message(exc)
    if not message and not _is_device_oom_type(exc):
        return None
    details: dict[str, Any] = {"message": message, "type": _type_name(exc)}
    found = _kind(exc, message, details)
    if found is not None:
        which = framework(exc, message)
        if which is not None:
            details["framework"] = which
    return found


def _kind(exc: BaseException, message: str, details: dict[str, Any]) -> Optional[Recognised]:
    if _FORKED.search(message):
        return Recognised(FORKED_CUDA, details)
    if _CUBLAS.search(message):
        return Recognised(CUBLAS_DETERMINISM, details)
    match = _NONDET.search(message)
    if match and "deterministic" in message:
        details["operation"] = match.group("op")
        return Recognised(NONDETERMINISTIC_OP, details)
    if _NOT_GPU_MEMORY.search(message):
        return None  # host or TPU memory: not a GPU error
    lowered = message.lower()
    for text, names in STICKY_ERRORS.items():
        if text.lower() in lowered or any(name in message for name in names):
            details["cuda_error"] = text
            return Recognised(STICKY_ERROR, details)
    match = _LATE_KERNEL.search(message)
    if match:
        details["library_error"] = match.group(0)
        return Recognised(LATE_KERNEL_ERROR, details)
    for pattern, name, also, library in _IN_DISGUISE:
        if pattern.search(message):
            details["library_error"] = name
            if also is not None:
                details["also"] = also
            if library is not None:
                details["library"] = library
            return Recognised(MEMORY_IN_DISGUISE, details)
    found = _driver_problem(message, details)
    if found is not None:
        return found
    if _LIBRARY_SETUP.search(message):
        return Recognised(LIBRARY_SETUP, details)
    if _CUBLAS_INVALID.search(message):
        details.update(library_error="CUBLAS_STATUS_INVALID_VALUE", library="cuBLAS")
        return Recognised(LIBRARY_SETUP, details)
    if device_messages.device_mismatch(message, details):
        return Recognised(DEVICE_MISMATCH, details)
    if device_messages.generator_devices(message, details):
        return Recognised(GENERATOR_DEVICE, details)
    match = _DESERIALIZE.search(message)
    if match:
        details["device_index"] = int(match.group("index"))
        details["device_count"] = int(match.group("count"))
        details["problem"] = "checkpoint"
        return Recognised(INVALID_DEVICE, details)
    if _INVALID_ORDINAL.search(message):
        return Recognised(INVALID_DEVICE, details)
    if _BUSY.search(message):
        return Recognised(DEVICE_BUSY, details)
    if _NCCL.search(message):
        why = _NCCL_WHY.search(message)
        if why:
            details["nccl_error"] = why.group(1).lower()
        return Recognised(NCCL_ERROR, details)
    if _CAPTURE.search(message):
        return Recognised(STREAM_CAPTURE, details)
    if _LAUNCH_RESOURCES.search(message):
        return Recognised(LAUNCH_RESOURCES, details)
    if _NO_ATTENTION_KERNEL.search(message):
        return Recognised(ATTENTION_KERNELS, details)
    if _NO_ATTENTION_BACKEND.search(message):
        details["problem"] = "none allowed here"
        return Recognised(ATTENTION_KERNELS, details)
    for pattern, feature, needs in _TOO_OLD:
        match = pattern.search(message)
        if match:
            details.update(feature=feature, needs_capability=needs)
            named = match.groupdict()
            if named.get("gpu"):
                details["gpu"] = named["gpu"]
            if named.get("cap"):
                details["capability"] = named["cap"]
            return Recognised(GPU_TOO_OLD, details)
    if _DRIVER_OOM.search(message) and "tried to allocate" not in lowered:
        return Recognised(CUDA_DRIVER_OOM, details)
    if _is_device_oom_type(exc) or _ALLOCATOR_OOM.search(message):
        if "RESOURCE_EXHAUSTED" in message and not re.search(
            r"memory|allocat", message, re.IGNORECASE
        ):
            return None  # XLA also uses RESOURCE_EXHAUSTED for non-memory limits
        details.update(parse_oom_message(message))
        return Recognised(OUT_OF_MEMORY, details)
    if _NO_GPU.search(message):
        if "not compiled with CUDA" in message:
            details["problem"] = "cpu build"
        elif "CUDA unknown error" in message:  # c10/cuda/CUDAFunctions.cpp, cudaErrorUnknown
            details["problem"] = "cuda init failed"
        elif "deserialize" in message:
            details["problem"] = "checkpoint"
        elif "No visible GPU devices" in message:
            details["problem"] = "cuda did not start"  # JAX's CUDA plugin, after cuInit
        elif "backend" in message:
            details["problem"] = "no gpu backend"
        return Recognised(NO_GPU, details)
    return None


def _driver_problem(message: str, details: dict[str, Any]) -> Optional[Recognised]:
    match = _DRIVER_OLD.search(message)
    if match:
        details["driver_cuda_from_message"] = cuda_version_text(int(match.group(1)))
        details["problem"] = "driver too old"
        return Recognised(DRIVER_MISMATCH, details)
    if _DRIVER_INSUFFICIENT.search(message):
        details["problem"] = "driver too old"
        return Recognised(DRIVER_MISMATCH, details)
    if _NO_KERNEL.search(message):
        details["problem"] = "no kernel image"
        return Recognised(DRIVER_MISMATCH, details)
    if _INVALID_IMAGE.search(message):
        details["problem"] = "invalid kernel image"
        return Recognised(DRIVER_MISMATCH, details)
    if _DRIVER_VERSIONS.search(message):
        return Recognised(DRIVER_VERSIONS, details)
    return None
