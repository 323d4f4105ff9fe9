"""``gpu_reset``: carry out a reset's plan (`plan.make_plan`): drop what the notebook keeps
alive behind the user's back, collect garbage, empty the frameworks' caches, then report
what was freed and what is still held, by name. The steps and why: docs/reset.md."""

from __future__ import annotations

import gc
from typing import Any, Optional

from .. import cuda_health, host_memory, notebook_refs, nvml
from ..cells import failed_runs
from ..cells.notebook_leftovers import find_leftovers
from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import torch as torch_support
from ..frameworks import torch_compile
from ..leftovers import Scan, dropping
from ..units import format_bytes, unavailable
from .plan import DeviceFigures, ResetPlan, add_history_note, describe, device_figures, make_plan
from .report import HOST_LINE_MIN, DeviceRelease, ReleaseReport

BUSY_WARNING = (
    "the GPU is still running CUDA work queued by the last cell ({detail}), so the cached "
    "memory was not emptied; run %gpu_reset again when that work finishes"
)


# ---------------------------------------------------------------- the API


def gpu_reset(
    *names: str,
    all_vars: bool = False,
    dry_run: bool = False,
    shell: Any = None,
    namespace: Optional[dict] = None,
) -> ReleaseReport:
    """Release what the notebook keeps alive, delete the named variables, empty the
    framework caches, and report what was freed and what is still held.

    names: user variables to delete (only these; none by default).
    all_vars: instead, delete every user variable that holds accelerator memory (none
        on a CPU-only runtime: the report says so); never combined with names.
    dry_run: change nothing; report what would be dropped and about how much would be freed.
    shell: the IPython shell (default: the running one, if any); namespace: the variables'
        dict when there is no shell (default: ``__main__``'s globals).

    Raises ValueError (nothing changed) for an unknown or invalid name, IPython's or
    Python's own name (``Out``, ``__name__``), or names with all_vars. See docs/reset.md
    for the exact steps.
    """
    shell, namespace = notebook_refs.resolve_namespace(shell, namespace)
    # gc.collect() in `apply` is the one pass of the cyclic collector over the scan's records
    collecting = gc.isenabled()
    gc.disable()
    try:
        plan = make_plan(names, all_vars, dry_run, shell, namespace)  # validates first
        return describe(plan) if plan.dry_run else apply(plan)
    finally:
        if collecting:
            gc.enable()


def apply(plan: ResetPlan) -> ReleaseReport:
    """Carry `plan` out and return its report, completed with what the reset did: the
    drop, gc.collect(), torch.compile's and the frameworks' caches, what was released
    (proven by weakrefs) and what is still held."""
    report, shell, namespace = plan.report, plan.shell, plan.namespace
    found, drop = plan.take()  # deleted below where what they reach must be free to go
    try:
        # what the drop changes: a walk that went into it would not find the same again
        reusable = not dropping.walked_any(found, drop.changes(shell, namespace))
        # the scan holds the arrays it found: a weakref to each the drop may free (the
        # others are held until the collection is done, and let go then)
        dropping.weaken(found, plan.dropped)
        # a storage proves its memory went: the tensor objects the scan saw may die while
        # an unseen alias or a graph's saved copy keeps it (every block a dropped root
        # reaches)
        proofs = dropping.storage_proofs(found, found.reach.keys_reached(plan.dropped))
        host = host_memory.MallocInUse()
        report.host_in_use_before = host.read()
        done = drop.apply(shell, namespace)
        report.dropped["traceback frames"] = done.frames_cleared
        report.warnings += done.warnings
        report.notes += done.notes
        del drop
        dropping.settle(found)  # an array held that the drop let go of goes before the collection
        report.gc_collected = gc.collect()
        failed_runs.collected()
        _reset_compiled(report, plan.torch, namespace)
        dropping.settle(found)
    finally:
        found.walker.found.let_go()  # the arrays still held are alive: a name keeps them
    _release_caches(report, plan.torch, plan.sync_timeout_s)
    report.host_in_use_after = host.read()

    now = dropping.states(found)  # which arrays the scan saw are gone: their weakrefs
    staying = dropping.alive(proofs)  # the storage lives on
    del proofs
    gone = dropping.released(found, now) - staying
    report.released_bytes = dropping.nbytes(found, gone)
    if gone:
        report.freed_frameworks = sorted(dropping.frameworks(found, gone))
    _unseen_holder_note(report, dropping.nbytes(found, staying & plan.freed_keys))
    _host_beyond_note(report, found, gone)
    _figures_after(report, plan.before, plan.torch)
    held = None
    if reusable and dropping.same_roots(found, plan.dropped, shell, namespace):
        held = dropping.still_held(found, plan.dropped, now)
    del now
    dropping.forget_weakrefs(found)  # their work is done: the report keeps none of them
    if held is not None:
        report.leftovers = held
    else:
        del found  # a second walk: the plan's scan cannot say what is still held
        budget = plan.scan_budget_s
        after_scan = find_leftovers(namespace=namespace, shell=shell, budget_s=budget)
        report.leftovers = after_scan
        if not after_scan.complete:
            report.notes.append(
                f"still held: the list is what was found in {budget:g} s; not searched to "
                "the end: " + "; ".join(after_scan.unfinished)
            )
    if report.dropped.get("exceptions"):
        report.notes.append("the last exception is gone: %debug and %tb have nothing to show")
    add_history_note(plan)
    return report


