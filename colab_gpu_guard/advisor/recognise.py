"""Recognising a CUDA error from its type and message, across torch, CuPy, JAX/XLA and
TensorFlow: the sizes an out-of-memory message states, the sticky errors, and the kind of
error one exception is. Pure text work: no CUDA, NVML or framework call."""

from __future__ import annotations

import re
from typing import Any, NamedTuple, Optional

from ..units import cuda_version_text
from .kinds import (
    CUBLAS_DETERMINISM,
    CUDA_DRIVER_OOM,
    DRIVER_MISMATCH,
    FORKED_CUDA,
    NO_GPU,
    NONDETERMINISTIC_OP,
    OUT_OF_MEMORY,
    STICKY_ERROR,
)

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


# What an out-of-memory message states, as (fact, pattern), in the order tried: a fact keeps
# the first figure found. A pattern with {SIZE} reads a printed size (any case); one with a
# group reads a number as written (a device index, or bytes printed in parentheses).
_OOM_FIGURES: tuple[tuple[str, str], ...] = (
    ("requested_bytes", r"Tried to allocate {SIZE}"),
    ("requested_bytes", r"Out of memory allocating {SIZE}"),
    ("requested_bytes", r"out of memory to allocate {SIZE}"),
    ("requested_bytes", r"while trying to allocate {SIZE}"),
    ("requested_bytes", r"Failed to allocate request for [^(]*\((\d+)B\)"),
    ("requested_bytes", r"Failed to allocate request for {SIZE}"),
    # torch >= 2.1: "GPU 0 has a total capacity of X of which Y is free."
    ("device", r"GPU (\d+) has a total capac\w* of"),
    ("total_bytes", r"total capac\w* of {SIZE}"),
    ("free_bytes", r"of which {SIZE} is free"),
    ("process_bytes", r"this process has {SIZE} memory in use"),
    ("allocated_bytes", r"Of the allocated memory {SIZE}"),
    ("reserved_unallocated_bytes", r"and {SIZE} is reserved by PyTorch"),
    # torch < 2.1: "(GPU 0; 6.00 GiB total capacity; 3.49 GiB already allocated; 1.04 GiB
    # free; 3.50 GiB reserved in total by PyTorch)"
    ("device", r"\(GPU (\d+);"),
    ("total_bytes", r"{SIZE} total capacity"),
    ("allocated_bytes", r"{SIZE} already allocated"),
    ("free_bytes", r"; {SIZE} free"),
    ("reserved_bytes", r"{SIZE} reserved in total by PyTorch"),
    ("reserved_bytes", r"{SIZE} cached\)"),
    # CuPy: "(allocated so far: N bytes)" / "(total N bytes)"
    ("allocated_bytes", r"allocated so far: {SIZE}"),
    # JAX: "on device ordinal 0"; TensorFlow: "/device:GPU:0"
    ("device", r"device ordinal (\d+)"),
    ("device", r"device:GPU:(\d+)"),
)


def parse_oom_message(text: str) -> dict[str, Any]:
    """Figures an out-of-memory message states, in bytes, for every wording we know:
    torch 1.0 to current (including torch 2.1's 'capacty'), CuPy, JAX/XLA and TensorFlow."""
    facts: dict[str, Any] = {}
    for fact, pattern in _OOM_FIGURES:
        if fact in facts:
            continue
        if "{SIZE}" in pattern:
            value = _named_size("s", pattern, text)
        else:
            match = re.search(pattern, text)
            value = int(match.group(1)) if match else None
        if value is not None:
            facts[fact] = value

    if "total_bytes" in facts and "reserved_bytes" in facts and "allocated_bytes" in facts:
        facts.setdefault(
            "reserved_unallocated_bytes", facts["reserved_bytes"] - facts["allocated_bytes"]
        )
    _listed_processes(text, facts)
    return facts


def _size_and_slack(text: str) -> Optional[tuple[int, float]]:
    """A printed size in bytes, and how far the true size may be from it: torch prints
    two decimals of its unit (``format_size``), so up to half of the last digit."""
    match = re.search(_SIZE, text, re.IGNORECASE)
    if not match:
        return None
    number = match.group(1).replace(",", "")
    unit = _UNITS[match.group(2).lower()]
    decimals = len(number.partition(".")[2])
    return int(round(float(number) * unit)), 0.5 * 10**-decimals * unit


