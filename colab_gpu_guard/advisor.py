"""CUDA error advisor: name the real cause of a CUDA error and the fix.

``classify(exc)`` reads an exception (its type and message, walking ``__cause__`` and
``__context__``) and returns a :class:`Diagnosis` built from the message alone, or ``None``
for anything that is not a recognised CUDA error. ``advise(exc)`` adds what can be learned
safely from this process (leftover tensors by name, NVML's list of GPU processes, driver and
build versions), marks the CUDA context broken after a sticky error, and can release the
failed call's traceback frames after an out-of-memory error. Both work outside notebooks.

:class:`ShellAdvisor` is the IPython side: a custom exception handler that shows the normal
traceback unchanged and then the diagnosis. It imports nothing from IPython; the one display
call it makes in a notebook imports ``IPython.display`` when it is needed.

Rules kept here:
- nothing in this module raises into the caller: an advisor failure must never hide the
  user's traceback;
- no CUDA call is made after a sticky error (the context is gone and calls may hang); NVML is
  used instead where a device fact is needed;
- torch, numpy and IPython are never imported at module level.
"""

from __future__ import annotations

import contextlib
import gc
import html
import inspect
import os
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from . import cuda_health, notebook_refs, nvml
from .frameworks import torch as torch_support
from .seeding import determinism
from .units import cuda_version_text, format_bytes

# ---------------------------------------------------------------- kinds

OUT_OF_MEMORY = "out_of_memory"
STICKY_ERROR = "sticky_error"
FORKED_CUDA = "forked_cuda"
CUBLAS_DETERMINISM = "cublas_determinism"
NONDETERMINISTIC_OP = "nondeterministic_op"
DRIVER_MISMATCH = "driver_mismatch"
CUDA_DRIVER_OOM = "cuda_driver_oom"
NO_GPU = "no_gpu"

KINDS = (
    OUT_OF_MEMORY,
    STICKY_ERROR,
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
    FORKED_CUDA: "CUDA used in a forked subprocess",
    CUBLAS_DETERMINISM: "cuBLAS determinism needs CUBLAS_WORKSPACE_CONFIG",
    NONDETERMINISTIC_OP: "operation without a deterministic implementation",
    DRIVER_MISMATCH: "NVIDIA driver / PyTorch build mismatch",
    CUDA_DRIVER_OOM: "the CUDA driver is out of memory (another process may hold the GPU)",
    NO_GPU: "no usable GPU in this runtime",
}

RESTART_SESSION = "Colab: Runtime > Restart session; Jupyter: Kernel > Restart"


# ---------------------------------------------------------------- the diagnosis


@dataclass
class Diagnosis:
    """What went wrong, the facts that show it, and what to do."""

    kind: str
    summary: str
    facts: dict[str, str] = field(default_factory=dict)
    fixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""  # "ExceptionType: first line of the message"
    restart_required: bool = False
    frames_released: int = 0
    details: dict[str, Any] = field(default_factory=dict)  # parsed values (bytes, pids, ...)

    @property
    def title(self) -> str:
        return TITLES.get(self.kind, self.kind)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["title"] = self.title
        return data

    def __str__(self) -> str:
        lines = [f"CUDA advisor: {self.title}", f"  {self.summary}"]
        if self.facts:
            width = min(max(len(label) for label in self.facts), 28)
            for label, value in self.facts.items():
                lines.append(f"  {label:<{width}}  {value}")
        if self.fixes:
            lines.append("What to do:")
            for number, fix in enumerate(self.fixes, 1):
                lines.append(f"  {number}. {fix}")
        for note in self.notes:
            lines.append(f"Note: {note}")
        lines.append("(%gpu_advice off turns these notes off)")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='padding:0 8px 0 0;color:#555'>{html.escape(label)}</td>"
            f"<td style='padding:0'>{_inline_code(value)}</td></tr>"
            for label, value in self.facts.items()
        )
        fixes = "".join(f"<li>{_inline_code(fix)}</li>" for fix in self.fixes)
        notes = "".join(
            f"<div style='color:#555;margin-top:4px'>{_inline_code(note)}</div>"
            for note in self.notes
        )
        colour = "#d9534f" if self.restart_required else "#f0ad4e"
        return (
            f"<div class='colab-gpu-guard-advice' style='border-left:4px solid {colour};"
            "padding:4px 10px;margin:6px 0;font-size:13px;line-height:1.4'>"
            f"<b>CUDA advisor: {html.escape(self.title)}</b>"
            f"<div>{_inline_code(self.summary)}</div>"
            + (f"<table style='margin:4px 0;font-size:12px'>{rows}</table>" if rows else "")
            + (f"<b>What to do</b><ol style='margin:2px 0'>{fixes}</ol>" if fixes else "")
            + notes
            + "<div style='color:#888;font-size:11px'>%gpu_advice off turns these notes off"
            "</div></div>"
        )


