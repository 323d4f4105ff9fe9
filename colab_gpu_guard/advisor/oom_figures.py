"""What an out-of-memory message states, read from its text: the size asked for, the
device's capacity and free memory, what the framework's allocator held, and the GPU
processes torch lists. Every wording we know, torch 1.0 to current, CuPy, JAX/XLA and
TensorFlow. Pure text work."""

from __future__ import annotations

import re
from typing import Any, Optional

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
    # with torch.cuda.set_per_process_memory_fraction: "...; 2.00 GiB allowed; ..."
    ("allowed_bytes", r"{SIZE} allowed;"),
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
    # torch 1.0 to 1.3: "...; 576.00 KiB free; 30.96 MiB cached)", where "cached" is what
    # the allocator holds but no tensor uses (THCCachingAllocator.cpp: "memory held by the
    # allocator but not used by the program"), not all it holds
    ("reserved_unallocated_bytes", r"{SIZE} cached\)"),
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

    if "requested_bytes" not in facts:
        tensor = _tensorflow_request(text)
        if tensor is not None:
            facts["requested_bytes"] = tensor
    reserved, allocated = facts.get("reserved_bytes"), facts.get("allocated_bytes")
    if reserved is not None and allocated is not None and reserved >= allocated:
        facts.setdefault("reserved_unallocated_bytes", reserved - allocated)
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


# Bytes per element of TensorFlow's dtype names, as its OOM message writes them.
_TF_DTYPE_BYTES = {
    "float": 4,
    "double": 8,
    "half": 2,
    "bfloat16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "complex64": 8,
    "complex128": 16,
}


def _tensorflow_request(text: str) -> Optional[int]:
    """TensorFlow states the tensor, not its size: 'OOM when allocating tensor with
    shape[25088,4096] and type float' is 25088 * 4096 * 4 bytes."""
    match = re.search(
        r"OOM when allocating tensor (?:with shape|of shape )\[([\d,\s]*)\] and type (\w+)", text
    )
    if not match or match.group(2) not in _TF_DTYPE_BYTES:
        return None
    size = _TF_DTYPE_BYTES[match.group(2)]
    for dim in filter(None, (part.strip() for part in match.group(1).split(","))):
        size *= int(dim)
    return size
