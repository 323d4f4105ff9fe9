"""The prose of each diagnosis: the summary, the facts the message states, and the fixes,
built from the details parsed out of the message (see recognise.py)."""

from __future__ import annotations

from typing import Any, Callable, NamedTuple, Optional

from ..units import format_bytes
from .kinds import (
    CUBLAS_DETERMINISM,
    CUDA_DRIVER_OOM,
    DRIVER_MISMATCH,
    FORKED_CUDA,
    NO_GPU,
    NONDETERMINISTIC_OP,
    OUT_OF_MEMORY,
    STICKY_ERROR,
    STICKY_ERROR_ELSEWHERE,
)

RESTART_SESSION = "Colab: Runtime > Restart session; Jupyter: Kernel > Restart"
RESET_FIX = (
    "Run `%gpu_reset` to release what the notebook still holds (output history, the last "
    "traceback, cached GPU memory no tensor is using), then rerun."
)
# added where the advice lists the biggest leftovers (`enrich`)
DEL_LEFTOVERS = " `del` the big leftovers listed above that you no longer need."


class Advice(NamedTuple):
    """What one kind of error means and what to do, before anything is learned from this
    process; `classify` turns it into a Diagnosis."""

    kind: str
    summary: str
    facts: dict[str, str]
    fixes: list[str]
    restart_required: bool = False


def _oom(details: dict[str, Any]) -> Advice:
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
    others = details.get("other_processes") or []
    among = details.get("this_process_among") or []
    if "process_bytes" in details:
        label = "the failing process uses" if details.get("child") else "this process uses"
        facts[label] = format_bytes(details["process_bytes"]) + _matched_by_memory(details)
    if "allocated_bytes" in details:
        facts["held by live tensors"] = format_bytes(details["allocated_bytes"])
    unallocated = details.get("reserved_unallocated_bytes")
    if unallocated is not None:
        facts["cached, unused"] = format_bytes(unallocated)
    if others:
        listed = ", ".join(f"pid {pid} ({format_bytes(size)})" for pid, size in others)
        if among:
            facts["GPU processes"] = f"{listed}; one of them is this process"
        else:
            facts["other processes"] = listed
    if requested is not None and free is not None:
        summary = (
            f"The allocation asked for {format_bytes(requested)} but only {format_bytes(free)} "
            f"was free on {where}."
        )
    elif requested is not None:
        summary = f"An allocation of {format_bytes(requested)} did not fit in GPU memory."
    else:
        summary = "An allocation did not fit in GPU memory."
    fixes = [
        RESET_FIX,
        "Make the step smaller: a smaller batch size (keep the effective batch with gradient "
        "accumulation), shorter sequences, or bf16/fp16 via `torch.autocast`; use "
        "`torch.no_grad()` for evaluation.",
    ]
    if unallocated is not None and total and unallocated > max(total * 0.1, requested or 0):
        fixes.append(
            "Much memory is cached but unusable (fragmentation): restart the runtime and put "
            "`%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` in the first cell, "
            "before CUDA starts (the allocator reads it once)."
        )
    if among:
        fixes.append(
            "Several processes hold memory on this GPU and one of them is this one (NVML "
            "reports host PIDs here, so the message cannot say which): stop the others "
            "(another notebook's kernel, a previous run) - see the process list."
        )
    elif others:
        fixes.append(
            "Other processes hold memory on this GPU: stop them (another notebook's kernel, "
            "a previous run) - see the process list."
        )
    return Advice(OUT_OF_MEMORY, summary, facts, fixes)


def _matched_by_memory(details: dict[str, Any]) -> str:
    """Why a 'Process N' of the message is this process (see recognise._listed_processes)."""
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