def _inline_code(text: str) -> str:
    """Escape `text` for HTML, then show `backticked` spans as code."""
    escaped = html.escape(str(text))
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


# ---------------------------------------------------------------- sizes

_UNITS = {
    "b": 1,
    "byte": 1,
    "bytes": 1,
    "kib": 2**10,
    "kb": 2**10,
    "k": 2**10,
    "mib": 2**20,
    "mb": 2**20,
    "m": 2**20,
    "gib": 2**30,
    "gb": 2**30,
    "g": 2**30,
    "tib": 2**40,
    "tb": 2**40,
}
_SIZE = r"(\d[\d,]*(?:\.\d+)?)\s*(bytes|byte|KiB|MiB|GiB|TiB|KB|MB|GB|TB|B)\b"


def parse_size(text: str) -> Optional[int]:
    """'20.00 MiB' -> 20971520, '25,600,000 bytes' -> 25600000 (binary units, as torch
    and XLA print them); None when `text` holds no size."""
    match = re.search(_SIZE, text, re.IGNORECASE)
    if not match:
        return None
    number = float(match.group(1).replace(",", ""))
    return int(round(number * _UNITS[match.group(2).lower()]))


# ---------------------------------------------------------------- message parsing


def _named_size(name: str, pattern: str, text: str) -> Optional[int]:
    """Find `pattern` (with a single {SIZE}) in text and return that size in bytes."""
    regex = pattern.replace("{SIZE}", f"(?P<{name}>{_SIZE})")
    match = re.search(regex, text, re.IGNORECASE)
    if not match:
        return None
    return parse_size(match.group(name))


def parse_oom_message(text: str) -> dict[str, Any]:
    """Figures an out-of-memory message states, in bytes, for every wording we know:
    torch 1.0 to current (including torch 2.1's 'capacty'), CuPy, JAX/XLA and TensorFlow."""
    facts: dict[str, Any] = {}

    def put(key: str, value: Any) -> None:
        if value is not None and key not in facts:
            facts[key] = value

    put("requested_bytes", _named_size("s", r"Tried to allocate {SIZE}", text))
    put("requested_bytes", _named_size("s", r"Out of memory allocating {SIZE}", text))
    put("requested_bytes", _named_size("s", r"out of memory to allocate {SIZE}", text))
    put("requested_bytes", _named_size("s", r"while trying to allocate {SIZE}", text))
    match = re.search(r"Failed to allocate request for [^(]*\((\d+)B\)", text)
    if match:
        put("requested_bytes", int(match.group(1)))
    put("requested_bytes", _named_size("s", r"Failed to allocate request for {SIZE}", text))

    # torch >= 2.1: "GPU 0 has a total capacity of X of which Y is free."
    match = re.search(r"GPU (\d+) has a total capac\w* of", text)
    if match:
        put("device", int(match.group(1)))
    put("total_bytes", _named_size("s", r"total capac\w* of {SIZE}", text))
    put("free_bytes", _named_size("s", r"of which {SIZE} is free", text))
    put("process_bytes", _named_size("s", r"this process has {SIZE} memory in use", text))
    put("allocated_bytes", _named_size("s", r"Of the allocated memory {SIZE}", text))
    put("reserved_unallocated_bytes", _named_size("s", r"and {SIZE} is reserved by PyTorch", text))
    # torch < 2.1: "(GPU 0; 6.00 GiB total capacity; 3.49 GiB already allocated; 1.04 GiB free;
    #  3.50 GiB reserved in total by PyTorch)"
    match = re.search(r"\(GPU (\d+);", text)
    if match:
        put("device", int(match.group(1)))
    put("total_bytes", _named_size("s", r"{SIZE} total capacity", text))
    put("allocated_bytes", _named_size("s", r"{SIZE} already allocated", text))
    put("free_bytes", _named_size("s", r"; {SIZE} free", text))
    put("reserved_bytes", _named_size("s", r"{SIZE} reserved in total by PyTorch", text))
    put("reserved_bytes", _named_size("s", r"{SIZE} cached\)", text))
    # CuPy: "(allocated so far: N bytes)" / "(total N bytes)"
    put("allocated_bytes", _named_size("s", r"allocated so far: {SIZE}", text))
    # JAX: "on device ordinal 0"; TensorFlow: "/device:GPU:0"
    match = re.search(r"device ordinal (\d+)", text) or re.search(r"device:GPU:(\d+)", text)
    if match:
        put("device", int(match.group(1)))

    others = [
        (int(pid), parse_size(size))
        for pid, size in re.findall(r"Process (\d+) has (\S+ \S+) memory in use", text)
    ]
    if others:
        facts["other_processes"] = others
    if "total_bytes" in facts and "reserved_bytes" in facts and "allocated_bytes" in facts:
        put("reserved_unallocated_bytes", facts["reserved_bytes"] - facts["allocated_bytes"])
    return facts


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
_NO_KERNEL = re.compile(
    r"no kernel image is available for execution on the device|"
    r"cudaErrorNoKernelImageForDevice|CUDA_ERROR_NO_BINARY_FOR_GPU",
    re.IGNORECASE,
)
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
    r"cudaErrorNoDevice|CUDA_ERROR_NO_DEVICE",
    re.IGNORECASE,
)
# Frameworks whose OutOfMemoryError types are device-memory errors (numpy's MemoryError and
# Python's are host memory and are left alone).
_OOM_MODULES = ("torch", "cupy", "cupy_backends", "jax", "jaxlib", "tensorflow")


