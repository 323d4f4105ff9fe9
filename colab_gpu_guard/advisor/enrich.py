"""`advise`: a diagnosis plus what can be learned safely from this process.

Leftover tensors by name, NVML's list of GPU processes, driver and build versions; a sticky
error marks the CUDA context broken, and the failed call's traceback frames can be released
after an out-of-memory error.

Rules kept here:
- nothing here raises into the caller: an advisor failure must never hide the user's
  traceback;
- no CUDA call is made after a sticky error (the context is gone and calls may hang); NVML is
  used instead where a device fact is needed;
- torch and numpy are never imported at module level.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import asdict
from typing import Any, Callable, Optional

from .. import cuda_health
from ..frameworks import torch as torch_support
from ..seeding import determinism
from ..units import format_bytes
from . import fixes, machine, memory_fixes, origin, released_frames, setup_fixes
from .advice import DEL_LEFTOVERS
from .diagnosis import Diagnosis, Section, classify, rebuild
from .kinds import (
    CUBLAS_DETERMINISM,
    CUDA_DRIVER_OOM,
    DEVICE_BUSY,
    DRIVER_MISMATCH,
    DRIVER_VERSIONS,
    FORKED_CUDA,
    GPU_TOO_OLD,
    INVALID_DEVICE,
    LATE_KERNEL_ERROR,
    LAUNCH_RESOURCES,
    MEMORY_IN_DISGUISE,
    MEMORY_KINDS,
    NO_GPU,
    NONDETERMINISTIC_OP,
    OUT_OF_MEMORY,
    STICKY_ERROR,
    STICKY_ERROR_ELSEWHERE,
)
from .machine import arch_supports, driver_facts, gpu_processes, torch_arch_list

# ---------------------------------------------------------------- facts from this process


def _context_usable() -> bool:
    torch = torch_support.loaded()
    return (
        torch is not None
        and cuda_health.broken_reason() is None
        and torch_support.cuda_initialized(torch)
    )


def _leftover_holders(namespace: Optional[dict], device: Optional[str], limit: int = 5) -> Any:
    """The biggest holders of leftover arrays, by the variable (or hidden holder: output
    history, a traceback) that holds them, from colab_gpu_guard.leftovers when present."""
    from ..cells.notebook_leftovers import find_leftovers

    try:
        found = find_leftovers(device=device, namespace=namespace, budget_s=2.0)
        groups = found.groups() if found else []
    except Exception:  # the scan meets every user object: advice without holders
        return None
    return list(groups[:limit])  # hidden holders first, then the biggest


def _describe_holder(group: Any) -> str:
    """'Out[3] 4 MiB (output history: 1 array on cuda:0; %gpu_reset releases it)'."""
    text = f"{group.name} {format_bytes(group.nbytes)} ({group.describe()}"
    if group.released_by_reset:
        text += "; %gpu_reset releases it"
    return text + ")"


def _enrich(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Add facts learned from this process. Each part is guarded on its own."""
    for enrich in _ENRICHERS.get(diagnosis.kind, ()):
        try:
            enrich(diagnosis, namespace)
        except Exception:  # torch, NVML or user objects: one failing leaves the rest
            continue


