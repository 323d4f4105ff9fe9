"""The prose of each diagnosis: the summary, the facts the message states, and the fixes,
built from the details parsed out of the message (see recognise.py). The kernel errors,
forked CUDA, determinism, the driver and no GPU are written here; the memory errors in
memory_fixes.py, setup and hardware in setup_fixes.py; BUILDERS maps every kind to its
writer."""

from __future__ import annotations

from typing import Any, Callable, Optional

from . import memory_fixes, setup_fixes
from .advice import INDEX_CULPRITS, LAUNCH_BLOCKING_FIX, NEW_RUNTIME, RESTART_SESSION, Advice
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
    STICKY_ERROR_ELSEWHERE,
    STREAM_CAPTURE,
)


def _culprits(error: str) -> str:
    if error == "device-side assert triggered":
        return INDEX_CULPRITS
    if "launch timed out" in error:
        return (
            "A kernel ran longer than the watchdog allows (a GPU that also drives a display, "
            "or one huge kernel): split the work into smaller steps, or use a GPU without a "
            "display."
        )
    return (
        "Usual culprits: an out-of-range index, tensors on different devices passed to a "
        "custom CUDA op or extension, or a bug in a custom kernel. Running the same step on "
        "CPU (or with CUDA_LAUNCH_BLOCKING=1) shows where."
    )


def _sticky(details: dict[str, Any]) -> Advice:
    error = details.get("cuda_error", "a CUDA error")
    if details.get("origin") is not None:
        return _sticky_elsewhere(error, details)
    if "ECC" in error:
        return _ecc(error)
    summary = (
        f"CUDA reported '{error}'. After this error the CUDA context of this process is "
        "unusable: every later CUDA call fails, and nothing but restarting the runtime helps."
    )
    fixes = [
        f"Restart the runtime ({RESTART_SESSION}). CPU-side results can still be saved to "
        "disk first; GPU tensors cannot be read any more.",
        LAUNCH_BLOCKING_FIX,
        _culprits(error),
    ]
    return Advice(STICKY_ERROR, summary, {"CUDA error": error}, fixes, restart_required=True)


def _ecc(error: str) -> Advice:
    """An uncorrectable ECC error is a fault of the GPU's memory: restarting the session
    keeps the same GPU, so the fix is another machine."""
    summary = (
        f"CUDA reported '{error}': the GPU's own memory failed, not your code. The CUDA "
        "context of this process is unusable from now on."
    )
    return Advice(
        STICKY_ERROR, summary, {"CUDA error": error}, list(_ECC_FIXES), restart_required=True
    )


_ECC_FIXES = (
    f"Get a new runtime on another GPU ({NEW_RUNTIME}): restarting the session keeps the "
    "same faulty GPU. CPU-side results can be saved to disk first.",
    "If it comes back on a new machine, or on your own GPU, report it to whoever runs the "
    "machine (`!nvidia-smi -q -d ECC` shows the error counts).",
)


def _late_kernel(details: dict[str, Any]) -> Advice:
    error = details.get("library_error", "a cuBLAS or cuDNN error")
    summary = (
        f"A cuBLAS/cuDNN call failed while running on the GPU ({error}). Usually an earlier "
        "kernel failed (say an index out of range) and its error shows up here, at a later "
        "call; then the CUDA context is broken, as after a device-side assert. Less often, "
        "this build has no working kernels for this GPU."
    )
    fixes = [
        f"Restart the runtime ({RESTART_SESSION}): after a kernel error every later CUDA "
        "call fails.",
        LAUNCH_BLOCKING_FIX,
        INDEX_CULPRITS,
        "If it fails at the very first matrix multiply or convolution, even with tiny "
        "inputs: compare this GPU's capability with the architectures this torch was built "
        "for (facts above) and install a torch build for this GPU.",
    ]
    return Advice(LATE_KERNEL_ERROR, summary, {"error": error}, fixes)