def _message(exc: BaseException) -> str:
    try:
        text = str(exc)
    except Exception:
        try:
            text = " ".join(str(arg) for arg in exc.args)
        except Exception:
            text = ""
    return text


def _type_name(exc: BaseException) -> str:
    cls = type(exc)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", cls.__name__)
    return name if module in ("builtins", "") else f"{module}.{name}"


def _first_line(exc: BaseException) -> str:
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


def _recognise(exc: BaseException) -> Optional[tuple[str, dict[str, Any]]]:
    """(kind, details) for one exception, from its type and message only."""
    message = _message(exc)
    if not message and not _is_device_oom_type(exc):
        return None
    details: dict[str, Any] = {"message": message, "type": _type_name(exc)}
    if _FORKED.search(message):
        return FORKED_CUDA, details
    if _CUBLAS.search(message):
        return CUBLAS_DETERMINISM, details
    match = _NONDET.search(message)
    if match and "deterministic" in message:
        details["operation"] = match.group("op")
        return NONDETERMINISTIC_OP, details
    lowered = message.lower()
    for text, names in STICKY_ERRORS.items():
        if text.lower() in lowered or any(name in message for name in names):
            details["cuda_error"] = text
            return STICKY_ERROR, details
    match = _DRIVER_OLD.search(message)
    if match:
        details["driver_cuda_from_message"] = cuda_version_text(int(match.group(1)))
        details["problem"] = "driver too old"
        return DRIVER_MISMATCH, details
    if _DRIVER_INSUFFICIENT.search(message):
        details["problem"] = "driver too old"
        return DRIVER_MISMATCH, details
    if _NO_KERNEL.search(message):
        details["problem"] = "no kernel image"
        return DRIVER_MISMATCH, details
    if _DRIVER_OOM.search(message) and "tried to allocate" not in lowered:
        return CUDA_DRIVER_OOM, details
    if _is_device_oom_type(exc) or _ALLOCATOR_OOM.search(message):
        if "RESOURCE_EXHAUSTED" in message and not re.search(
            r"memory|allocat", message, re.IGNORECASE
        ):
            return None  # XLA also uses RESOURCE_EXHAUSTED for non-memory limits
        details.update(parse_oom_message(message))
        return OUT_OF_MEMORY, details
    if _NO_GPU.search(message):
        return NO_GPU, details
    return None


# ---------------------------------------------------------------- classify (pure)


def classify(exc: BaseException) -> Optional[Diagnosis]:
    """A Diagnosis from the exception's type and message alone (walking its __cause__ and
    __context__ chain), or None if it is not a recognised CUDA error. Never raises, makes
    no CUDA or NVML call."""
    try:
        for link in notebook_refs.exception_chain(exc):
            found = _recognise(link.exception)
            if found is not None:
                kind, details = found
                details["found_in"] = link.via
                return _build(kind, details, link.exception)
    except Exception:
        return None
    return None


def _build(kind: str, details: dict[str, Any], exc: BaseException) -> Diagnosis:
    builder = _BUILDERS[kind]
    diagnosis = builder(details)
    diagnosis.error = _first_line(exc)
    details.pop("message", None)
    diagnosis.details.update(details)
    return diagnosis


