"""Which NVML device is which torch CUDA device (`match_device`), which NVML process is this
kernel (by PID, else `find_by_memory`), and what NVML charges it.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional, Union

from .. import nvml
from ..nvml import MigInstance, NvmlDevice, NvmlProcess, NvmlSnapshot

MiB = 1 << 20

# What NVML charges a process beyond torch's reserved bytes: the CUDA context and the kernels
# loaded into it (libtorch's, cuBLAS's, cuDNN's...). Measured: a fresh torch context was
# ~520 MiB on an H100 (torch 2.11, CUDA 13, driver 580) and 426 MiB on an RTX 6000 Ada
# (torch 2.10, CUDA 13: unsloth-zoo PR 1053); PyTorch's maintainers give ~300-400 MB with
# lazy module loading (CUDA >= 11.7; torch sets CUDA_MODULE_LOADING=LAZY since 1.13,
# pytorch PR 86509) and over 1 GB before it. Library workspaces come from torch's own
# allocator (ATen's CublasHandlePool keeps cuBLAS workspaces as allocator DataPtrs), so
# they are in reserved already. 1.5 GiB is about three measured fresh contexts: room for
# the kernels libraries load as they are used (tests/unit/test_status.py measures a context
# after cuBLAS and cuDNN work on the GPU against it). An eagerly loaded context, or another
# allocator in this process (CuPy, JAX), may not fit: the kernel is then "not identified",
# never guessed. Only an unambiguous fit counts (`find_by_memory`).
CONTEXT_MARGIN = 1536 * MiB


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
    else by index when nothing can remap devices (CUDA_VISIBLE_DEVICES and MIG remap
    indices)."""
    if not view.available or not view.devices:
        return _NO_MATCH
    properties = None
    if not broken:  # a broken context is not asked anything
        try:
            properties = torch.cuda.get_device_properties(index)
        except Exception:  # torch: a stub or a context the driver refuses
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


class KernelOn(NamedTuple):
    """Where this kernel has a CUDA context, and what torch has reserved there."""

    nvml_index: int  # the NVML GPU
    target: Union[NvmlDevice, MigInstance]  # that GPU, or the MIG instance on it
    reserved: int  # torch's caching allocator, bytes


def find_by_memory(
    view: NvmlSnapshot, places: Sequence[KernelOn], margin: int = CONTEXT_MARGIN
) -> Optional[int]:
    """The PID NVML lists this kernel under, found by memory: on every GPU (or MIG
    instance) in `places`, the compute processes whose used memory lies between torch's
    reserved bytes and those plus `margin`; a process has one PID, so the one PID that fits
    on all of them. None unless exactly one does, and when NVML does not say every
    process's memory there (the unknown one could be this kernel).

    NVML lists processes by host PID: inside a container's PID namespace (Docker,
    Kubernetes, Kaggle, many cloud notebooks) no entry has ``os.getpid()``, so this looks
    for this kernel by its memory: NVML charges a process its CUDA context, the kernels
    libraries load into it, and every ``cudaMalloc``, so this kernel uses at least what
    torch's caching allocator has reserved and at most that plus a context-sized margin
    (`CONTEXT_MARGIN`)."""
    if not places:
        return None
    common: Optional[set[int]] = None
    for place in places:
        processes = _processes_on(view, place)
        if processes is None or any(p.used_memory is None for p in processes):
            return None
        fits = {
            p.pid
            for p in processes
            if "compute" in p.kinds
            and p.used_memory is not None
            and place.reserved <= p.used_memory <= place.reserved + margin
        }
        common = fits if common is None else common & fits
    if common is None or len(common) != 1:
        return None
    return next(iter(common))


def _processes_on(view: NvmlSnapshot, place: KernelOn) -> Optional[list[NvmlProcess]]:
    if not 0 <= place.nvml_index < len(view.devices):
        return None
    device = view.devices[place.nvml_index]
    if device.processes is None:
        return None
    if isinstance(place.target, MigInstance):
        return [
            p
            for p in device.processes
            if p.gpu_instance_id == place.target.gpu_instance_id
            and p.compute_instance_id == place.target.compute_instance_id
        ]
    return list(device.processes)


def mark_by_memory(view: NvmlSnapshot, pid: int) -> NvmlSnapshot:
    """`view` with the entries of `pid` marked as this kernel, matched by memory."""
    devices = []
    for device in view.devices:
        if device.processes and any(p.pid == pid for p in device.processes):
            processes = tuple(
                dataclasses.replace(p, this_process=True, matched_by_memory=True)
                if p.pid == pid
                else p
                for p in device.processes
            )
            device = dataclasses.replace(device, processes=processes)
        devices.append(device)
    return dataclasses.replace(view, devices=tuple(devices))


def without_process_names(view: NvmlSnapshot) -> NvmlSnapshot:
    """`view` with every process's name dropped (names looked up in another PID namespace)."""
    devices = tuple(
        dataclasses.replace(
            device, processes=tuple(dataclasses.replace(p, name=None) for p in device.processes)
        )
        if device.processes
        else device
        for device in view.devices
    )
    return dataclasses.replace(view, devices=devices)