def _sticky_elsewhere(error: str, details: dict[str, Any]) -> Advice:
    """A sticky error that is not this kernel's: raised in a child process (origin
    'child'), or seen while this kernel's PyTorch never started CUDA ('not started here')."""
    facts = {"CUDA error": error}
    if details["origin"] == "child":
        child = details.get("child", "a child process")
        facts["raised in"] = child
        summary = (
            f"{child[0].upper()}{child[1:]} hit '{error}', and the error was raised again "
            "here. The CUDA context of that process is unusable from now on (it ends with "
            "that process); this kernel's own CUDA context is separate and is not affected: "
            "it is broken only if a CUDA call in this kernel fails."
        )
        first = (
            "No restart is needed for this kernel: fix the cause and launch the processes "
            "again (each new process gets a new CUDA context). A pool whose worker hit it "
            "(`multiprocessing.Pool`, `ProcessPoolExecutor`) must be closed and made again. "
            "The child's own traceback is in the error text above."
        )
    else:
        summary = (
            f"The error says '{error}', but PyTorch has not started CUDA in this kernel, so "
            "no CUDA context of PyTorch's here is broken: the message came from another "
            "process (a subprocess, a worker, a launcher) and was raised again here, or from "
            "a CUDA library in this kernel other than PyTorch (a C extension)."
        )
        first = (
            "If the traceback above shows another process failing, no restart is needed for "
            "this kernel: fix the cause there. If a call in this kernel raised it through a "
            "CUDA library, that library's CUDA context is unusable: restart the runtime "
            f"({RESTART_SESSION})."
        )
    if "ECC" in error:  # a fault of the GPU itself, whichever process met it
        return Advice(STICKY_ERROR_ELSEWHERE, summary, facts, list(_ECC_FIXES))
    fixes = [
        first,
        "To see the line that really failed, run `os.environ['CUDA_LAUNCH_BLOCKING'] = '1'` "
        "in this kernel before launching: child processes inherit the environment and read "
        "it when their CUDA starts (this kernel's CUDA, if already started, is unchanged).",
        _culprits(error),
    ]
    return Advice(STICKY_ERROR_ELSEWHERE, summary, facts, fixes)


def _forked(details: dict[str, Any]) -> Advice:
    summary = (
        "A subprocess created with fork (DataLoader workers, multiprocessing.Pool) tried to "
        "use CUDA after CUDA was initialised in the notebook process; a forked child cannot "
        "use the parent's CUDA state."
    )
    fixes = [
        "In a notebook the simplest fix is `DataLoader(..., num_workers=0)`.",
        "Keep CUDA out of worker code: move `.to('cuda')` / `.cuda()` from "
        "`Dataset.__getitem__` and `collate_fn` into the training loop (use "
        "`pin_memory=True` for fast copies); forked workers may run CPU code freely.",
        "Or use the spawn start method: `DataLoader(..., multiprocessing_context='spawn')` "
        "or `multiprocessing.get_context('spawn')`. With spawn, the Dataset class and worker "
        "functions must live in an importable .py file, not in a notebook cell.",
    ]
    return Advice(FORKED_CUDA, summary, {}, fixes)


def _cublas(details: dict[str, Any]) -> Advice:
    # torch < 2.10 reads the variable once, at the process's first cuBLAS matmul, into a
    # function-local static (ATen Context::alertCuBLASConfigNotDeterministic); warn_only is
    # read at every call.
    summary = (
        "Deterministic mode is on and torch refused a cuBLAS matmul: torch releases before "
        "2.10 require CUBLAS_WORKSPACE_CONFIG to be :4096:8 or :16:8 at the first cuBLAS "
        "matmul of the process. torch read it then and keeps that value, so setting it now "
        "does not help."
    )
    fixes = [
        f"Restart the runtime ({RESTART_SESSION}) and run `%load_ext colab_gpu_guard` then "
        "`%seed_all SEED --deterministic` before any CUDA matmul (the first cell is "
        "simplest): it sets CUBLAS_WORKSPACE_CONFIG=:4096:8 before torch reads it.",
        "Or, without restarting, `%seed_all SEED --warn-only`: ops that cannot be "
        "deterministic, this one included, warn instead of raising.",
        "torch 2.10 and later no longer check the variable (pytorch/pytorch#161749; the facts "
        "above say whether this torch still does): upgrading torch also removes this error.",
    ]
    return Advice(CUBLAS_DETERMINISM, summary, {}, fixes)