def _oom(details: dict[str, Any]) -> Diagnosis:
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
    if "process_bytes" in details:
        facts["this process uses"] = format_bytes(details["process_bytes"])
    if "allocated_bytes" in details:
        facts["held by live tensors"] = format_bytes(details["allocated_bytes"])
    unallocated = details.get("reserved_unallocated_bytes")
    if unallocated is not None:
        facts["cached, unused"] = format_bytes(unallocated)
    others = details.get("other_processes") or []
    if others:
        facts["other processes"] = ", ".join(
            f"pid {pid} ({format_bytes(size)})" for pid, size in others
        )
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
        "Run `%gpu_reset` to release what the notebook still holds (output history, the last "
        "traceback, cached blocks), then rerun; `del` the big leftovers listed here that you "
        "no longer need.",
        "Make the step smaller: a smaller batch size (keep the effective batch with gradient "
        "accumulation), shorter sequences, or bf16/fp16 via `torch.autocast`; use "
        "`torch.no_grad()` for evaluation.",
    ]
    if unallocated is not None and total and unallocated > max(total * 0.1, requested or 0):
        fixes.append(
            "Much memory is cached but unusable (fragmentation): put "
            "`%env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True` in the first cell, "
            "before CUDA starts."
        )
    if others:
        fixes.append(
            "Other processes hold memory on this GPU: stop them (another notebook's kernel, "
            "a previous run) - see the process list."
        )
    return Diagnosis(OUT_OF_MEMORY, summary, facts, fixes)


def _sticky(details: dict[str, Any]) -> Diagnosis:
    error = details.get("cuda_error", "a sticky CUDA error")
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
    ]
    if error == "device-side assert triggered":
        fixes.append(
            "Usual culprit: a class label outside [0, num_classes) for `CrossEntropyLoss` / "
            "`nll_loss` (compare `labels.min()`, `labels.max()` with the number of logits; "
            "-1 or 1-based labels are common), or an index >= `num_embeddings` in "
            "`nn.Embedding` (token ids vs vocabulary size); BCE targets outside [0, 1] also "
            "assert. Running the same step on CPU gives a readable error."
        )
    else:
        fixes.append(
            "Usual culprits: an out-of-range index, tensors on different devices passed to a "
            "custom CUDA op or extension, or a bug in a custom kernel. Running the same step on "
            "CPU (or with CUDA_LAUNCH_BLOCKING=1) shows where."
        )
    return Diagnosis(STICKY_ERROR, summary, {"CUDA error": error}, fixes, restart_required=True)


def _forked(details: dict[str, Any]) -> Diagnosis:
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
    return Diagnosis(FORKED_CUDA, summary, {}, fixes)


def _cublas(details: dict[str, Any]) -> Diagnosis:
    summary = (
        "Deterministic mode is on and this torch refuses cuBLAS calls unless "
        "CUBLAS_WORKSPACE_CONFIG was set before CUDA started; it is read once per process, "
        "so setting it now does not help."
    )
    fixes = [
        f"Restart the runtime ({RESTART_SESSION}) and make the first cell "
        "`%load_ext colab_gpu_guard` then `%seed_all SEED --deterministic`: it sets "
        "CUBLAS_WORKSPACE_CONFIG=:4096:8 before CUDA starts.",
        "Or `%seed_all SEED --warn-only`: ops that cannot be deterministic warn instead of "
        "raising.",
        "torch builds that include pytorch/pytorch#161749 no longer check for the variable "
        "(the facts above say whether this torch still does); upgrading torch also removes "
        "this error.",
    ]
    return Diagnosis(CUBLAS_DETERMINISM, summary, {}, fixes)


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


def _nondet(details: dict[str, Any]) -> Diagnosis:
    op = details.get("operation", "this operation")
    summary = (
        f"`{op}` has no deterministic implementation in this torch, and deterministic "
        "algorithms are switched on, so torch refuses to run it."
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
    return Diagnosis(NONDETERMINISTIC_OP, summary, {"operation": op}, fixes)


def _driver(details: dict[str, Any]) -> Diagnosis:
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
            "Install a torch build for a CUDA version the driver supports (the driver's CUDA "
            "version is shown here) from pytorch.org (`--index-url "
            "https://download.pytorch.org/whl/cuXXX`), then restart the runtime.",
            "Or update the NVIDIA driver (not possible on Colab: there, use the preinstalled "
            "torch; a `pip install` that pulled a build for a newer CUDA is the usual cause).",
        ]
    facts = {}
    if "driver_cuda_from_message" in details:
        facts["driver supports CUDA"] = details["driver_cuda_from_message"]
    return Diagnosis(DRIVER_MISMATCH, summary, facts, fixes)


