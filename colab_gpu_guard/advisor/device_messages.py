"""What an error message about devices names: tensors on two devices (every wording from
torch 1.x on), indices on another device than the tensor they index, a layer's input and
weights apart, a random generator on another device than its draws. Read into the
details `recognise` hands to the advice."""

from __future__ import annotations

import re
from typing import Any

# Tensors on two devices: every wording from torch 1.x to current. Groups: the devices
# (`a` what the argument is on, `b` the rest), the argument and the operation.
_DEVICE_MISMATCH = (
    re.compile(
        r"Expected all tensors to be on the same device, but found at least two devices, "
        r"(?P<a>[\w:]+) and (?P<b>[\w:]+)!(?: \(when checking argument for argument "
        r"(?P<arg>\w+) in method (?P<op>\w+)\))?"
    ),
    re.compile(
        r"Expected all tensors to be on the same device, but got (?P<arg>\w+) is on "
        r"(?P<a>[\w:]+), different from other tensors on (?P<b>[\w:]+)"
        r"(?: \(when checking argument in method (?P<op>\w+)\))?"
    ),
    re.compile(
        r"Expected object of (?:device type|backend) (?P<b>\w+) but got (?:device type|backend) "
        r"(?P<a>\w+) for argument #\d+ '(?P<arg>\w+)'(?: in call to (?P<op>\w+))?"
    ),
    re.compile(
        r"Tensor for argument #\d+ '(?P<arg>\w+)' is on (?P<a>\w+), but expected it to be on "
        r"(?P<b>\w+)(?: \(while checking arguments for (?P<op>\w+)\))?"
    ),
)
# Indices on another device than the tensor they index (only the tensor's device is named).
_INDICES = re.compile(
    r"indices should be either on cpu or on the same device as the indexed tensor "
    r"\((?P<indexed>[\w:]+)\)"
)
# "Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the
# same": a device mismatch only when one type is a CUDA type and the other not (the same
# wording also reports a dtype mismatch on one device).
_INPUT_WEIGHT = re.compile(r"Input type \((?P<input>[^)]*)\) and weight type \((?P<weight>[^)]*)\)")
# ATen's check_generator (ATen/core/Generator.h): a draw on one device type, a generator on
# another ("Expected a 'cuda' device type for generator but found 'cpu'")
_GENERATOR = re.compile(
    r"Expected a '(?P<drawn>\w+)' device type for generator but found '(?P<on>\w+)'"
)


def device_mismatch(message: str, details: dict[str, Any]) -> bool:
    """Fill in the devices, argument and operation a device-mismatch message names."""
    for pattern in _DEVICE_MISMATCH:
        match = pattern.search(message)
        if match:
            named = match.groupdict()
            details["devices"] = [_device_name(named["a"]), _device_name(named["b"])]
            if named.get("arg"):
                details["argument"] = named["arg"]
                if "found at least two devices" not in match.group(0):
                    details["argument_on"] = details["devices"][0]
            if named.get("op"):
                details["operation"] = _operation_name(named["op"])
            return True
    match = _INDICES.search(message)
    if match:
        details["indexed_on"] = _device_name(match.group("indexed"))
        return True
    match = _INPUT_WEIGHT.search(message)
    if match:
        on = {
            part: "cuda" if "cuda" in match.group(part).lower() else "cpu"
            for part in ("input", "weight")
        }
        if on["input"] != on["weight"]:
            details["devices"] = [on["input"], on["weight"]]
            details["input_on"], details["weight_on"] = on["input"], on["weight"]
            return True
    return False


def generator_devices(message: str, details: dict[str, Any]) -> bool:
    """Fill in where a draw ran and where its generator is (`drawn_on`, `generator_on`)."""
    match = _GENERATOR.search(message)
    if match is None:
        return False
    details["drawn_on"], details["generator_on"] = match.group("drawn", "on")
    return True


def _device_name(text: str) -> str:
    """'cuda:0', 'cpu'; torch 1.x wrote device types ('cuda', 'CPU') and backends ('CUDA')."""
    return text if ":" in text else text.lower()


def _operation_name(text: str) -> str:
    """'wrapper_CUDA_addmm' -> 'addmm', '_th_index_select' -> 'index_select',
    '_thnn_conv2d_forward' -> 'conv2d_forward' (torch's internal names for an op)."""
    return re.sub(r"^(wrapper_(CUDA_)?_?|_thnn_|_th_)", "", text)
