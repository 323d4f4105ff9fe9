"""What this machine adds to the advice on errors of setup: the driver and the CUDA build
(versions, the architectures torch has code for), each GPU's compute capability and compute
mode as NVML reads them, how many GPUs it lists, CUDA_VISIBLE_DEVICES. Each enricher
rebuilds the answer where a fact changes it. No CUDA call after a sticky error: NVML
first."""

from __future__ import annotations

import os
from typing import Callable, Optional

from .. import cuda_health
from ..frameworks import torch as torch_support
from . import fixes, machine, memory_fixes, setup_fixes
from .advice import Advice
from .diagnosis import Diagnosis
from .kinds import NO_GPU
from .machine import arch_supports, driver_facts, torch_arch_list


def context_usable() -> bool:
    """Whether torch's CUDA context here started and is not broken: a CUDA call may be
    made."""
    torch = torch_support.loaded()
    return (
        torch is not None
        and cuda_health.broken_reason() is None
        and torch_support.cuda_initialized(torch)
    )


def enrich_driver(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
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
    if not devices and torch is not None and context_usable():
        try:
            capability = tuple(torch.cuda.get_device_capability())
            devices = [{"index": torch.cuda.current_device(), "capability": capability}]
        except Exception:  # torch: a context the error may have broken
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


def enrich_driver_versions(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Error 803: the versions of the driver's two halves as this machine has them."""
    diagnosis.details.update(machine.driver_versions_details())
    advice = setup_fixes.driver_versions(diagnosis.details)
    diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)
    diagnosis.facts.update(advice.facts)


def _version_tuple(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(part) for part in str(text).split(".")[:2])
    except ValueError:
        return ()


def enrich_devices(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    if diagnosis.details.get("problem") == "checkpoint":
        return  # the message states torch's own device count: nothing to add
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    diagnosis.facts["CUDA_VISIBLE_DEVICES"] = repr(visible) if visible is not None else "unset"
    devices = driver_facts().get("devices")
    diagnosis.facts["GPUs NVML sees"] = (
        ", ".join(f"GPU {d['index']} {d.get('name') or ''}".rstrip() for d in devices) or "none"
        if devices is not None
        else "NVML not available"
    )


def enrich_compute_mode(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """The compute mode of each GPU (NVML) tells the causes of 'busy or unavailable' apart:
    exclusive (one process at a time), prohibited (none), or default (neither: the GPU or
    its driver is at fault)."""
    modes = machine.compute_modes()
    for index, mode in modes:
        diagnosis.facts[f"GPU {index} compute mode"] = mode
    advice = setup_fixes.device_busy(diagnosis.details, [mode for _, mode in modes])
    diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)


def enrich_capability(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    gpu_capabilities(diagnosis)


def gpu_capabilities(diagnosis: Diagnosis) -> list[tuple[int, int]]:
    """Each GPU's name and compute capability as facts (NVML's): the capabilities read."""
    capabilities = []
    for device in driver_facts().get("devices") or []:
        capability = device.get("capability")
        if capability is not None:
            capabilities.append(capability)
            if "this GPU" not in diagnosis.facts:  # the message named it already
                name = device.get("name") or f"GPU {device['index']}"
                diagnosis.facts[f"GPU {device['index']}"] = (
                    f"{name}, compute capability {capability[0]}.{capability[1]}"
                )
    return capabilities


def enrich_engine(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """cuDNN found no engine: this machine's GPUs tell whether bfloat16 is native here."""
    if diagnosis.details.get("also") == "engine":
        _with_capabilities(diagnosis, memory_fixes.memory_in_disguise)


def enrich_attention(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Attention had no kernel: this machine's GPUs tell whether flash attention could run."""
    _with_capabilities(diagnosis, setup_fixes.attention_kernels)


def _with_capabilities(diagnosis: Diagnosis, build: Callable[[dict], Advice]) -> None:
    """The answer made again by `build` with the GPUs' compute capabilities (NVML's) in its
    details, where NVML gives any; the facts already found stay."""
    capabilities = gpu_capabilities(diagnosis)
    if capabilities:
        diagnosis.details["capabilities"] = capabilities
        advice = build(diagnosis.details)
        diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)


def enrich_no_gpu(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    diagnosis.facts["CUDA_VISIBLE_DEVICES"] = repr(visible) if visible is not None else "unset"
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch built for CUDA"] = (
            torch_support.cuda_version(torch) or "none (CPU build)"
        )
    presence = machine.gpu_presence()
    if presence.no_driver:
        diagnosis.facts["GPUs NVML sees"] = "none: no NVIDIA driver on this machine"
    elif presence.gpus is None:
        diagnosis.facts["GPUs NVML sees"] = f"unknown (NVML not available: {presence.why})"
    else:
        diagnosis.facts["GPUs NVML sees"] = str(presence.gpus)
    if diagnosis.details.get("problem") == "checkpoint":
        return  # a checkpoint's fix (map_location) stands
    if presence.gpus is not None:
        diagnosis.details.update(gpus_here=presence.gpus, no_driver=presence.no_driver)
        advice = fixes.BUILDERS[NO_GPU](diagnosis.details)
        diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)
    if diagnosis.details.get("framework") not in (None, "torch") or diagnosis.details.get(
        "problem"
    ) not in (None, "cpu build"):
        return  # the cause below is torch's
    cause = fixes.no_gpu_cause(
        torch_support.version() if torch is not None else None,
        torch is not None and torch_support.cpu_only_build(torch),
        presence.gpus,
        visible,
        driver_facts().get("driver_cuda") if presence.gpus else None,
    )
    if cause is not None:
        diagnosis.summary, diagnosis.fixes = cause[0], list(cause[1])
