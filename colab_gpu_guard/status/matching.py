"""Which NVML device is which torch CUDA device, and what NVML charges this process on it.

CUDA_VISIBLE_DEVICES and MIG remap indices, so torch's cuda:N is matched to an NVML GPU (or
MIG instance) by UUID, else by PCI bus id, else by index only when nothing can remap.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Optional, Union

from .. import nvml
from ..nvml import MigInstance, NvmlDevice, NvmlSnapshot


class Match(NamedTuple):
    """The NVML device (or MIG instance) that is one torch CUDA device, and how it was found."""

    target: Optional[Union[NvmlDevice, MigInstance]]
    mig_slot: Optional[int]  # the MIG slot, when the target is a MIG instance
    nvml_index: Optional[int]  # NVML's index of the GPU holding the target
    matched_by: str  # "uuid", "pci bus id", "index (assumed)" or "none"


_NO_MATCH = Match(None, None, None, "none")


def match_device(
    torch: Any, index: int, view: NvmlSnapshot, torch_count: int, broken: bool
) -> Match:
    """Which NVML GPU (or MIG instance) is torch's cuda:`index`: by UUID, else PCI bus id,
    else by index when nothing can remap devices."""
    if not view.available or not view.devices:
        return _NO_MATCH
    properties = None
    if not broken:  # a broken context is not asked anything
        try:
            properties = torch.cuda.get_device_properties(index)
        except Exception:
            properties = None
    uuid = str(getattr(properties, "uuid", "") or "")
    if uuid:
        wanted = nvml.normalise_uuid(uuid)
        for device in view.devices:
            if device.uuid and nvml.normalise_uuid(device.uuid) == wanted:
                return Match(device, None, device.index, "uuid")
            for instance in device.mig_instances:
                if instance.uuid and nvml.normalise_uuid(instance.uuid) == wanted:
                    return Match(instance, instance.index, device.index, "uuid")
    bus = _torch_bus_id(properties)
    if bus is not None:
        for device in view.devices:
            if device.pci_bus_id and _normal_bus_id(device.pci_bus_id) == bus:
                return Match(device, None, device.index, "pci bus id")
    remapped = os.environ.get("CUDA_VISIBLE_DEVICES") is not None
    if not remapped and torch_count == len(view.devices) and index < len(view.devices):
        device = view.devices[index]
        if not device.mig_enabled:
            return Match(device, None, device.index, "index (assumed)")
    return _NO_MATCH


def _torch_bus_id(properties: Any) -> Optional[str]:
    try:
        domain = int(properties.pci_domain_id)
        bus = int(properties.pci_bus_id)
        device = int(properties.pci_device_id)
    except (AttributeError, TypeError, ValueError):
        return None
    return f"{domain:08X}:{bus:02X}:{device:02X}.0"


def _normal_bus_id(bus_id: str) -> str:
    domain, _, rest = bus_id.strip().upper().partition(":")
    return f"{domain[-8:].rjust(8, '0')}:{rest}"


def used_by_this_process(
    parent: Optional[NvmlDevice], target: Union[NvmlDevice, MigInstance]
) -> Optional[int]:
    """The bytes NVML charges this process on `target` (on a MIG instance: its processes in
    that GPU and compute instance); None when NVML does not say."""
    if parent is None:
        return None
    if isinstance(target, NvmlDevice):
        return target.used_by_this_process()
    mine = [
        p
        for p in parent.processes or ()
        if p.this_process
        and p.gpu_instance_id == target.gpu_instance_id
        and p.compute_instance_id == target.compute_instance_id
    ]
    if not mine or any(p.used_memory is None for p in mine):
        return None
    return sum(p.used_memory or 0 for p in mine)