# ---------------------------------------------------------------- caches and figures


def _reset_compiled(report: ReleaseReport, torch, namespace: dict) -> None:
    """torch.compile's caches, when dynamo is imported and has compiled something: reset,
    reported as a step with what that freed (before the CUDA cache is emptied, so the
    freed blocks are returned too)."""
    try:
        done = torch_compile.reset_caches(torch, namespace, not cuda_health.health().broken)
    except Exception as error:  # torch._dynamo (a framework): the report says what failed
        report.warnings.append(unavailable(error, "torch._dynamo.reset() failed").reason)
        return
    if done is not None:
        report.steps.append(str(done))


def _figures_after(report: ReleaseReport, before: list[DeviceFigures], torch) -> None:
    """Each device's allocator figures before and now, and NVML's used memory now."""
    after = {figures.device: figures for figures in device_figures(torch)}
    for figures in before:
        now = after.get(figures.device)
        report.devices.append(
            DeviceRelease(
                *figures,
                allocated_after=None if now is None else now.allocated,
                reserved_after=None if now is None else now.reserved,
            )
        )
    for name, now in after.items():
        if not any(device.device == name for device in report.devices):
            report.devices.append(DeviceRelease(name, 0, 0, now.allocated, now.reserved))
    if report.nvml_used_before is not None:
        used = nvml.used_memory()
        report.nvml_used_after = None if used is None else list(used.per_device)


def _release_caches(report: ReleaseReport, torch, sync_timeout_s: float) -> None:
    busy = False
    if torch is not None:
        try:
            report.steps += torch_support.release_other_caches(torch)
        except Exception as error:  # torch's MPS allocator (a framework)
            report.warnings.append(unavailable(error, "torch MPS cache").reason)
        busy = _release_torch_cuda(report, torch, sync_timeout_s)
    for name, release in (
        ("CuPy", cupy_support.release_caches),
        ("JAX", jax_support.release_caches),
    ):
        if busy and name == "CuPy":  # freeing device memory would wait for the queued work
            report.notes.append("CuPy's memory pools were not emptied either (the GPU is busy)")
            continue
        try:
            report.steps += release()
        except Exception as error:  # CuPy's pools, JAX's caches (frameworks)
            report.warnings.append(unavailable(error, name).reason)


def _release_torch_cuda(report: ReleaseReport, torch, sync_timeout_s: float) -> bool:
    """Synchronise (bounded), then empty torch's CUDA cache; say why not when it cannot.
    Returns whether the GPU was still busy.

    Only devices that already have a CUDA context are synchronised. A synchronise that
    outlasts its time means the GPU is busy with queued work: the cache is then left alone
    (emptying it would wait for that work). A CUDA error raised by the synchronise itself
    is a broken context (a sticky error): the CUDA steps are skipped. In a process forked
    after CUDA started, CUDA cannot be used."""
    health = cuda_health.health(probe=True, timeout=sync_timeout_s)
    report.cuda_state = health.state
    if health.broken:
        report.restart_required = True
        report.warnings.append(f"CUDA steps skipped: {health.detail}; {cuda_health.RESTART_ADVICE}")
    elif health.busy:
        report.warnings.append(BUSY_WARNING.format(detail=health.detail))
    elif health.state == cuda_health.FORKED:
        report.notes.append(f"no CUDA cache to empty: {health.detail}")
    elif health.state == cuda_health.NOT_INITIALISED and torch_support.cpu_only_build(torch):
        report.notes.append(
            f"torch {torch_support.version()} is a CPU-only build: no CUDA cache to empty"
        )
    elif health.state == cuda_health.NOT_INITIALISED:
        report.notes.append("torch has not initialised CUDA: no CUDA cache to empty")
    elif health.state == cuda_health.OK:
        report.steps.append(f"torch.cuda.synchronize() on {cuda_health.synchronized_devices()}")
        try:
            report.steps += torch_support.release_cuda_caches(torch)
        except Exception as error:  # torch's CUDA allocator (a framework)
            report.warnings.append(unavailable(error, "emptying torch's CUDA cache failed").reason)
    return health.busy


# ---------------------------------------------------------------- what the figures say


def _host_beyond_note(report: ReleaseReport, found: Scan, gone: set) -> None:
    """Where host memory allocated fell by more than the host arrays the scan saw released:
    what else went (the arrays of reference cycles no name reaches are found by no scan)."""
    if report.host_line() is None:  # no fall worth a line, or no malloc figures
        return
    before, after = report.host_in_use_before or 0, report.host_in_use_after or 0
    beyond = (before - after) - dropping.nbytes(found, gone, "cpu")
    if beyond >= HOST_LINE_MIN:
        report.notes.append(
            f"host memory allocated fell by {format_bytes(before - after)}, "
            f"{format_bytes(beyond)} more than the arrays found: Python's garbage collector and "
            "the dropped references freed more than the notebook's names reached (e.g. arrays in "
            "reference cycles, such as the frames of earlier failed runs)"
        )


def _unseen_holder_note(report: ReleaseReport, stays: int) -> None:
    """Memory the scan said only the dropped names held, whose storage lives on."""
    if stays:
        report.notes.append(
            f"{format_bytes(stays)} expected to be freed is still in use: something outside "
            "the notebook's variables holds it (an installed package's global or cache, a C "
            "extension's, another thread): delete that reference, or restart the kernel, to "
            "free it"
        )
