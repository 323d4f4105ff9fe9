"""The prose of the memory errors: an allocator out of memory (each framework its own fix),
a CUDA library failing for lack of memory (out of memory in disguise), and the CUDA driver
out of memory. Built from the details parsed out of the message (recognise.py,
oom_figures.py)."""

from __future__ import annotations

from typing import Any

from ..units import format_bytes
from .advice import RESET_FIX, RESTART_SESSION, Advice
from .kinds import CUDA_DRIVER_OOM, MEMORY_IN_DISGUISE, OUT_OF_MEMORY

# What `%gpu_reset` frees, and how to make a step smaller, in each framework's words.
RESET_FIXES = {
    "torch": RESET_FIX,
    "cupy": "Run `%gpu_reset` to release what the notebook still holds (output history, the "
    "last traceback) and the memory CuPy keeps cached for reuse (alone: "
    "`cupy.get_default_memory_pool().free_all_blocks()`), then rerun.",
    "jax": "Run `%gpu_reset` to drop the arrays the notebook still holds (output history, the "
    "last traceback): JAX reuses that memory for new arrays (`!nvidia-smi` keeps showing what "
    "JAX took when it started).",
    "tensorflow": "Run `%gpu_reset` to drop the tensors the notebook still holds (output "
    "history, the last traceback): TensorFlow reuses that memory (`!nvidia-smi` keeps showing "
    "what it took).",
}
SMALLER_STEP = {
    "torch": "Make the step smaller: a smaller batch size (keep the effective batch with "
    "gradient accumulation), shorter sequences, or bf16/fp16 via `torch.autocast`; use "
    "`torch.no_grad()` for evaluation.",
    "cupy": "Work on smaller pieces: process the arrays in chunks, use float32 instead of "
    "float64, and `del` intermediate arrays you no longer need.",
    "jax": "Make the step smaller: a smaller batch, shorter sequences, or bfloat16/float16 "
    "arrays; `jax.checkpoint` recomputes activations instead of keeping them.",
    "tensorflow": "Make the step smaller: a smaller `batch_size`, a smaller model or input "
    "size; `tf.keras.mixed_precision.set_global_policy('mixed_float16')` halves most "
    "activations.",
}
# How a framework's own share of the GPU is set, where another framework or process may
# hold the rest (JAX: docs.jax.dev "GPU memory allocation"; TensorFlow: "Limiting GPU
# memory growth").
SHARE_FIXES = {
    "jax": "JAX takes 75% of the GPU's memory when it starts. Restart and make the first cell "
    "`%env XLA_PYTHON_CLIENT_MEM_FRACTION=.90` to give it more, or, when torch, TensorFlow "
    "or another process needs this GPU too, `%env XLA_PYTHON_CLIENT_PREALLOCATE=false` so "
    "JAX takes memory only as it needs it (both are read when JAX starts).",
    "tensorflow": "TensorFlow takes nearly all GPU memory when it starts. If torch, JAX or "
    "another process shares this GPU, restart and, before TensorFlow uses the GPU, call "
    "`tf.config.experimental.set_memory_growth(gpu, True)` for each `gpu` in "
    "`tf.config.list_physical_devices('GPU')`.",
}


def _framework(details: dict[str, Any]) -> str:
    """The framework whose words the fixes use; torch's where the message does not say
    (the wordings recognised without a framework are torch's)."""
    return details.get("framework") or "torch"