def _enrich_oom(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    is_torch_cuda = diagnosis.details.get("framework") in (None, "torch")
    holders = _leftover_holders(namespace, "cuda" if is_torch_cuda else None)
    if holders:
        diagnosis.facts["biggest leftovers"] = "; ".join(_describe_holder(h) for h in holders)
        resets = memory_fixes.RESET_FIXES.values()
        if diagnosis.fixes and diagnosis.fixes[0] in resets:
            diagnosis.fixes[0] += DEL_LEFTOVERS
    if is_torch_cuda:
        _rerun_leaks_on_cuda(diagnosis, namespace)
    if is_torch_cuda and _context_usable():
        torch = torch_support.loaded()
        device = diagnosis.details.get("device", 0)
        for stats in torch_support.allocator_stats(torch):
            if stats.device == device:
                diagnosis.facts["allocated now"] = (
                    f"{format_bytes(stats.allocated)} by tensors, "
                    f"{format_bytes(stats.reserved)} reserved by PyTorch on cuda:{device}"
                )


def _rerun_leaks_on_cuda(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """The cells of this notebook that kept CUDA memory again each time they were rerun,
    and what holds it (the tracker's judgement): the commonest cause of an out-of-memory
    error on a cell's second run."""
    from .. import notebook_refs
    from ..cells import past_leaks, tracker

    shell, user_ns = notebook_refs.resolve_namespace(None, namespace)
    if shell is None:
        return
    leaks = [r for r in tracker.rerun_leaks(tracker.memory_history(shell)) if "cuda" in r.leak_kind]
    if not leaks:
        return
    diagnosis.facts["kept again on rerun"] = "; ".join(
        f"{cells} held by {holder}" if holder else cells
        for cells, holder in past_leaks.holders_now(leaks, shell, user_ns)
    )
    diagnosis.fixes.insert(
        0,
        "A cell you rerun keeps GPU memory again each time (`kept again on rerun` above): "
        "what holds its earlier results is named there. Output history and tracebacks: "
        "`%gpu_reset` releases them. A list it fills: keep numbers (`loss.item()`) or "
        "`.detach()`ed tensors in it, and `del` or clear it before running the cell again.",
    )


def _enrich_forked(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    import multiprocessing

    method = multiprocessing.get_start_method(allow_none=True)
    diagnosis.facts["start method"] = (
        method or f"not chosen yet (the default here is {origin.default_start_method()})"
    )
    torch = torch_support.loaded()
    if torch is not None:
        initialised = torch_support.cuda_initialized(torch)
        diagnosis.facts["CUDA initialised here"] = "yes" if initialised else "no"


def _enrich_cublas(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    value = os.environ.get("CUBLAS_WORKSPACE_CONFIG")
    diagnosis.facts["CUBLAS_WORKSPACE_CONFIG"] = repr(value) if value is not None else "unset"
    accepted = determinism.CUBLAS_DETERMINISTIC_CONFIGS
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        requirement = determinism.cublas_requirement(torch)
        needed = {True: "needs it", False: "does not need it", None: "unknown"}[requirement.needed]
        diagnosis.facts["this torch"] = f"{needed} ({requirement.evidence})"
        if requirement.needed is False:
            diagnosis.summary += (
                " The torch in this kernel has no such check, so this error did not come "
                "from it: look for a subprocess or worker running an older torch; its "
                "environment needs the variable."
            )
            # restarting this kernel or %seed_all here changes nothing for that process
            diagnosis.fixes = [
                "Set the variable in this kernel before launching the subprocess or workers "
                "(they inherit this kernel's environment): "
                "`os.environ['CUBLAS_WORKSPACE_CONFIG'] = ':4096:8'`; a process already "
                "running keeps the value it read.",
                "Or, in the code that process runs, "
                "`torch.use_deterministic_algorithms(True, warn_only=True)`: ops that cannot "
                "be deterministic warn instead of raising.",
                "Or upgrade torch where that process runs: torch 2.10 and later no longer "
                "check the variable (pytorch/pytorch#161749).",
            ]
    if value is not None and value not in accepted:
        diagnosis.fixes.insert(
            0,
            f"CUBLAS_WORKSPACE_CONFIG is {value!r}, which cuBLAS does not accept for "
            f"determinism: it must be {' or '.join(accepted)}, set before the first cuBLAS "
            "matmul of the process.",
        )


def _enrich_nondet(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    torch = torch_support.loaded()
    if torch is not None:
        diagnosis.facts["torch"] = torch_support.version()
        flags = determinism.read_flags(torch)
        diagnosis.facts["deterministic mode"] = f"{flags.algorithms} (warn_only={flags.warn_only})"
        if flags.algorithms is False:
            diagnosis.summary += (
                " Deterministic mode is off in this kernel now: it was switched off after the "
                "error, or the error came from another process."
            )


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


def _enrich_driver_versions(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
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


def _enrich_processes(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    processes = gpu_processes()
    if processes is None:
        diagnosis.facts["GPU processes"] = "NVML not available here (check `!nvidia-smi`)"
        return
    own = os.getpid()
    others = [p for p in processes if p.pid != own]
    mine = [p for p in processes if p.pid == own]
    diagnosis.details["gpu_processes"] = [asdict(p) for p in processes]
    if others and not mine and _has_cuda_context():
        # A PID namespace (a container): NVML lists host PIDs, so this kernel is one of
        # them, and a host PID looked up here names another process or none.
        diagnosis.facts["GPU processes"] = "; ".join(
            f"pid {p.pid} on GPU {p.device} ({format_bytes(p.used_bytes)})" for p in others
        )
        diagnosis.notes.append(
            "NVML lists no process with this kernel's PID: inside a container it reports "
            "the host's PIDs, so this kernel is one of the GPU processes listed (their names "
            "are left out: looked up here, those PIDs name other processes)."
        )
        return
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


def _has_cuda_context() -> bool:
    try:
        return bool(torch_support.devices_with_context(torch_support.loaded()))
    except AttributeError:  # a torch-like module without torch._C
        return False


def _enrich_gpu_memory(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Each GPU's memory as NVML sees it (no CUDA call): shows whether the GPU is full."""
    for device in machine.gpu_memory():
        used, total = device["used"], device["total"]
        diagnosis.facts[f"GPU {device['index']} memory in use"] = (
            f"{format_bytes(used)} of {format_bytes(total)}"
        )


def _enrich_driver_oom(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Tell the two causes of 'CUDA error: out of memory' apart where this process can: had
    CUDA started here when it failed? Yes if this kernel's torch had started it
    (torch.cuda.is_initialized, no CUDA call) or NVML lists this process on a GPU."""
    if diagnosis.details.get("child") or diagnosis.details.get("framework") not in (
        None,
        "torch",
    ):
        return  # another process's or framework's error: this kernel's state says nothing
    torch = torch_support.loaded()
    by_torch = torch is not None and bool(torch_support.cuda_initialized(torch))
    processes = gpu_processes()
    listed = processes is not None and any(p.pid == os.getpid() for p in processes)
    if torch is None and processes is None:
        return  # neither torch nor NVML can say: both causes stand
    started = by_torch or listed
    diagnosis.details["cuda_started_here"] = started
    advice = memory_fixes.driver_oom(diagnosis.details)
    diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)
    diagnosis.facts["CUDA started in this kernel"] = (
        ("yes (PyTorch)" if by_torch else "yes (NVML lists this process on a GPU)")
        if started
        else "no"
    )


def _enrich_devices(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
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


def _enrich_compute_mode(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """The compute mode of each GPU (NVML) tells the causes of 'busy or unavailable' apart:
    exclusive (one process at a time), prohibited (none), or default (neither: the GPU or
    its driver is at fault)."""
    modes = machine.compute_modes()
    for index, mode in modes:
        diagnosis.facts[f"GPU {index} compute mode"] = mode
    advice = setup_fixes.device_busy(diagnosis.details, [mode for _, mode in modes])
    diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)


def _enrich_capability(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    _gpu_capabilities(diagnosis)


def _gpu_capabilities(diagnosis: Diagnosis) -> list[tuple[int, int]]:
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


def _enrich_engine(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """cuDNN found no engine: this machine's GPUs tell whether bfloat16 is native here."""
    if diagnosis.details.get("also") == "engine":
        capabilities = _gpu_capabilities(diagnosis)
        if capabilities:
            diagnosis.details["capabilities"] = capabilities
            advice = memory_fixes.memory_in_disguise(diagnosis.details)
            diagnosis.summary, diagnosis.fixes = advice.summary, list(advice.fixes)


def _enrich_no_gpu(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
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


def _enrich_traced(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """Where the failing cell was traced (`%%gpu_trace`, `%gpu_trace on`): the lines whose
    memory was alive when CUDA ran out, from the allocator's out-of-memory observer (kept
    for the failure that surfaced, handed out once)."""
    from ..trace.oom import at_failure  # the trace room, at an out-of-memory only
    from ..trace.views import place

    found = at_failure(disguised=diagnosis.kind == MEMORY_IN_DISGUISE)
    if found is None or not found.lines:
        return
    lines = [f"{format_bytes(line.nbytes)} from `{place(line.where)}`" for line in found.lines]
    diagnosis.sections.append(Section(TRACED_TITLE, lines))


TRACED_TITLE = "memory alive at the failure, by line (traced)"

_ENRICHERS: dict[str, tuple[Callable[[Diagnosis, Optional[dict]], None], ...]] = {
    OUT_OF_MEMORY: (_enrich_oom, _enrich_traced),
    MEMORY_IN_DISGUISE: (_enrich_engine, _enrich_oom, _enrich_gpu_memory, _enrich_traced),
    CUDA_DRIVER_OOM: (_enrich_driver_oom, _enrich_processes, _enrich_oom),
    STICKY_ERROR: (origin.enrich_sticky,),
    STICKY_ERROR_ELSEWHERE: (origin.enrich_elsewhere,),
    LATE_KERNEL_ERROR: (_enrich_driver,),
    INVALID_DEVICE: (_enrich_devices,),
    DEVICE_BUSY: (_enrich_compute_mode, _enrich_processes),
    FORKED_CUDA: (_enrich_forked,),
    CUBLAS_DETERMINISM: (_enrich_cublas,),
    NONDETERMINISTIC_OP: (_enrich_nondet,),
    DRIVER_MISMATCH: (_enrich_driver,),
    DRIVER_VERSIONS: (_enrich_driver_versions,),
    GPU_TOO_OLD: (_enrich_capability,),
    LAUNCH_RESOURCES: (_enrich_capability,),  # the GPU's name, for the report
    NO_GPU: (_enrich_no_gpu,),
}
# A kind left out has nothing this process can add (device mismatch, a generator's device,
# NCCL, stream capture and library setup are told by the message alone). Another room's
# facts join a kind here, as the memory trace's lines alive at the failure do (a Section of
# the answer).


# ---------------------------------------------------------------- advise (public)


def advise(
    exc: BaseException,
    *,
    release_frames: bool = False,
    namespace: Optional[dict] = None,
) -> Optional[Diagnosis]:
    """Diagnose a CUDA error: the cause, the facts that show it, and what to do.

    Returns None for anything that is not a recognised CUDA error. Side effects: a sticky
    error raised by this process's own CUDA call marks the CUDA context broken (see
    cuda_health); one carried from a child process, or seen while PyTorch never started
    CUDA here, does not, and is advised as another process's error; with `release_frames`, an
    out-of-memory error's traceback frames are cleared so the tensors they held are freed
    (the exception's traceback then shows no local variables; not done when the
    out-of-memory error is only the implicit __context__ of another error, whose frames stay
    for %debug), and a note names the function frames cleared and the bytes of arrays that
    freed (`released_frames`). `namespace` is where to look for leftover tensors by name (a
    notebook's user namespace). Never raises.
    """
    try:
        diagnosis = classify(exc)
        if diagnosis is None:
            return None
        if diagnosis.kind == STICKY_ERROR and not origin.own_sticky_error(diagnosis):
            diagnosis = rebuild(diagnosis, origin="not started here")
    except Exception:  # a user's exception (see classify): the advice never raises
        return None
    try:
        # An out-of-memory error met only as the implicit context of another error (say, a
        # KeyError while handling it) is reported, but that error's frames stay for %debug.
        if (
            release_frames
            and diagnosis.kind in MEMORY_KINDS
            and diagnosis.details.get("found_in") != "context"
        ):
            release = released_frames.release_frames(exc)
            diagnosis.frames_released = len(release.functions)
            diagnosis.frames_released_bytes = release.freed_bytes
            note = release.note()
            if note:
                diagnosis.notes.append(note)
    except Exception:  # torch and user frames: the advice shows without the release
        pass
    with contextlib.suppress(Exception):  # torch, NVML, user objects: the last net
        _enrich(diagnosis, namespace)
    child = diagnosis.details.get("child")
    if child and diagnosis.kind != STICKY_ERROR_ELSEWHERE:
        figures = (
            ": the figures in its message are that process's"
            if (diagnosis.kind in MEMORY_KINDS)
            else ""
        )
        diagnosis.notes.append(f"Raised in {child} and raised again here{figures}.")
    return diagnosis