# Deterministic alternatives, keyed by the operation name in the error (a prefix match).
# Each states only what torch's own documentation says (torch.use_deterministic_algorithms).
DETERMINISTIC_ALTERNATIVES: dict[str, str] = {
    "index_add_cuda": "current PyTorch uses a deterministic `torch.index_add` on CUDA (via "
    "`index_put_(..., accumulate=True)`): upgrade torch, or write "
    "`out.index_put_((index,), src, accumulate=True)` for the 1-D case",
    "scatter_add_cuda": "current PyTorch documents `Tensor.scatter_add_` on CUDA as "
    "deterministic in deterministic mode: upgrade torch; for 1-D data "
    "`out.index_put_((index,), src, accumulate=True)` is deterministic",
    "scatter_reduce": "`scatter_reduce` with reduce='sum' or 'mean' is deterministic in "
    "current PyTorch ('prod' is not): upgrade torch, or use 'sum'/'mean'",
    "cumsum_cuda": "compute that cumulative sum on CPU (`x.cpu().cumsum(dim).to(x.device)`), "
    "which is deterministic",
    "histc_cuda": "compute the histogram on CPU (`torch.histc(x.cpu(), ...)`)",
    "bincount": "with weights, `torch.zeros(n, device=x.device).index_put_((x,), w, "
    "accumulate=True)` gives the same counts deterministically",
    "_bincount_cuda": "with weights, `torch.zeros(n, device=x.device).index_put_((x,), w, "
    "accumulate=True)` gives the same counts deterministically",
    "adaptive_avg_pool2d_backward": "for global pooling (output size 1x1) use "
    "`x.mean(dim=(-2, -1), keepdim=True)`, whose backward is deterministic",
    "adaptive_avg_pool3d_backward": "for global pooling use "
    "`x.mean(dim=(-3, -2, -1), keepdim=True)`, whose backward is deterministic",
    "reflection_pad": "`padding_mode='replicate'` (ReplicationPad) has a deterministic "
    "backward on CUDA",
    "upsample_": "`F.interpolate(..., mode='nearest')` is allowed in deterministic mode; the "
    "linear/bilinear/bicubic/trilinear backward on CUDA is not",
    "nll_loss2d_forward": "compute the per-pixel loss with `reduction='none'` and reduce it "
    "yourself (`.mean()`); only the built-in sum/mean reduction is nondeterministic",
    "embedding_bag_backward_cuda_max": "`EmbeddingBag(mode='sum')` or `mode='mean'` is "
    "deterministic",
}


def _nondet(details: dict[str, Any]) -> Advice:
    op = details.get("operation", "this operation")
    summary = (
        f"`{op}` has no deterministic implementation in the torch that raised this error, "
        "and deterministic algorithms were switched on there, so it refused to run."
    )
    fixes = [
        "`%seed_all SEED --warn-only` (or `torch.use_deterministic_algorithms(True, "
        "warn_only=True)`): this op then runs nondeterministically with a warning, "
        "everything else stays deterministic.",
    ]
    alternative = next(
        (text for prefix, text in DETERMINISTIC_ALTERNATIVES.items() if op.startswith(prefix)),
        None,
    )
    if alternative:
        fixes.append(f"Deterministic alternative: {alternative}.")
    fixes.append(
        "Or switch determinism off just around this call with "
        "`torch.use_deterministic_algorithms(False)` and back on after it."
    )
    return Advice(NONDETERMINISTIC_OP, summary, {"operation": op}, fixes)


# How to get a build for a CUDA version the driver supports, in each framework's words.
_BUILD_FOR_DRIVER = {
    "torch": "Install a torch build for a CUDA version the driver supports ('driver supports "
    "CUDA' above where NVML or the message says it; else `!nvidia-smi`, 'CUDA Version' at the "
    "top right) from pytorch.org (`--index-url https://download.pytorch.org/whl/cuXXX`), then "
    "restart the runtime.",
    "cupy": "Install the CuPy wheel for a CUDA version the driver supports (`!nvidia-smi`, "
    "'CUDA Version' at the top right): `pip install cupy-cuda12x` for CUDA 12, "
    "`cupy-cuda11x` for CUDA 11 (uninstall the other `cupy-cuda*` first), then restart.",
    "jax": "Install a JAX build for a CUDA version the driver supports (`pip install -U "
    '"jax[cuda12]"` needs a CUDA 12 driver; `!nvidia-smi` shows the driver\'s), then restart.',
    "tensorflow": "Install a TensorFlow build for a CUDA version the driver supports "
    "(tensorflow.org lists each version's CUDA; `!nvidia-smi` shows the driver's), then "
    "restart.",
}
_NO_KERNEL_BUILD = {
    "torch": "Install a torch build whose architecture list includes this GPU (new GPUs need "
    "a recent torch built for a recent CUDA; very old GPUs were dropped from recent wheels): "
    "pick the matching `--index-url https://download.pytorch.org/whl/cuXXX` from pytorch.org, "
    "then restart the runtime.",
    "cupy": "Install the CuPy wheel for a CUDA version that supports this GPU (a newer "
    "`cupy-cudaXXx`: new GPUs need a recent CUDA), then restart.",
}