def oom_facts(details: dict[str, Any]) -> dict[str, str]:
    """The figures an out-of-memory message states, labelled for the user."""
    facts: dict[str, str] = {}
    where = f"GPU {details['device']}" if "device" in details else "the device"
    requested = details.get("requested_bytes")
    free = details.get("free_bytes")
    total = details.get("total_bytes")
    if requested is not None:
        facts["requested"] = format_bytes(requested)
    if free is not None:
        facts[f"free on {where}"] = format_bytes(free) + (
            f" of {format_bytes(total)}" if total is not None else ""
        )
    elif total is not None:
        facts[f"{where} capacity"] = format_bytes(total)
    if "allowed_bytes" in details:
        facts["allowed for this process"] = format_bytes(details["allowed_bytes"])
    others = details.get("other_processes") or []
    among = details.get("this_process_among") or []
    if "process_bytes" in details:
        label = "the failing process uses" if details.get("child") else "this process uses"
        facts[label] = format_bytes(details["process_bytes"]) + _matched_by_memory(details)
    if "allocated_bytes" in details:
        label = (
            "allocated by CuPy so far"
            if details.get("framework") == "cupy"
            else "held by live tensors"
        )
        facts[label] = format_bytes(details["allocated_bytes"])
    unallocated = details.get("reserved_unallocated_bytes")
    if unallocated is not None:
        facts["cached, unused"] = format_bytes(unallocated)
    if others:
        listed = ", ".join(f"pid {pid} ({format_bytes(size)})" for pid, size in others)
        if among:
            facts["GPU processes"] = f"{listed}; one of them is this process"
        else:
            facts["other processes"] = listed
    return facts


def _matched_by_memory(details: dict[str, Any]) -> str:
    """Why a 'Process N' of the message is this process (see oom_figures._listed_processes)."""
    if details.get("process_matched_by") != "memory":
        return ""
    which = (
        "the only listed process whose memory covers"
        if details.get("other_processes")
        else "the only process listed; its memory covers"
    )
    return (
        f" (listed as process {details['process_pid']}, {which} the "
        f"{format_bytes(details['pytorch_bytes'])} PyTorch holds; inside a container NVML "
        "reports host PIDs)"
    )


def _oom_summary(details: dict[str, Any]) -> str:
    where = f"GPU {details['device']}" if "device" in details else "the device"
    requested = details.get("requested_bytes")
    free = details.get("free_bytes")
    total = details.get("total_bytes")
    if requested is None:
        return "An allocation did not fit in GPU memory."
    asked = format_bytes(requested)
    if total is not None and requested > total:
        return (
            f"One allocation asked for {asked}, more than the whole GPU has "
            f"({format_bytes(total)}): no cleanup can make it fit."
        )
    allowed = details.get("allowed_bytes")
    if allowed is not None and (free is None or free >= requested):
        return (
            f"The allocation asked for {asked}, and this process may use at most "
            f"{format_bytes(allowed)} of the GPU (`torch.cuda.set_per_process_memory_fraction`)"
            ": that limit, not the GPU, is most likely what it ran into."
        )
    if free is not None and free >= requested:
        # The figure is read after the failure (cudaMemGetInfo, once PyTorch has given its
        # cached memory back): enough free in total, but not as one piece, or not then.
        return (
            f"The allocation asked for {asked}; the message reports {format_bytes(free)} free "
            f"on {where}, which is more. Free GPU memory can be split into pieces too small "
            f"for one {asked} allocation (fragmentation), or another process can take memory "
            "at the same moment: `!nvidia-smi` while it runs shows which."
        )
    if free is not None:
        return (
            f"The allocation asked for {asked} but only {format_bytes(free)} was free on {where}."
        )
    return f"An allocation of {asked} did not fit in GPU memory."


