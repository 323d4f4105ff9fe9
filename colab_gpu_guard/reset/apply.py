"""``gpu_reset``: release what a notebook keeps alive behind the user's back, then report
what was freed and what is still held, by name.

In order:

1. Drop the references IPython and Python keep without the user's knowledge:
   - output history entries that hold arrays (or containers of them): ``Out``/``_oh`` (one
     dict), the ``_N`` names in ``user_ns`` *and* ``user_ns_hidden`` (IPython pushes them
     into both), ``_``/``__``/``___`` in ``user_ns``, in ``user_ns_hidden`` and on the
     displayhook. ``displayhook.flush()`` is not used: it drops every entry (plain outputs
     too), and it blanks ``_``/``__``/``___`` in ``user_ns`` and on the displayhook but
     leaves them in ``user_ns_hidden``, which still keeps the objects alive. So after the
     user's own ``%reset -f out`` (or ``_ = ...``) the last outputs live on only there,
     named ``<user_ns_hidden['_']>`` &c.: those are dropped too, and set back so that
     IPython updates ``_`` again (IPython 9 stops updating it after such a reset).
   - ``shell.last_execution_result.result`` (when it holds arrays), ``.error_in_exec`` and
     ``.error_before_exec``;
   - ``sys.last_type``, ``sys.last_value``, ``sys.last_traceback``, ``sys.last_exc`` (3.12+);
   - ``shell.InteractiveTB.tb`` and the post-mortem debugger's frames (``%debug``/``%pdb``);
   - the frames on those exceptions' tracebacks, and on every exception chained to them via
     ``__context__``/``__cause__``: each frame is cleared (``frame.clear()``), and on Python
     < 3.13 its ``f_locals`` snapshot is emptied too, because ``frame.clear()`` leaves that
     dict (created by any earlier ``f_locals`` access, e.g. by a verbose traceback) holding
     the locals (CPython gh-113939, fixed in 3.13); then each traceback is cut
     (``tb_next = None``) and the exceptions' ``__traceback__``/``__context__``/
     ``__cause__`` links are dropped. Frames still executing are left alone.
2. Named user variables: only those named, or with ``all_vars`` every user variable that
   holds accelerator memory (torch/CuPy/JAX arrays on a GPU; CPU torch/JAX tensors when no
   accelerator is visible). NumPy arrays never count as accelerator memory.
3. ``gc.collect()``, then for each framework imported: torch: synchronise (bounded, in a
   helper thread), ``cuda.empty_cache()``, ``cuda.ipc_collect()``; MPS ``empty_cache``;
   CuPy's default pools ``free_all_blocks()``; ``jax.clear_caches()``.
   Only devices that already have a CUDA context are synchronised. A synchronise that
   outlasts its time means the GPU is busy with queued work: the cache is then left alone
   (emptying it would wait for that work) and the report says to run %gpu_reset again. A
   CUDA error raised by the synchronise itself is a broken context (sticky error): the CUDA
   steps are skipped and the report says the runtime must be restarted. In a process forked
   after CUDA started, CUDA cannot be used and the report says so.
   After ``gc.collect()`` and before the torch steps, when ``torch._dynamo`` is imported and
   has compiled something: ``torch._dynamo.reset()`` and the CUDA-graph trees, then
   ``gc.collect()`` again, for the graphs, guards and CUDA-graph pools torch.compile keeps
   after the model is gone (``frameworks/torch_compile``; the step says what that freed,
   and that compiled code compiles again on its next call).
4. The report: per device allocated/reserved before and after (torch), NVML used before and
   after, bytes freed, what was dropped by kind, and the leftovers still alive.

One scan of the notebook plans the drop; its weakrefs prove what was released. What is
still held is read off that same scan (`leftovers.dropping`) where a second walk would find
exactly the same: the scan was complete, no root kept met a container a dropped root had
reached first, no autograd graph is measured against a dropped name, the roots afterwards
are the scan's less the dropped ones (same objects), the drop changed no container the walk
went into, and every reference kept is still alive. Otherwise (a finalizer freed or added
something, a variable holds the namespace, ...) the notebook is walked again.

Everything is validated before anything changes: an unknown name, or names together with
``all_vars``, raises ValueError and nothing is touched.
"""

from __future__ import annotations

import gc
import itertools
from typing import Any, Optional

from .. import cuda_health, host_memory, notebook_refs, nvml
from ..cells import failed_runs, past_leaks
from ..cells.notebook_leftovers import find_leftovers, scan
from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import torch as torch_support
from ..frameworks import torch_compile
from ..leftovers import Scan, dropping
from ..leftovers.found import ROW_FRAMEWORK
from ..leftovers.scan import COMPILED_GRAPH
from ..units import format_bytes
from .report import HOST_LINE_MIN, DeviceRelease, ReleaseReport