def _listed_processes(text: str, facts: dict[str, Any]) -> None:
    """The 'Process N has X memory in use.' entries torch (>= 2.1) adds from NVML's process
    list (c10/cuda/CUDACachingAllocator.cpp, reportProcessMemoryInfo). This process is
    written 'this process has X' only when its PID matches; inside a PID namespace (Docker,
    Kubernetes, Kaggle) NVML reports host PIDs, so the kernel itself is listed as
    'Process N'. Any process with PyTorch memory on the GPU is listed, and its in-use figure
    includes everything its allocator reserved: so when exactly one entry covers PyTorch's
    allocated + reserved-but-unallocated figures of the same message, that entry is this
    process (matched by memory); when several do, one of them is, but which cannot be told.
    """
    entries = []
    for pid, size_text in re.findall(r"Process (\d+) has (\S+ \S+) memory in use", text):
        sized = _size_and_slack(size_text)
        size, slack = sized if sized is not None else (None, 0.0)
        if size is not None and facts.get("total_bytes") and size > facts["total_bytes"]:
            size = None  # NVML's "not available" (2**64 - 1) printed as a size
        entries.append((int(pid), size, slack))
    if not entries:
        return
    others = [(pid, size) for pid, size, _ in entries]
    if "process_bytes" not in facts:
        candidates = _could_be_this_process(text, entries)
        if len(candidates) == 1:
            pid, size = candidates[0]
            facts["process_bytes"] = size
            facts["process_pid"] = pid
            facts["process_matched_by"] = "memory"
            facts["pytorch_bytes"] = _pytorch_bytes(text)[0]
            others = [entry for entry in others if entry[0] != pid]
        elif len(candidates) > 1:
            facts["this_process_among"] = [pid for pid, _ in candidates]
    if others:
        facts["other_processes"] = others


def _pytorch_bytes(text: str) -> tuple[Optional[int], float]:
    """What this process's allocator reserved, as the message states it: allocated plus
    reserved-but-unallocated (torch >= 2.1), or 'reserved in total' (older); and the
    rounding slack of those printed figures."""
    allocated = re.search(rf"Of the allocated memory ({_SIZE})", text, re.IGNORECASE)
    unallocated = re.search(rf"and ({_SIZE}) is reserved by PyTorch", text, re.IGNORECASE)
    if allocated and unallocated:
        parts = [_size_and_slack(allocated.group(1)), _size_and_slack(unallocated.group(1))]
    else:
        reserved = re.search(rf"({_SIZE}) reserved in total by PyTorch", text, re.IGNORECASE)
        parts = [_size_and_slack(reserved.group(1))] if reserved else []
    known = [part for part in parts if part is not None]
    if not known:
        return None, 0.0
    return sum(size for size, _ in known), sum(slack for _, slack in known)


def _could_be_this_process(
    text: str, entries: list[tuple[int, Optional[int], float]]
) -> list[tuple[int, int]]:
    needed, slack = _pytorch_bytes(text)
    if needed is None:
        return []
    return [
        (pid, size)
        for pid, size, own_slack in entries
        if size is not None and size + own_slack + slack >= needed
    ]


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


def recognise(exc: BaseException) -> Optional[Recognised]:
    """The kind and details of one exception, from its type and message only."""
    message = _message(exc)
    if not message and not _is_device_oom_type(exc):
        return None
    details: dict[str, Any] = {"message": message, "type": _type_name(exc)}
    if _FORKED.search(message):
        return Recognised(FORKED_CUDA, details)
    if _CUBLAS.search(message):
        return Recognised(CUBLAS_DETERMINISM, details)
    match = _NONDET.search(message)
    if match and "deterministic" in message:
        details["operation"] = match.group("op")
        return Recognised(NONDETERMINISTIC_OP, details)
    lowered = message.lower()
    for text, names in STICKY_ERRORS.items():
        if text.lower() in lowered or any(name in message for name in names):
            details["cuda_error"] = text
            return Recognised(STICKY_ERROR, details)
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
        return Recognised(NO_GPU, details)
    return None