def _driver(details: dict[str, Any]) -> Advice:
    framework = details.get("framework") or "torch"
    if details.get("problem") in ("no kernel image", "invalid kernel image"):
        summary = (
            "This build contains no GPU code for this GPU's architecture (compute "
            "capability), so no kernel can run on it."
            if details["problem"] == "no kernel image"
            else "The GPU code in this build could not be loaded on this GPU ('device "
            "kernel image is invalid'). Most often the build is older than this GPU's "
            "architecture (compute capability) and has no code made for it."
        )
        fixes = [
            _NO_KERNEL_BUILD.get(framework, _NO_KERNEL_BUILD["torch"]),
            "On Colab, use the preinstalled packages: a `pip install` that replaced them "
            "is the usual cause.",
        ]
    else:
        summary = (
            "The NVIDIA driver is older than the CUDA version this build was made for, so "
            "CUDA cannot start."
        )
        fixes = [
            _BUILD_FOR_DRIVER.get(framework, _BUILD_FOR_DRIVER["torch"]),
            "Or update the NVIDIA driver (not possible on Colab: there, use the preinstalled "
            "packages; a `pip install` that pulled a build for a newer CUDA is the usual "
            "cause).",
        ]
    facts = {}
    if "driver_cuda_from_message" in details:
        facts["driver supports CUDA"] = details["driver_cuda_from_message"]
    return Advice(DRIVER_MISMATCH, summary, facts, fixes)


# How to run on the CPU instead, in each framework's words (torch's is also its default):
# "Run on the CPU: <how>".
_ON_THE_CPU = {
    "torch": '`device = "cuda" if torch.cuda.is_available() else "cpu"`, '
    "then `model.to(device)` and `x.to(device)` in place of `.cuda()`.",
    "jax": "leave out what asks for the GPU (`jax.devices('gpu')`, "
    "`backend='gpu'`); JAX uses the CPU by itself.",
    "jax, cuda did not start": "restart, and make the first cell "
    "`%env JAX_PLATFORMS=cpu` (read when JAX starts).",
    "cupy": "CuPy needs an NVIDIA GPU; NumPy has the same functions for most "
    "of what CuPy does (`import numpy as np` where the code uses `cupy`).",
    "tensorflow": "take out what asks for the GPU (`tf.device('/GPU:0')`, a "
    "GPU from `tf.config.list_physical_devices('GPU')`).",
}
GPU_RUNTIME = "Colab: Runtime > Change runtime type > a GPU, then rerun from the top."


def _none_here(details: dict[str, Any]) -> str:
    """What NVML told of this machine where it has no GPU CUDA could use: no driver at all,
    or a driver that lists none."""
    if details.get("no_driver"):
        return "This machine has no NVIDIA GPU (no NVIDIA driver is installed)"
    return "NVML lists no NVIDIA GPU on this machine"