SYNC_TIMEOUT_S = 5.0
# each leftovers scan: the plan's, and (where the plan's cannot say) what is still held
SCAN_BUDGET_S = 10.0
BUSY_WARNING = (
    "the GPU is still running CUDA work queued by the last cell ({detail}), so the cached "
    "memory was not emptied; run %gpu_reset again when that work finishes"
)


def _validate(names: tuple, all_vars: object, dry_run: object, namespace: dict, shell) -> None:
    if not isinstance(all_vars, bool):
        raise TypeError("all_vars must be True or False")
    if not isinstance(dry_run, bool):
        raise TypeError("dry_run must be True or False")
    if all_vars and names:
        raise ValueError(
            "give either variable names or --all (every variable holding accelerator "
            "memory), not both"
        )
    bad = [name for name in names if not isinstance(name, str) or not name.isidentifier()]
    if bad:
        raise ValueError(f"not a variable name: {', '.join(repr(name) for name in bad)}")
    unknown = [name for name in names if name not in namespace]
    if unknown:
        raise ValueError(f"no such variable: {', '.join(unknown)} (nothing was changed)")
    own = notebook_refs.ipython_names(shell, namespace, names)
    if own:
        raise ValueError(
            f"{', '.join(own)}: IPython's own name(s), not user variables; %gpu_reset "
            "already drops output history that holds arrays (nothing was changed)"
        )
    if len(set(names)) != len(names):
        raise ValueError("a variable is named twice")


def _accelerator_visible() -> bool:
    if torch_support.has_accelerator():
        return True
    return cupy_support.loaded() is not None and cupy_support.device_count() > 0


def _variables_holding_accelerator_memory(found: Scan) -> list[str]:
    accelerator = _accelerator_visible()

    def counts(device: str, framework: Optional[str]) -> bool:
        return not device.startswith("cpu") or (not accelerator and framework in ("torch", "jax"))

    walker = found.walker
    frameworks = map(ROW_FRAMEWORK, walker.found.rows)
    places = list(zip(walker.found.devices, frameworks))
    wanted = {place for place in set(places) if counts(*place)}
    keys = set(itertools.compress(found.keys, map(wanted.__contains__, places)))
    keys.update(
        key for key, saved in walker.graphs.saved.items() if counts(saved.info.device, "torch")
    )
    chosen = [
        root.key
        for root, reached in found.reach_by_root().items()
        if root.kind == notebook_refs.VARIABLE and not keys.isdisjoint(reached)
    ]
    return sorted(chosen)


def _build_plan(found: Scan, shell, namespace: dict, names: tuple, all_vars: bool):
    holding = found.reach.holding()
    variables = _variables_holding_accelerator_memory(found) if all_vars else list(names)
    plan = notebook_refs.plan_drop(shell, namespace, holding, variables)
    plan.roots.update(root for root in holding if root.kind == COMPILED_GRAPH)  # dynamo's reset
    return plan


# ---------------------------------------------------------------- caches and figures


def _device_figures(torch) -> list[tuple[str, int, int]]:
    if torch is None:
        return []
    try:
        return [
            (f"cuda:{stats.device}", stats.allocated, stats.reserved)
            for stats in torch_support.allocator_stats(torch)
        ]
    except Exception:
        return []


def _reset_compiled(report: ReleaseReport, torch, namespace: dict) -> None:
    """torch.compile's caches, when dynamo is imported and has compiled something: reset,
    reported as a step with what that freed (before the CUDA cache is emptied, so the
    freed blocks are returned too)."""
    try:
        done = torch_compile.reset_caches(torch, namespace, not cuda_health.health().broken)
    except Exception as error:
        report.warnings.append(f"torch._dynamo.reset() failed: {type(error).__name__}: {error}")
        return
    if done is not None:
        report.steps.append(str(done))


def _figures_after(report: ReleaseReport, before: list, torch) -> None:
    """Each device's allocator figures before and now, and NVML's used memory now."""
    after = dict((name, (alloc, res)) for name, alloc, res in _device_figures(torch))
    for name, alloc, res in before:
        now = after.get(name)
        report.devices.append(
            DeviceRelease(name, alloc, res, now[0] if now else None, now[1] if now else None)
        )
    for name, (alloc, res) in after.items():
        if not any(device.device == name for device in report.devices):
            report.devices.append(DeviceRelease(name, 0, 0, alloc, res))
    if report.nvml_used_before is not None:
        used = nvml.used_memory()
        report.nvml_used_after = None if used is None else list(used.per_device)