def out_of_memory(details: dict[str, Any]) -> Advice:
    facts = oom_facts(details)
    framework = _framework(details)
    requested = details.get("requested_bytes")
    total = details.get("total_bytes")
    if requested is not None and total is not None and requested > total:
        fixes = [
            "Make the input or the model smaller, or split the work: one "
            f"{format_bytes(requested)} array cannot fit in {format_bytes(total)}. "
            "Check the shape that asked for it: a "
            "broadcast by mistake (an (N, 1) array against an (N,) one gives (N, N)) or a "
            "whole dataset moved to the GPU at once are common causes.",
            SMALLER_STEP[framework],
        ]
        return Advice(OUT_OF_MEMORY, _oom_summary(details), facts, fixes)
    fixes = [RESET_FIXES[framework], SMALLER_STEP[framework]]
    if "allowed_bytes" in details:
        fixes.insert(
            0,
            "Raise this process's limit, `torch.cuda.set_per_process_memory_fraction(f)` "
            "with a larger f (1.0: the whole GPU), if nothing else needs the rest.",
        )
    unallocated = details.get("reserved_unallocated_bytes")
    if (
        framework == "torch"
        and unallocated is not None
        and total
        and unallocated > max(total * 0.1, requested or 0)
    ):
        fixes.append(
            "Much memory is cached but unusable (fragmentation): restart the runtime and put "
            "`%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` in the first cell, "
            "before CUDA starts (the allocator reads it once)."
        )
    if framework in SHARE_FIXES:
        fixes.append(SHARE_FIXES[framework])
    fixes += _process_fixes(details)
    return Advice(OUT_OF_MEMORY, _oom_summary(details), facts, fixes)


def _process_fixes(details: dict[str, Any]) -> list[str]:
    if details.get("this_process_among"):
        return [
            "Several processes hold memory on this GPU and one of them is this one (NVML "
            "reports host PIDs here, so the message cannot say which): stop the others "
            "(another notebook's kernel, a previous run) - see the process list."
        ]
    if details.get("other_processes"):
        return [
            "Other processes hold memory on this GPU: stop them (another notebook's kernel, "
            "a previous run) - see the process list."
        ]
    return []


# What each library's failure says, and the cause the message cannot rule out.
_DISGUISED = {
    "CUBLAS_STATUS_ALLOC_FAILED": "cuBLAS (matrix multiplies) could not get the GPU memory it "
    "needs: the GPU is full.",
    "an NVML assert in PyTorch's allocator": "PyTorch's allocator ran out of GPU memory, and "
    "writing the usual out-of-memory message failed: that message asks NVML for the GPU's "
    "processes, and the NVML call failed (MIG slices and containers often refuse it; "
    "pytorch/pytorch#112377).",
    "CUBLAS_STATUS_NOT_INITIALIZED": "cuBLAS (matrix multiplies) could not start. Usually the "
    "GPU is full, so it could not get memory for itself.",
    "CUDNN_STATUS_NOT_INITIALIZED": "cuDNN (convolutions, RNNs) could not start. Usually the "
    "GPU is full, so it could not get memory for itself.",
    "no valid cuDNN algorithm": "cuDNN found no convolution algorithm it could run. Usually "
    "none fits in the GPU memory left.",
    "cuDNN failed to initialize": "cuDNN could not start. Usually the GPU memory is already "
    "taken (TensorFlow takes nearly all of it when it starts, so a second process or "
    "framework finds none).",
    "CUDNN_STATUS_INTERNAL_ERROR": "cuDNN failed inside a convolution or RNN. Most often it "
    "could not get the working memory it needed: the same step with a smaller batch runs.",
    "cuBLAS: resource allocation failed": "cuBLAS (matrix multiplies) could not get the "
    "resources it needs: usually GPU memory, the GPU is full.",
    "no cuDNN engine": "cuDNN tried each way it has to run this convolution and none ran. "
    "Usually none could get the working memory it needs (PyTorch passes over the "
    "out-of-memory errors while it tries them).",
}
# bfloat16 is native from compute capability 8.0; before it (a T4 is 7.5) cuDNN may have no
# bfloat16 convolution, and `torch.cuda.is_bf16_supported()` still says True there: its
# `including_emulation=True` default only checks that a bfloat16 tensor can be made.
_BF16_OLD_GPU = (
    "bfloat16 is not native before compute capability 8.0 (a T4 is 7.5), and cuDNN may have "
    "no bfloat16 convolution there: use float16 or float32 on such a GPU "
    "(`torch.autocast('cuda', dtype=torch.float16)`; `torch.cuda.is_bf16_supported()` says "
    "True on a T4, `including_emulation=False` tells)."
)
_OTHER_CAUSE = {
    "kernel": "If a small batch on a fresh runtime fails the same way, the cause is not "
    "memory but an earlier GPU error (often an index out of range, e.g. a token id >= "
    "`num_embeddings`): rerun with `%env CUDA_LAUNCH_BLOCKING=1` as the first cell to see "
    "where.",
    "benchmark": "If a small batch fails the same way: set `torch.backends.cudnn.benchmark "
    "= False` (benchmark mode tries algorithms that need more working memory; "
    "pytorch/pytorch#16831); if it still fails on a fresh runtime, the GPU itself may be "
    "faulty: try another runtime.",
    "engine": "If a small batch on a fresh runtime fails the same way, the cause is not "
    f"memory. {_BF16_OLD_GPU} Else the cuDNN loaded is not the one torch was built for.",
    "engine, old gpu": f"If this convolution runs in bfloat16: {_BF16_OLD_GPU}",
    "install": "If a small batch on a fresh runtime fails the same way, the cause is not "
    "memory but the cuDNN install: a cuDNN library other than the one the framework was "
    "built for (an older one found first, or a framework build for another CUDA).",
}