def _driver_oom(details: dict[str, Any]) -> Diagnosis:
    summary = (
        "The CUDA driver itself ran out of memory (not PyTorch's allocator): typically while "
        "creating the CUDA context because another process - often a previous run of this "
        "notebook in another kernel, or a second notebook - already holds the GPU."
    )
    fixes = [
        "Stop the other process: Jupyter: shut down other kernels (Running tab, or Kernel > "
        "Shut Down All Kernels); Colab: Runtime > Manage sessions; a process you own: "
        "`kill PID`.",
        "If none is listed here, NVML cannot see processes of other containers: check "
        "`!nvidia-smi`.",
        "If this process holds the memory, run `%gpu_reset`.",
    ]
    return Diagnosis(CUDA_DRIVER_OOM, summary, {}, fixes)


def _no_gpu(details: dict[str, Any]) -> Diagnosis:
    summary = "This runtime has no GPU that this framework can use."
    fixes = [
        "Colab: Runtime > Change runtime type > a GPU, then rerun from the top.",
        "Check `CUDA_VISIBLE_DEVICES` (an index that does not exist hides every GPU) and that "
        "torch is a CUDA build (`torch.version.cuda` is None on CPU-only builds).",
    ]
    return Diagnosis(NO_GPU, summary, {}, fixes)


_BUILDERS: dict[str, Callable[[dict[str, Any]], Diagnosis]] = {
    OUT_OF_MEMORY: _oom,
    STICKY_ERROR: _sticky,
    FORKED_CUDA: _forked,
    CUBLAS_DETERMINISM: _cublas,
    NONDETERMINISTIC_OP: _nondet,
    DRIVER_MISMATCH: _driver,
    CUDA_DRIVER_OOM: _driver_oom,
    NO_GPU: _no_gpu,
}


# ---------------------------------------------------------------- facts from this process


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    name: str
    used_bytes: Optional[int]
    device: int


def _nvml_snapshot() -> Any:
    """NVML's snapshot, or None when NVML is not available (no CUDA context needed)."""
    try:
        snapshot = nvml.snapshot(processes=True)
    except Exception:
        return None
    return snapshot if snapshot.available else None