def _no_gpu(details: dict[str, Any]) -> Advice:
    """`gpus_here` (setup_facts, from NVML): how many NVIDIA GPUs this machine has, 0 where there
    is no driver (`no_driver`); absent where NVML cannot tell. Where it has none, running on
    the CPU (or a GPU runtime) is the fix: a CUDA build or a CUDA setting cannot help."""
    problem = details.get("problem")
    framework = details.get("framework") or "torch"
    none_here = details.get("gpus_here") == 0
    how = _ON_THE_CPU.get(f"{framework}, {problem}") or _ON_THE_CPU.get(
        framework, _ON_THE_CPU["torch"]
    )
    on_the_cpu = f"Run on the CPU: {how}"
    if problem == "checkpoint":
        summary = (
            "The checkpoint holds GPU tensors, and torch here sees no GPU: torch.load puts "
            "tensors back on the device they were saved on."
        )
        fixes = [
            "Load it onto the CPU: `torch.load(path, map_location='cpu')`.",
            "Or use a GPU runtime (Colab: Runtime > Change runtime type > a GPU).",
        ]
        return Advice(NO_GPU, summary, {}, fixes)
    if none_here:
        also = {
            "cpu build": ", and this torch is a CPU-only build",
            "cuda did not start": ", so JAX's CUDA support has no GPU to use",
        }.get(problem or "", "")
        summary = f"{_none_here(details)}{also}: this code can only run on the CPU here."
        return Advice(NO_GPU, summary, {}, [on_the_cpu, GPU_RUNTIME])
    if problem == "cpu build":
        summary = (
            "This torch is a CPU-only build: it has no CUDA support, whatever GPU the runtime has."
        )
        fixes = [
            "If this machine has an NVIDIA GPU (`!nvidia-smi` lists it; NVML could not tell "
            "here): install a CUDA build of torch (`pip install torch --index-url "
            "https://download.pytorch.org/whl/cuXXX`, cuXXX for a CUDA the driver supports), "
            "then restart the runtime.",
            "On Colab the preinstalled torch is a CUDA build: a `pip install` that replaced it "
            "with a CPU wheel is the usual cause; start a fresh runtime.",
            f"Without a GPU, run on the CPU: {how}",
        ]
        return Advice(NO_GPU, summary, {}, fixes)
    if problem == "cuda did not start":
        summary = (
            "JAX's CUDA support is installed, but CUDA could not start or found no GPU, so JAX "
            "sees none."
        )
        fixes = [
            "The log line above the traceback, `failed call to cuInit: CUDA_ERROR_...`, says "
            "why: `NO_DEVICE`: this runtime has no GPU (Colab: Runtime > Change runtime type > "
            "a GPU); `SYSTEM_NOT_READY`: on a server with NVSwitch (8x A100/H100) the "
            "`nvidia-fabricmanager` service is not running; `UNKNOWN`: as after the machine "
            "slept, `sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm` (or a reboot); another "
            "code: the driver (`!nvidia-smi` shows whether it works).",
            "To run on the CPU meanwhile: restart, and make the first cell "
            "`%env JAX_PLATFORMS=cpu` (read when JAX starts).",
        ]
        return Advice(NO_GPU, summary, {}, fixes)
    if problem == "cuda init failed":  # torch: cuInit gave CUDA_ERROR_UNKNOWN (999)
        gpus = details.get("gpus_here")
        cause = (
            "its unified-memory part (`nvidia_uvm`) is in a bad state, as after the machine "
            "slept (suspend), or a container lacks `/dev/nvidia-uvm`."
        )
        if gpus:
            seen = f"NVML sees {gpus} NVIDIA GPU{'s' * (gpus != 1)}, so the driver runs:"
        else:
            seen = "Usually the driver runs but"
        summary = (
            "CUDA could not start: the NVIDIA driver answered 'unknown error' when torch "
            f"started it, so torch sees no GPU. {seen} {cause}"
        )
        fixes = [
            f"Restart the runtime ({RESTART_SESSION}); if it fails the same way, a new machine "
            f"({NEW_RUNTIME}): the driver's state belongs to the machine.",
            "On your own Linux machine: `sudo rmmod nvidia_uvm && sudo modprobe nvidia_uvm` "
            "(or a reboot); for a container, `sudo nvidia-modprobe -c 0 -u` on the host "
            "creates `/dev/nvidia-uvm`.",
            "If this notebook changed `CUDA_VISIBLE_DEVICES` after CUDA started (the message's "
            "example), set it in the first cell instead (`%env CUDA_VISIBLE_DEVICES=0`) and "
            "restart.",
        ]
        return Advice(NO_GPU, summary, {}, fixes)
    if problem == "no gpu backend" and framework == "jax":
        summary = (
            "JAX found no GPU: the JAX installed here is a CPU-only build, or no GPU is visible."
        )
        fixes = [
            'Install JAX with CUDA support: `pip install -U "jax[cuda12]"`, then restart '
            "(the plain `jax` wheel runs on the CPU only).",
            "Colab: Runtime > Change runtime type > a GPU; check `CUDA_VISIBLE_DEVICES`.",
        ]
        return Advice(NO_GPU, summary, {}, fixes)
    summary = "This runtime has no GPU that this framework can use."
    fixes = [
        GPU_RUNTIME,
        "Check `CUDA_VISIBLE_DEVICES` (an index that does not exist hides every GPU) and that "
        "torch is a CUDA build (`torch.version.cuda` is None on CPU-only builds).",
    ]
    return Advice(NO_GPU, summary, {}, fixes)