def _release_caches(report: ReleaseReport, torch) -> None:
    busy = False
    if torch is not None:
        try:
            report.steps += torch_support.release_other_caches(torch)
        except Exception as error:
            report.warnings.append(f"torch MPS cache: {type(error).__name__}: {error}")
        busy = _release_torch_cuda(report, torch)
    for name, release in (
        ("CuPy", cupy_support.release_caches),
        ("JAX", jax_support.release_caches),
    ):
        if busy and name == "CuPy":  # freeing device memory would wait for the queued work
            report.notes.append("CuPy's memory pools were not emptied either (the GPU is busy)")
            continue
        try:
            report.steps += release()
        except Exception as error:
            report.warnings.append(f"{name}: {type(error).__name__}: {error}")


def _release_torch_cuda(report: ReleaseReport, torch) -> bool:
    """Synchronise (bounded), then empty torch's CUDA cache; say why not when it cannot.
    Returns whether the GPU was still busy."""
    health = cuda_health.health(probe=True, timeout=SYNC_TIMEOUT_S)
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
        except Exception as error:
            report.warnings.append(
                f"emptying torch's CUDA cache failed: {type(error).__name__}: {error}"
            )
    return health.busy


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
    all_vars: instead, delete every user variable that holds accelerator memory (CPU
        torch/JAX tensors when no accelerator is visible); never combined with names.
    dry_run: change nothing; report what would be dropped and about how much would be freed.
    shell: the IPython shell (default: the running one, if any); namespace: the variables'
        dict when there is no shell (default: ``__main__``'s globals).

    Raises ValueError (nothing changed) for an unknown or invalid name, or names with
    all_vars. See the module docstring for the exact steps.
    """
    shell, namespace = notebook_refs.resolve_namespace(shell, namespace)
    _validate(names, all_vars, dry_run, namespace, shell)
    # gc.collect() below is the one pass of the cyclic collector over the scan's records
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _reset(names, all_vars, dry_run, shell, namespace)
    finally:
        if collecting:
            gc.enable()


def _reset(names: tuple, all_vars: bool, dry_run: bool, shell, namespace: dict) -> ReleaseReport:
    report = ReleaseReport(dry_run=dry_run, names=list(names), all_vars=all_vars)
    torch = torch_support.loaded()
    health = cuda_health.health()
    report.cuda_state = health.state
    before = _device_figures(torch)  # host-side allocator bookkeeping: no CUDA call
    used = nvml.used_memory()  # the v2 memory call, else v1: the call is reported
    if used is not None:
        report.nvml_used_before = list(used.per_device)
        report.nvml_used_call = used.call

    found = scan(namespace=namespace, shell=shell, keep_refs=not dry_run, budget_s=SCAN_BUDGET_S)
    if not found.complete:
        report.warnings.append(
            f"the scan stopped at its {SCAN_BUDGET_S:g} s budget; what it did not reach is "
            f"neither counted nor released; not searched to the end: " + "; ".join(found.unfinished)
        )
    # what the graphs' figures leave out (a pack hook's values, the node budget): the
    # expected and released bytes are lower bounds then
    report.notes += found.walker.graphs.notes()
    plan = _build_plan(found, shell, namespace, names, all_vars)
    report.dropped = plan.counts()
    report.dropped_names = plan.names()
    dropped = set(plan.roots)
    freed_keys = found.reach.only_through(dropped)
    report.estimated_bytes = dropping.nbytes(found, freed_keys)
    named = [notebook_refs.RootKey(notebook_refs.VARIABLE, name) for name in names]
    _held_elsewhere_notes(report, dropping.held_elsewhere(found, named, dropped, freed_keys))

    if dry_run:
        report.devices = [DeviceRelease(name, alloc, res) for name, alloc, res in before]
        seen = set(found.keys)
        staying = dropping.would_stay(found, dropped)
        if staying is None:  # walked again, as the drop would leave the notebook
            del found
            staying = scan(
                namespace=namespace, shell=shell, budget_s=SCAN_BUDGET_S, without=dropped
            ).leftovers
        report.leftovers = staying
        _dry_run_notes(report, health)
        failures = failed_runs.dry_run_note(shell, seen)
        if failures is not None:
            report.notes.append(failures)
        _add_history_notes(report, shell, namespace)
        return report

    # what the drop changes: a walk that went into it would not find the same again
    reusable = not dropping.walked_any(found, plan.changes(shell, namespace))
    # a storage proves its memory went: the tensor objects the scan saw may die while an
    # unseen alias or a graph's saved copy keeps it (every block a dropped root reaches)
    proofs = dropping.storage_proofs(found, found.reach.keys_reached(dropped))
    host = host_memory.MallocInUse()
    report.host_in_use_before = host.read()
    done = plan.apply(shell, namespace)
    report.dropped["traceback frames"] = done.frames_cleared
    report.warnings += done.warnings
    report.notes += done.notes
    del plan
    report.gc_collected = gc.collect()
    failed_runs.collected()
    _reset_compiled(report, torch, namespace)
    _release_caches(report, torch)
    report.host_in_use_after = host.read()

    now = dropping.states(found)  # which arrays the scan saw are gone: their weakrefs
    staying = dropping.alive(proofs)  # the storage lives on
    del proofs
    gone = dropping.released(found, now) - staying
    report.released_bytes = dropping.nbytes(found, gone)
    _unseen_holder_note(report, dropping.nbytes(found, staying & freed_keys))
    _host_beyond_note(report, found, gone)
    _figures_after(report, before, torch)
    held = None
    if reusable and dropping.same_roots(found, dropped, shell, namespace):
        held = dropping.still_held(found, dropped, now)
    del now
    dropping.forget_weakrefs(found)  # their work is done: the report keeps none of them
    if held is not None:
        report.leftovers = held
    else:
        del found  # a second walk: the plan's scan cannot say what is still held
        after_scan = find_leftovers(namespace=namespace, shell=shell, budget_s=SCAN_BUDGET_S)
        report.leftovers = after_scan
        if not after_scan.complete:
            report.notes.append(
                "still held: the list is what was found in "
                f"{SCAN_BUDGET_S:g} s; not searched to the end: " + "; ".join(after_scan.unfinished)
            )
    if report.dropped.get("exceptions"):
        report.notes.append("the last exception is gone: %debug and %tb have nothing to show")
    _add_history_notes(report, shell, namespace)
    return report


def _host_beyond_note(report: ReleaseReport, found: Scan, gone: set) -> None:
    """Where host memory in use fell by more than the host arrays the scan saw released:
    what else went (the arrays of reference cycles no name reaches are found by no scan)."""
    if report.host_line() is None:  # no fall worth a line, or no malloc figures
        return
    before, after = report.host_in_use_before or 0, report.host_in_use_after or 0
    devices = found.walker.found.devices
    on_host = {key for key, device in zip(found.keys, devices) if key in gone and device == "cpu"}
    beyond = (before - after) - dropping.nbytes(found, on_host)
    if beyond >= HOST_LINE_MIN:
        report.notes.append(
            f"host memory in use fell by {format_bytes(before - after)}, "
            f"{format_bytes(beyond)} more than the arrays found: gc.collect() and the dropped "
            "references freed more than the notebook's names reached (e.g. arrays in "
            "reference cycles, such as the frames of earlier failed runs)"
        )


def _unseen_holder_note(report: ReleaseReport, stays: int) -> None:
    """Memory the scan said only the dropped names held, whose storage lives on."""
    if stays:
        report.notes.append(
            f"{format_bytes(stays)} expected to be freed is still in use: something outside "
            "the notebook's variables holds it (a module's global, a C extension's cache, "
            "another thread): delete that reference, or restart the kernel, to free it"
        )


def _held_elsewhere_notes(report: ReleaseReport, stays: list[tuple]) -> None:
    """Why deleting a variable the user named frees less than it holds: who else holds it."""
    verb = "would stay" if report.dry_run else "stays"
    for label, amount, holders in stays:
        shown = ", ".join(
            holder if holder.startswith("<") else f"`{holder}`" for holder in holders[:5]
        )
        more = f" (+{len(holders) - 5} more)" if len(holders) > 5 else ""
        where = f": still held by {shown}{more}" if holders else ""
        report.notes.append(
            f"`{label}`: {format_bytes(amount)} of its memory {verb}{where} (they keep it "
            "alive: delete them too to free it)"
        )


def _dry_run_notes(report: ReleaseReport, health) -> None:
    if health.broken:
        report.restart_required = True
        report.warnings.append(f"{health.detail}; {cuda_health.RESTART_ADVICE}")
    elif health.busy:
        report.notes.append(
            f"the GPU is still running CUDA work queued by the last cell ({health.detail});"
            f" %gpu_reset waits up to {SYNC_TIMEOUT_S:g} s for it before emptying the cache"
        )
    elif health.state == cuda_health.FORKED:
        report.notes.append(f"no CUDA cache to empty: {health.detail}")
    frames = len(torch_compile.compiled_codes())
    if frames:
        report.notes.append(
            f"would run torch._dynamo.reset(): {frames} compiled frame(s); "
            f"{torch_compile.RECOMPILE_NOTE}"
        )


def _add_history_notes(report: ReleaseReport, shell: Any, namespace: dict) -> None:
    note = past_leaks.history_note(shell, namespace, report.dry_run)
    if note is not None:
        report.notes.append(note)