def _capability(text: Any) -> Optional[tuple[int, int]]:
    match = re.fullmatch(r"(\d+)\.(\d+)", str(text or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None


def gpu_processes() -> Optional[list[GpuProcess]]:
    """Processes on every GPU as NVML sees them, or None if NVML is unavailable."""
    snapshot = _nvml_snapshot()
    if snapshot is None:
        return None
    return [
        GpuProcess(int(process.pid), process.name or "?", process.used_memory, device.index)
        for device in snapshot.devices
        for process in device.processes or ()
    ]


def driver_facts() -> dict[str, Any]:
    """Driver version, the CUDA version the driver supports, and each GPU's name and compute
    capability, from NVML (no CUDA context needed). Missing keys were not available."""
    snapshot = _nvml_snapshot()
    if snapshot is None:
        return {}
    facts: dict[str, Any] = {}
    if snapshot.driver_version:
        facts["driver_version"] = snapshot.driver_version
    if snapshot.cuda_driver_version:
        facts["driver_cuda"] = snapshot.cuda_driver_version
    facts["devices"] = [
        {
            "index": device.index,
            "name": device.name,
            "capability": _capability(device.compute_capability),
        }
        for device in snapshot.devices
    ]
    return facts


def torch_arch_list(torch: Any) -> Optional[list[str]]:
    """The GPU architectures this torch was compiled for (compile-time data, no CUDA call)."""
    try:
        if torch_support.cuda_version(torch) is None:
            return []
        flags = getattr(torch._C, "_cuda_getArchFlags", None)
        if flags is not None:
            text = flags()
            return text.split() if text else []
        return list(torch.cuda.get_arch_list())
    except Exception:
        return None


def arch_supports(arch_list: list[str], capability: tuple[int, int]) -> Optional[bool]:
    """Whether code compiled for `arch_list` runs on a GPU of `capability`: a cubin for the
    same major version and a lower or equal minor (binary compatibility), or PTX for an
    equal or lower capability (JIT-compiled). None when the list is empty."""
    if not arch_list:
        return None
    major, minor = capability
    for arch in arch_list:
        match = re.fullmatch(r"(sm|compute)_(\d+)", arch)
        if not match:
            continue  # arch-specific variants such as sm_90a run only on that exact GPU
        arch_major, arch_minor = divmod(int(match.group(2)), 10)
        if match.group(1) == "sm" and arch_major == major and arch_minor <= minor:
            return True
        if match.group(1) == "compute" and (arch_major, arch_minor) <= (major, minor):
            return True
    return False


def _context_usable() -> bool:
    torch = torch_support.loaded()
    return (
        torch is not None
        and cuda_health.broken_reason() is None
        and torch_support.cuda_initialized(torch)
    )


def _leftover_holders(namespace: Optional[dict], device: Optional[str], limit: int = 5) -> Any:
    """The biggest leftover arrays by name, from colab_gpu_guard.leftovers when present."""
    try:
        from . import leftovers
    except Exception:
        return None
    try:
        found = leftovers.find_leftovers(device=device, namespace=namespace)
    except Exception:
        return None
    return list(found[:limit]) if found else []  # only the entries shown are made


def _describe_holder(item: Any) -> str:
    name = str(getattr(item, "name", "?"))
    size = format_bytes(getattr(item, "nbytes", None))
    shape = getattr(item, "shape", None)
    shape_text = "x".join(str(n) for n in shape) if shape else ""
    extra = ", ".join(part for part in (shape_text, str(getattr(item, "dtype", "") or "")) if part)
    return f"{name} {size}" + (f" ({extra})" if extra else "")


def _enrich(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Add facts learned from this process. Each part is guarded on its own."""
    for enrich in _ENRICHERS.get(diagnosis.kind, ()):
        try:
            enrich(diagnosis, namespace)
        except Exception:
            continue


def _enrich_oom(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    is_torch_cuda = "CUDA out of memory" in diagnosis.error or diagnosis.details.get(
        "type", ""
    ).startswith("torch")
    holders = _leftover_holders(namespace, "cuda" if is_torch_cuda else None)
    if holders:
        diagnosis.facts["biggest leftovers"] = "; ".join(_describe_holder(h) for h in holders)
    if is_torch_cuda and _context_usable():
        torch = torch_support.loaded()
        device = diagnosis.details.get("device", 0)
        for stats in torch_support.allocator_stats(torch):
            if stats.device == device:
                diagnosis.facts["allocated now"] = (
                    f"{format_bytes(stats.allocated)} by tensors, "
                    f"{format_bytes(stats.reserved)} reserved by PyTorch on cuda:{device}"
                )


def _enrich_sticky(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    reason = diagnosis.error or diagnosis.details.get("cuda_error", "sticky CUDA error")
    cuda_health.mark_broken(reason)
    diagnosis.notes.append(
        "The CUDA context is marked broken: `%gpu_status` and `%gpu_reset` report it "
        "without calling into CUDA."
    )
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING")
    diagnosis.facts["CUDA_LAUNCH_BLOCKING"] = repr(blocking) if blocking is not None else "unset"
    if blocking == "1":
        diagnosis.notes.append(
            "CUDA_LAUNCH_BLOCKING=1 is set, so the traceback points at the kernel that failed."
        )


def _enrich_forked(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    import multiprocessing

    method = multiprocessing.get_start_method(allow_none=True)
    diagnosis.facts["start method"] = method or "not chosen yet (fork on Linux)"
    torch = torch_support.loaded()
    if torch is not None:
        initialised = torch_support.cuda_initialized(torch)
        diagnosis.facts["CUDA initialised here"] = "yes" if initialised else "no"


def _enrich_cublas(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    value = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    diagnosis.facts["CUBLAS_WORKSPACE_CONFIG"] = repr(value) if value is not None else "unset"
    accepted = determinism.CUBLAS_DETERMINISTIC_CONFIGS
    if value is not None and value not in accepted:
        diagnosis.fixes.insert(
            0,
            f"CUBLAS_WORKSPACE_CONFIG is {value!r}, which cuBLAS does not accept for "
            f"determinism: it must be {' or '.join(accepted)} (set before CUDA starts).",
        )
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        requirement = determinism.cublas_requirement(torch)
        needed = {True: "needs it", False: "does not need it", None: "unknown"}[requirement.needed]
        diagnosis.facts["this torch"] = f"{needed} ({requirement.evidence})"


def _enrich_nondet(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        flags = determinism.read_flags(torch)
        diagnosis.facts["deterministic mode"] = f"{flags.algorithms} (warn_only={flags.warn_only})"


def _enrich_driver(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    torch = torch_support.loaded()
    from_nvml = driver_facts()
    torch_cuda = torch_support.cuda_version(torch) if torch is not None else None
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        diagnosis.facts["torch built for CUDA"] = torch_cuda or "none (CPU build)"
    if "driver_version" in from_nvml:
        diagnosis.facts["NVIDIA driver"] = from_nvml["driver_version"]
    if "driver_cuda" in from_nvml:
        diagnosis.facts["driver supports CUDA"] = from_nvml["driver_cuda"]
    driver_cuda = diagnosis.facts.get("driver supports CUDA")
    if torch_cuda and driver_cuda and _version_tuple(driver_cuda) < _version_tuple(torch_cuda):
        diagnosis.notes.append(
            f"The driver supports CUDA {driver_cuda}, older than the CUDA {torch_cuda} this "
            "torch was built for."
        )
    arch_list = torch_arch_list(torch) if torch is not None else None
    if arch_list is not None:
        diagnosis.facts["torch arch list"] = " ".join(arch_list) or "empty"
    devices = from_nvml.get("devices") or []
    if not devices and torch is not None and _context_usable():
        try:
            capability = tuple(torch.cuda.get_device_capability())
            devices = [{"index": torch.cuda.current_device(), "capability": capability}]
        except Exception:
            devices = []
    for device in devices:
        capability = device.get("capability")
        if capability is None:
            continue
        label = f"GPU {device['index']}"
        name = device.get("name")
        verdict = arch_supports(arch_list or [], capability)
        verdict_text = {
            True: "torch has kernels for it",
            False: "NO kernels in this torch",
            None: "",
        }[verdict]
        text = f"sm_{capability[0]}{capability[1]}" + (f", {name}" if name else "")
        diagnosis.facts[f"{label} capability"] = text + (
            f" - {verdict_text}" if verdict_text else ""
        )


def _version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split(".")[:2])
    except ValueError:
        return ()


def _enrich_processes(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    processes = gpu_processes()
    if processes is None:
        diagnosis.facts["GPU processes"] = "NVML not available here (check `!nvidia-smi`)"
        return
    own = os.getpid()
    others = [p for p in processes if p.pid != own]
    mine = [p for p in processes if p.pid == own]
    diagnosis.details["gpu_processes"] = [asdict(p) for p in processes]
    if others:
        diagnosis.facts["other GPU processes"] = "; ".join(
            f"pid {p.pid} {p.name} on GPU {p.device} ({format_bytes(p.used_bytes)})" for p in others
        )
    else:
        diagnosis.facts["other GPU processes"] = "none that NVML can see"
    if mine:
        diagnosis.facts["this process"] = "; ".join(
            f"GPU {p.device}: {format_bytes(p.used_bytes)}" for p in mine
        )


def _enrich_no_gpu(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    diagnosis.facts["CUDA_VISIBLE_DEVICES"] = repr(visible) if visible is not None else "unset"
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch built for CUDA"] = (
            torch_support.cuda_version(torch) or "none (CPU build)"
        )
    devices = driver_facts().get("devices")
    diagnosis.facts["GPUs NVML sees"] = (
        str(len(devices)) if devices is not None else "none (NVML not available)"
    )


_ENRICHERS: dict[str, tuple[Callable[[Diagnosis, Optional[dict]], None], ...]] = {
    OUT_OF_MEMORY: (_enrich_oom,),
    STICKY_ERROR: (_enrich_sticky,),
    FORKED_CUDA: (_enrich_forked,),
    CUBLAS_DETERMINISM: (_enrich_cublas,),
    NONDETERMINISTIC_OP: (_enrich_nondet,),
    DRIVER_MISMATCH: (_enrich_driver,),
    CUDA_DRIVER_OOM: (_enrich_processes, _enrich_oom),
    NO_GPU: (_enrich_no_gpu,),
}


# ---------------------------------------------------------------- advise (public)


def advise(
    exc: BaseException,
    *,
    release_frames: bool = False,
    namespace: Optional[dict] = None,
) -> Optional[Diagnosis]:
    """Diagnose a CUDA error: the cause, the facts that show it, and what to do.

    Returns None for anything that is not a recognised CUDA error. Side effects: a sticky
    error marks the CUDA context broken (see cuda_health); with `release_frames`, an
    out-of-memory error's traceback frames are cleared so the tensors they held are freed
    (the exception's traceback then shows no local variables; not done when the
    out-of-memory error is only the implicit __context__ of another error, whose frames stay
    for %debug). `namespace` is where to look for leftover tensors by name (a notebook's
    user namespace). Never raises.
    """
    try:
        diagnosis = classify(exc)
        if diagnosis is None:
            return None
    except Exception:
        return None
    try:
        # An out-of-memory error met only as the implicit context of another error (say, a
        # KeyError while handling it) is reported, but that error's frames stay for %debug.
        if (
            release_frames
            and diagnosis.kind in MEMORY_KINDS
            and diagnosis.details.get("found_in") != "context"
        ):
            count = notebook_refs.release_traceback_frames(exc)
            gc.collect()
            diagnosis.frames_released = count
            if count:
                diagnosis.notes.append(
                    f"Released the failed cell's traceback frames ({count}) so the tensors "
                    "they held are freed; `%debug` on this error shows no local variables."
                )
    except Exception:
        pass
    with contextlib.suppress(Exception):
        _enrich(diagnosis, namespace)
    return diagnosis


# ---------------------------------------------------------------- IPython integration


def is_notebook_shell(shell: Any) -> bool:
    """A kernel shell (Jupyter, Colab, VS Code) renders HTML; a terminal shell does not."""
    return any(klass.__name__ == "ZMQInteractiveShell" for klass in type(shell).__mro__)


class ShellAdvisor:
    """Shows the diagnosis under the normal traceback of a failing cell.

    Installed with ``shell.set_custom_exc((Exception, ...), handler)``. The handler first
    shows the traceback exactly as IPython would (or lets a custom handler that was already
    installed show it), then, for a recognised CUDA error only, the diagnosis. For every
    other exception nothing else happens, and ``%debug`` works as usual; for out-of-memory
    errors the failed cell's frames are released (and the diagnosis says so).
    """

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.previous: Optional[tuple[tuple, Any]] = None
        self.installed: Any = None
        self.last: Optional[Diagnosis] = None

    @property
    def enabled(self) -> bool:
        return self.installed is not None and getattr(self.shell, "CustomTB", None) is (
            self.installed
        )

    def install(self) -> None:
        if self.installed is not None:
            return
        previous_types = tuple(getattr(self.shell, "custom_exceptions", ()) or ())
        self.previous = (previous_types, getattr(self.shell, "CustomTB", None))
        handled = tuple(dict.fromkeys(previous_types + (Exception,)))
        self.shell.set_custom_exc(handled, self._handler)
        self.installed = self.shell.CustomTB

    def uninstall(self) -> None:
        """Put back the handler that was there before, exactly (the same objects)."""
        if self.installed is None:
            return
        if self.shell.CustomTB is self.installed and self.previous is not None:
            self.shell.custom_exceptions, self.shell.CustomTB = self.previous
            self.previous = None
        # If someone installed a handler over ours, leave theirs in place: ours then only
        # shows tracebacks as before (through the handler we had chained), with no advice.
        self.installed = None

    # -- the handler (IPython calls it as handler(shell, etype, value, tb, tb_offset=None))

    def _handler(self, shell: Any, etype: type, value: BaseException, tb: Any, tb_offset=None):
        self._show_standard(etype, value, tb, tb_offset)
        if self.installed is None or not isinstance(value, Exception):
            return None
        try:
            diagnosis = advise(
                value, release_frames=True, namespace=getattr(shell, "user_ns", None)
            )
        except Exception:
            return None
        if diagnosis is None:
            return None
        self.last = diagnosis
        with contextlib.suppress(Exception):
            self._display(diagnosis)
        return None

    def _show_standard(self, etype: type, value: BaseException, tb: Any, tb_offset) -> None:
        """Show the traceback as it would be shown without us."""
        shell = self.shell
        try:
            previous_types, previous_handler = self.previous or ((), None)
            if (
                previous_types
                and previous_handler is not None
                and isinstance(value, previous_types)
            ):
                previous_handler(etype, value, tb, tb_offset=tb_offset)
                return
            if _raised_in_run_code(tb):
                _showtraceback(shell, (etype, value, tb), tb_offset)
            elif issubclass(etype, IndentationError):
                shell.showindentationerror()
            elif issubclass(
                etype, (OverflowError, SyntaxError, ValueError, TypeError, MemoryError)
            ):
                shell.showsyntaxerror()  # what run_cell does when compiling the cell fails
            else:
                _showtraceback(shell, (etype, value, tb), tb_offset)
        except Exception:
            try:
                import traceback

                traceback.print_exception(etype, value, tb)
            except Exception:
                pass

    def _display(self, diagnosis: Diagnosis) -> None:
        if is_notebook_shell(self.shell):
            from IPython.display import display

            display({"text/plain": str(diagnosis), "text/html": diagnosis._repr_html_()}, raw=True)
        else:
            print(str(diagnosis))


def _raised_in_run_code(tb: Any) -> bool:
    """Did the exception come out of the cell's code (IPython's run_code), rather than out of
    compiling the cell? run_code is the first frame of the traceback it catches."""
    if tb is None:
        return True
    return getattr(tb.tb_frame.f_code, "co_name", "") == "run_code"


def _showtraceback(shell: Any, exc_tuple: tuple, tb_offset: Any) -> None:
    kwargs: dict[str, Any] = {}
    if tb_offset is not None:
        kwargs["tb_offset"] = tb_offset
    if _accepts(shell.showtraceback, "running_compiled_code"):
        kwargs["running_compiled_code"] = True
    shell.showtraceback(exc_tuple, **kwargs)


def _accepts(function: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
