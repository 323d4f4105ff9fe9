"""One line under a cell's displayed result when that result keeps much accelerator memory
alive through the output history (``Out[N]``, ``_``); see docs/cells.md, "The output
warning"."""

from __future__ import annotations

import re
from typing import Any, Optional

from ..frameworks import torch as torch_support
from ..units import OUTPUT_HISTORY, format_bytes

DEFAULT_THRESHOLD = 256 * 2**20
MAX_ITEMS = 64
OFF = "off"
SIZE_FORM = "a size with a unit, e.g. 256MiB, 1.5GiB, 500MB, or 'off'"
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(B|KiB|MiB|GiB|TiB|KB|MB|GB|TB)\s*", re.IGNORECASE)
_UNIT = {"b": 1, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_UNIT.update({"kb": 2**10, "mb": 2**20, "gb": 2**30, "tb": 2**40})  # as torch prints them


def parse_threshold(text: str) -> Optional[int]:
    """'256MiB' -> 268435456; 'off' -> None (no warning). Raises ValueError naming the
    valid form for anything else (sizes are binary: 1 MB = 1 MiB, as torch prints them)."""
    if text.strip().lower() == OFF:
        return None
    match = _SIZE.fullmatch(text)
    if match is None:
        raise ValueError(f"--warn-output takes {SIZE_FORM}, not {text!r}")
    return int(round(float(match.group(1)) * _UNIT[match.group(2).lower()]))


def _tensor_bytes(tensor: Any, seen: set, found: dict, inner: bool = True) -> None:
    info = torch_support.array_info(tensor)
    if info.storage_key in seen:
        return
    seen.add(info.storage_key)
    found[info.device] = found.get(info.device, 0) + info.storage_nbytes
    if inner and not info.storage_nbytes and info.storage_key[0] == "tensor":
        _inner_bytes(tensor, seen, found)


def _inner_bytes(wrapper: Any, seen: set, found: dict) -> None:
    """A wrapper subclass's memory (a quantized weight, DTensor): its inner tensors."""
    from ..leftovers.readers import inner_tensors

    tensor = torch_support.tensor_type()
    for value in inner_tensors(wrapper, tensor) if tensor is not None else ():
        _tensor_bytes(value, seen, found, inner=False)


def held_arrays(value: Any, include_cpu: bool = False) -> dict:
    """{device: bytes} of the torch tensors `value` is or holds one level down (a tuple,
    list or dict of at most `MAX_ITEMS` items); storages shared by views are counted once.
    CPU memory only with `include_cpu`."""
    if value is None:
        return {}
    tensor = torch_support.tensor_type()
    if tensor is None:
        return {}
    kind = type(value)
    found: dict = {}
    seen: set = set()
    if kind is tensor or issubclass(kind, tensor):
        _tensor_bytes(value, seen, found)
    elif kind is tuple or kind is list or kind is dict:
        items = dict.values(value) if kind is dict else value
        if len(items) > MAX_ITEMS:
            return {}
        for item in items:
            if type(item) is tensor or issubclass(type(item), tensor):
                _tensor_bytes(item, seen, found)
    if not include_cpu:
        found.pop("cpu", None)
    return found


class OutputWarning:
    """Decides whether a displayed result deserves the warning line, and words it."""

    def __init__(self, threshold: Optional[int] = DEFAULT_THRESHOLD, include_cpu: bool = False):
        self.threshold = threshold
        self.include_cpu = include_cpu

    def line(self, value: Any, label: str) -> Optional[str]:
        """The line for a result `value` kept as `label` (``Out[12]``), or None."""
        if value is None or self.threshold is None:
            return None
        try:
            held = held_arrays(value, self.include_cpu)
        except Exception:  # the user's result, read through a framework: no line, no error
            return None
        if not held or sum(held.values()) < self.threshold:
            return None
        where = " and ".join(
            f"{format_bytes(amount)} on {device}" for device, amount in held.items()
        )
        return (
            f"{label} keeps {where} alive ({OUTPUT_HISTORY}): end the line with ';' "
            "or run %gpu_reset"
        )

    def describe(self) -> str:
        if self.threshold is None:
            return "gpu_history: no warning under results that keep accelerator memory"
        return (
            f"gpu_history: a displayed result keeping {format_bytes(self.threshold)} or more "
            "of accelerator memory alive in the output history gets a warning line"
        )