def _culprits(error: str) -> str:
    if error == "device-side assert triggered":
        return (
            "Usual culprit: a class label outside [0, num_classes) for `CrossEntropyLoss` / "
            "`nll_loss` (compare `labels.min()`, `labels.max()` with the number of logits; "
            "-1 or 1-based labels are common), or an index >= `num_embeddings` in "
            "`nn.Embedding` (token ids vs vocabulary size); BCE targets outside [0, 1] also "
            "assert. Running the same step on CPU gives a readable error."
        )
    if "ECC" in error:
        return (
            "An uncorrectable ECC error is a fault of the GPU's memory, not of your code: "
            "get a new runtime (Colab: Runtime > Disconnect and delete runtime) or another "
            "GPU; if it comes back on the same GPU, report it to whoever runs the machine."
        )
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
    summary = (
        f"CUDA reported '{error}'. After this error the CUDA context of this process is "
        "unusable: every later CUDA call fails, and nothing but restarting the runtime helps."
    )
    fixes = [
        f"Restart the runtime ({RESTART_SESSION}). CPU-side results can still be saved to "
        "disk first; GPU tensors cannot be read any more.",
        "To find the line that really failed, make the first cell "
        "`%env CUDA_LAUNCH_BLOCKING=1` (it must be set before CUDA initialises) and rerun: "
        "kernel errors are otherwise reported later, at an unrelated line.",
        _culprits(error),
    ]
    return Advice(STICKY_ERROR, summary, {"CUDA error": error}, fixes, restart_required=True)


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


def _driver(details: dict[str, Any]) -> Advice:
    if details.get("problem") == "no kernel image":
        summary = (
            "This PyTorch build contains no GPU code for this GPU's architecture (compute "
            "capability), so no kernel can run on it."
        )
        fixes = [
            "Install a torch build whose architecture list includes this GPU (new GPUs need "
            "a recent torch built for a recent CUDA; very old GPUs were dropped from recent "
            "wheels): pick the matching `--index-url https://download.pytorch.org/whl/cuXXX` "
            "from pytorch.org, then restart the runtime.",
            "On Colab, use the preinstalled torch: a `pip install torch==...` that replaced it "
            "is the usual cause.",
        ]
    else:
        summary = (
            "The NVIDIA driver is older than the CUDA runtime this PyTorch was built with, "
            "so CUDA cannot start."
        )
        fixes = [
            "Install a torch build for a CUDA version the driver supports ('driver supports "
            "CUDA' above where NVML or the message says it; else `!nvidia-smi`, 'CUDA "
            "Version' at the top right) from pytorch.org (`--index-url "
            "https://download.pytorch.org/whl/cuXXX`), then restart the runtime.",
            "Or update the NVIDIA driver (not possible on Colab: there, use the preinstalled "
            "torch; a `pip install` that pulled a build for a newer CUDA is the usual cause).",
        ]
    facts = {}
    if "driver_cuda_from_message" in details:
        facts["driver supports CUDA"] = details["driver_cuda_from_message"]
    return Advice(DRIVER_MISMATCH, summary, facts, fixes)


def _driver_oom(details: dict[str, Any]) -> Advice:
    summary = (
        "The CUDA driver itself ran out of memory (not PyTorch's allocator): typically while "
        "creating the CUDA context because another process - often a previous run of this "
        "notebook in another kernel, or a second notebook - already holds the GPU."
    )
    fixes = [
        "Stop the other process: Jupyter: shut down other kernels (Running tab, or Kernel > "
        "Shut Down All Kernels); Colab: Runtime > Manage sessions; a process you own: "
        "`kill PID`.",
        "If none is listed here, a process NVML cannot list (one in another container) may "
        "hold the memory: `!nvidia-smi` shows how much is used.",
        "If this process holds the memory, run `%gpu_reset`.",
    ]
    return Advice(CUDA_DRIVER_OOM, summary, {}, fixes)


def _no_gpu(details: dict[str, Any]) -> Advice:
    summary = "This runtime has no GPU that this framework can use."
    fixes = [
        "Colab: Runtime > Change runtime type > a GPU, then rerun from the top.",
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
    OUT_OF_MEMORY: _oom,
    STICKY_ERROR: _sticky,
    STICKY_ERROR_ELSEWHERE: _sticky,
    FORKED_CUDA: _forked,
    CUBLAS_DETERMINISM: _cublas,
    NONDETERMINISTIC_OP: _nondet,
    DRIVER_MISMATCH: _driver,
    CUDA_DRIVER_OOM: _driver_oom,
    NO_GPU: _no_gpu,
}