def memory_in_disguise(details: dict[str, Any]) -> Advice:
    error = details.get("library_error", "a CUDA library error")
    framework = _framework(details)
    summary = _DISGUISED.get(error, "A CUDA library could not get GPU memory.")
    fixes = [RESET_FIXES[framework], SMALLER_STEP[framework]]
    if framework in SHARE_FIXES:
        fixes.append(SHARE_FIXES[framework])
    other = details.get("also")
    capabilities = details.get("capabilities")
    if other == "engine" and capabilities:  # this machine's GPUs, read by setup_facts
        oldest = min(capabilities)
        if oldest >= (8, 0):
            other = "install"  # bfloat16 is native on every GPU here
        else:
            other = "engine, old gpu"
            which = "The GPU here is" if len(capabilities) == 1 else "A GPU here is"
            summary += (
                f" {which} of compute capability {oldest[0]}.{oldest[1]}, where a bfloat16 "
                "convolution can fail this way too."
            )
    if other in _OTHER_CAUSE:
        fixes.append(_OTHER_CAUSE[other])
    return Advice(MEMORY_IN_DISGUISE, summary, {"error": error}, fixes)


def driver_oom(details: dict[str, Any]) -> Advice:
    """'CUDA error: out of memory': the driver or a CUDA library, outside the allocator.
    enrich says which of the two cases it was where this process can tell."""
    started = details.get("cuda_started_here")
    if started is False:
        summary = (
            "CUDA could not start in this kernel: the GPU's memory is taken, most often by "
            "another process (a previous run, another notebook's kernel)."
        )
    elif started is True:
        summary = (
            "The GPU ran out of memory outside the framework's allocator: CUDA had already "
            "started here, so a CUDA library (cuBLAS, cuDNN, a custom kernel) or the driver "
            "could not get memory mid-run."
        )
    else:
        summary = (
            "The CUDA driver ran out of GPU memory, outside the framework's allocator: either "
            "while CUDA started (another process holds the GPU), or mid-run, when a CUDA "
            "library (cuBLAS, cuDNN, a custom kernel) needed memory on a full GPU."
        )
    stop_others = (
        "Stop other processes on the GPU: Jupyter: shut down other kernels (Running tab, or "
        "Kernel > Shut Down All Kernels); Colab: Runtime > Manage sessions; a process you "
        "own: `kill PID`. `!nvidia-smi` lists them and how much each uses."
    )
    mine = (
        f"If this process holds the memory, run `%gpu_reset` (or restart: {RESTART_SESSION}) "
        "and make the step smaller (a smaller batch)."
    )
    fixes = [mine, stop_others] if started else [stop_others, mine]
    return Advice(CUDA_DRIVER_OOM, summary, {}, fixes)