def hides_every_gpu(visible: Optional[str], gpus: int) -> bool:
    """Whether CUDA_VISIBLE_DEVICES hides all of `gpus` GPUs: CUDA reads the list up to its
    first entry that names no GPU, so an empty value, -1 or an index past the last GPU
    first leaves none."""
    if visible is None:
        return False
    first = visible.split(",")[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return False
    return not (first.isdigit() and int(first) < gpus)


def no_gpu_cause(
    torch_version: Optional[str],
    cpu_build: bool,
    gpus: Optional[int],
    visible: Optional[str],
    driver_cuda: Optional[str],
) -> Optional[tuple[str, list[str]]]:
    """(summary, fixes) where the machine shows why torch sees no GPU although NVML sees
    some: a CPU-only torch build, or CUDA_VISIBLE_DEVICES hiding them; None otherwise (the
    runtime has no GPU: the general advice stands)."""
    if not gpus:
        return None
    seen = f"NVML sees {gpus} NVIDIA GPU{'s' * (gpus != 1)} on this machine"
    if cpu_build:
        cuda = f" ({driver_cuda} here, or older)" if driver_cuda else ""
        return (
            f"torch {torch_version} is a CPU-only build, but {seen}: this torch cannot use them.",
            [
                "Install a CUDA build of torch for a CUDA version the driver supports"
                f"{cuda}: `pip install torch --index-url "
                "https://download.pytorch.org/whl/cuXXX`, then restart the runtime.",
                "On Colab the preinstalled torch is a CUDA build: a `pip install` that "
                "replaced it with a CPU wheel is the usual cause; start a fresh runtime.",
            ],
        )
    if hides_every_gpu(visible, gpus):
        return (
            f"CUDA_VISIBLE_DEVICES={visible!r} hides every GPU, but {seen}.",
            [
                "Unset it (`del os.environ['CUDA_VISIBLE_DEVICES']`) or list GPUs that exist "
                f"(0 to {gpus - 1}), then restart the runtime: CUDA reads it once, when it "
                "starts.",
            ],
        )
    return None


BUILDERS: dict[str, Callable[[dict[str, Any]], Advice]] = {
    OUT_OF_MEMORY: memory_fixes.out_of_memory,
    MEMORY_IN_DISGUISE: memory_fixes.memory_in_disguise,
    CUDA_DRIVER_OOM: memory_fixes.driver_oom,
    STICKY_ERROR: _sticky,
    STICKY_ERROR_ELSEWHERE: _sticky,
    LATE_KERNEL_ERROR: _late_kernel,
    LAUNCH_RESOURCES: setup_fixes.launch_resources,
    ATTENTION_KERNELS: setup_fixes.attention_kernels,
    DEVICE_MISMATCH: setup_fixes.device_mismatch,
    GENERATOR_DEVICE: setup_fixes.generator_device,
    INVALID_DEVICE: setup_fixes.invalid_device,
    DEVICE_BUSY: setup_fixes.device_busy,
    FORKED_CUDA: _forked,
    CUBLAS_DETERMINISM: _cublas,
    NONDETERMINISTIC_OP: _nondet,
    DRIVER_MISMATCH: _driver,
    DRIVER_VERSIONS: setup_fixes.driver_versions,
    LIBRARY_SETUP: setup_fixes.library_setup,
    GPU_TOO_OLD: setup_fixes.gpu_too_old,
    NCCL_ERROR: setup_fixes.nccl_error,
    STREAM_CAPTURE: setup_fixes.stream_capture,
    NO_GPU: _no_gpu,
}
