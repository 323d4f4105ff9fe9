"""What a `gpu_reset` would drop, free and keep, worked out before anything changes: one
scan of the notebook, the roots to drop and the bytes only they reach. `apply` carries a
plan out; a dry run is the plan, described (`describe`). See docs/reset.md."""

from __future__ import annotations

import difflib
import itertools
import re
import weakref
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass
from functools import partial
from types import BuiltinFunctionType, FunctionType, MethodType, ModuleType
from typing import Any, NamedTuple, Optional

from .. import cuda_health, notebook_refs, nvml
from ..cells import failed_runs, past_leaks
from ..cells.notebook_leftovers import scan
from ..frameworks import torch as torch_support
from ..frameworks import torch_compile
from ..leftovers import Scan, dropping
from ..leftovers.found import HOLD
from ..leftovers.mapped_files import files_by, files_text
from ..leftovers.registries import FINALIZER, LOGGER, MODULE_GLOBAL, THREAD
from ..leftovers.root_refs import COMPILED_GRAPH
from ..leftovers.rows import ROW_ROOT
from ..units import counted, format_bytes
from .report import DeviceRelease, ReleaseReport

SYNC_TIMEOUT_S = 5.0
# the device names (`ArrayInfo.device`, before its ":N") whose arrays `--all` deletes: torch's
# CUDA (ROCm builds too), MPS and XPU; CuPy's; JAX's GPU (cuda, rocm; "gpu" on old JAX),
# Apple's METAL and TPU backends
ACCELERATOR_DEVICES = frozenset({"cuda", "rocm", "hip", "gpu", "mps", "xpu", "metal", "tpu"})
# each leftovers scan: the plan's, and (where the plan's cannot say) what is still held
SCAN_BUDGET_S = 10.0


class DeviceFigures(NamedTuple):
    """torch's caching allocator on one device (bytes)."""

    device: str
    allocated: int
    reserved: int


@dataclass
class ResetPlan:
    """A reset worked out, nothing changed yet.

    report: what is known before anything changes (what would be dropped, the bytes only
        that reaches, who else holds a named variable's memory, the figures before); it
        describes this plan, worded once from ``dry_run``.
    found: the plan's scan; drop: what to drop. Both hold what the reset frees: `take`
        hands them over, and the plan keeps no reference to them after.
    dropped: the keys of the roots dropped; freed_keys: the blocks only they reach.
    sync_timeout_s, scan_budget_s: read once, here, for the whole reset.
    """

    dry_run: bool
    shell: Any
    namespace: dict
    torch: Optional[ModuleType]
    health: cuda_health.ContextHealth
    before: list[DeviceFigures]
    report: ReleaseReport
    found: Optional[Scan]
    drop: Optional[notebook_refs.DropPlan]
    dropped: set[notebook_refs.RootKey]
    freed_keys: set
    sync_timeout_s: float
    scan_budget_s: float

    def take(self) -> tuple[Scan, notebook_refs.DropPlan]:
        """The scan and the drop, handed over once: whoever takes them lets go of them
        (``del``) where the memory they reach must be free to go."""
        found, drop = self.found, self.drop
        assert found is not None and drop is not None, "a plan is carried out once"
        self.found = self.drop = None
        return found, drop


# ---------------------------------------------------------------- the arguments


def validate(names: tuple, all_vars: object, dry_run: object, namespace: dict, shell) -> None:
    """Every argument checked before anything changes: raises TypeError or ValueError."""
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
    # `__name__`, `__builtins__`, ...: deleting one breaks the notebook quietly (an
    # `if __name__ == '__main__':` body no longer runs); never a user's variable to free
    dunders = [name for name in names if _is_dunder(name)]
    if dunders:
        one = len(dunders) == 1
        raise ValueError(
            f"{', '.join(dunders)}: Python's own {'name' if one else 'names'}, not "
            f"{'a variable' if one else 'variables'} of yours (nothing was changed)"
        )
    unknown = [name for name in names if name not in namespace]
    if unknown:
        shown = ", ".join(_with_guess(name, shell, namespace) for name in unknown)
        raise ValueError(f"no such variable: {shown} (nothing was changed)")
    own = notebook_refs.ipython_names(shell, namespace, names)
    if own:
        one = len(own) == 1
        raise ValueError(
            f"{', '.join(own)}: IPython's own {'name' if one else 'names'}, not "
            f"{'a user variable' if one else 'user variables'}; %gpu_reset already drops "
            "output history that holds arrays (nothing was changed)"
        )
    twice = [name for name, count in Counter(names).items() if count > 1]
    if twice:
        # refused rather than ignored: a name typed twice is often another name mistyped
        raise ValueError(
            f"{', '.join(twice)}: named more than once; give each variable once (nothing "
            "was changed)"
        )


def _with_guess(name: str, shell: Any, namespace: dict) -> str:
    """'val_loses (did you mean `val_losses`?)': the closest of the user's own variables
    (`difflib`), never IPython's hidden names (`_i3`, `Out`) or Python's (`__name__`)."""
    candidates = [
        other
        for other in namespace
        if isinstance(other, str) and other.isidentifier() and not _is_dunder(other)
    ]
    hidden = set(notebook_refs.ipython_names(shell, namespace, candidates))
    own = [other for other in candidates if other not in hidden and not _ipython_style(other)]
    close = difflib.get_close_matches(name, own, n=1)
    return f"{name} (did you mean `{close[0]}`?)" if close else name


def _ipython_style(name: str) -> bool:
    """`_`, `__`, `___`, `_7`, `_i`, `_ii`, `_i7`: the names IPython gives inputs and
    outputs, even where its hidden namespace no longer records them (after %reset out)."""
    return _IPYTHON_STYLE.fullmatch(name) is not None


_IPYTHON_STYLE = re.compile(r"_+|_i+|_i?\d+")


# ---------------------------------------------------------------- the plan


def make_plan(
    names: tuple, all_vars: bool, dry_run: bool, shell: Any, namespace: dict
) -> ResetPlan:
    """Validate the arguments, then scan the notebook once and work out the drop. Changes
    nothing; raises as `validate` does."""
    validate(names, all_vars, dry_run, namespace, shell)
    report = ReleaseReport(dry_run=dry_run, names=list(names), all_vars=all_vars)
    torch = torch_support.loaded()
    health = cuda_health.health()
    report.cuda_state = health.state
    before = device_figures(torch)  # host-side allocator bookkeeping: no CUDA call
    used = nvml.used_memory()  # the v2 memory call, else v1: the call is reported
    if used is not None:
        report.nvml_used_before = list(used.per_device)
        report.nvml_used_call = used.call

    budget = SCAN_BUDGET_S
    # a dry run proves nothing released: its scan keeps no weakrefs; the reset's holds the
    # arrays until it knows which the drop may free (`apply`)
    keep = False if dry_run else HOLD
    found = scan(namespace=namespace, shell=shell, keep_refs=keep, budget_s=budget)
    try:
        drop, dropped, freed_keys = _work_out(found, report, names, all_vars, shell, namespace)
    except BaseException:
        found.walker.found.let_go()  # never keep the arrays alive past a failed plan
        raise
    return ResetPlan(
        dry_run=dry_run,
        shell=shell,
        namespace=namespace,
        torch=torch,
        health=health,
        before=before,
        report=report,
        found=found,
        drop=drop,
        dropped=dropped,
        freed_keys=freed_keys,
        sync_timeout_s=SYNC_TIMEOUT_S,
        scan_budget_s=budget,
    )


def _work_out(
    found: Scan, report: ReleaseReport, names: tuple, all_vars: bool, shell: Any, namespace: dict
) -> tuple[notebook_refs.DropPlan, set, set]:
    """The drop, the roots it drops and the blocks only they reach, worked out from the
    notebook's scan (`found`), with what the report knows before anything changes."""
    budget = SCAN_BUDGET_S
    if not found.complete:
        report.warnings.append(
            f"the scan stopped at its {budget:g} s budget; what it did not reach is "
            f"neither counted nor released; not searched to the end: " + "; ".join(found.unfinished)
        )
    # what the graphs' figures leave out (a pack hook's values, the node budget): the
    # expected and released bytes are lower bounds then
    report.notes += found.walker.graphs.notes()
    drop = _plan_drop(found, shell, namespace, names, all_vars)
    if all_vars and not drop.variables:
        report.notes.append(report.wording.all_none)
    if found.complete:
        _no_array_note(report, namespace, names, found.reach.holding(), _mapped_files(found))
    report.dropped = drop.counts()
    report.dropped_names = drop.names()
    dropped = set(drop.roots)
    freed_keys = found.reach.only_through(dropped)
    report.estimated_bytes = dropping.nbytes(found, freed_keys)
    report.freed_frameworks = sorted(dropping.frameworks(found, freed_keys))
    named = [notebook_refs.RootKey(notebook_refs.VARIABLE, name) for name in names]
    _held_elsewhere_notes(report, dropping.held_elsewhere(found, named, dropped, freed_keys))
    _registry_notes(report, found)
    return drop, dropped, freed_keys


def holds_accelerator_memory(device: str) -> bool:
    """Whether an array on `device` (as `ArrayInfo.device` names it) lives in accelerator
    memory: CUDA/ROCm, MPS or XPU through torch, CuPy, JAX on a GPU (or TPU); a sharded
    JAX array names its first device. Host memory ("cpu"), "meta" and "unknown" do not."""
    return device.partition(":")[0].partition("+")[0].lower() in ACCELERATOR_DEVICES


def _variables_holding_accelerator_memory(found: Scan) -> list[str]:
    """``--all``: the user variables reaching arrays in accelerator memory; none on a
    CPU-only runtime (host tensors and arrays are deleted only by name)."""
    walker = found.walker
    devices = list(walker.found.devices)
    wanted = {device for device in set(devices) if holds_accelerator_memory(device)}
    keys = set(itertools.compress(found.keys, map(wanted.__contains__, devices)))
    keys.update(
        key
        for key, saved in walker.graphs.saved.items()
        if holds_accelerator_memory(saved.info.device)
    )
    chosen = [
        root.key
        for root, reached in found.reach_by_root().items()
        if root.kind == notebook_refs.VARIABLE and not keys.isdisjoint(reached)
    ]
    return sorted(chosen)


def _plan_drop(
    found: Scan, shell, namespace: dict, names: tuple, all_vars: bool
) -> notebook_refs.DropPlan:
    holding = found.reach.holding()
    variables = _variables_holding_accelerator_memory(found) if all_vars else list(names)
    drop = notebook_refs.plan_drop(shell, namespace, holding, variables)
    drop.roots.update(root for root in holding if root.kind == COMPILED_GRAPH)  # dynamo's reset
    return drop


def device_figures(torch: Optional[ModuleType]) -> list[DeviceFigures]:
    """Each CUDA device's allocator figures now; none without torch or its figures."""
    if torch is None:
        return []
    try:
        return [
            DeviceFigures(f"cuda:{stats.device}", stats.allocated, stats.reserved)
            for stats in torch_support.allocator_stats(torch)
        ]
    except Exception:  # torch's allocator (a framework): no figures is what the report shows
        return []


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _what_it_is(value: object) -> str:
    """' (a module)', ' (a function)', ' (a class)': what a name holding no array holds,
    where that is why (an import, a def); '' otherwise. By its type alone: no attribute
    of the user's object is read."""
    kind = type(value)
    if issubclass(kind, ModuleType):
        return " (a module)"
    if issubclass(kind, type):
        return " (a class)"
    if issubclass(kind, (FunctionType, BuiltinFunctionType, MethodType, partial)):
        return " (a function)"
    return ""


def _mapped_files(found: Scan) -> dict[Hashable, dict[str, int]]:
    """The roots (their keys) reaching arrays the scan left out as files mapped from disk:
    file -> bytes."""
    keys = found.reach.root_keys
    return files_by(
        found.walker.found.files.left_out, lambda row: keys.get(ROW_ROOT(row), ROW_ROOT(row))
    )


def _no_array_note(
    report: ReleaseReport, namespace: dict, names: tuple, holding, mapped: dict
) -> None:
    """The named variables that reach no tensor or array: deleted as asked, freeing
    nothing; the report says so rather than a bare "freed: 0 B". Those reaching only
    files mapped from disk (`mapped`: `_mapped_files`) are said to, with the files."""
    empty = [
        name for name in names if notebook_refs.RootKey(notebook_refs.VARIABLE, name) not in holding
    ]
    if not empty:
        return
    files = {
        name: mapped.get(notebook_refs.RootKey(notebook_refs.VARIABLE, name)) for name in empty
    }
    for template, chosen in (
        (report.wording.no_array, [name for name in empty if not files[name]]),
        (report.wording.only_mapped, [name for name in empty if files[name]]),
    ):
        if not chosen:
            continue
        shown = ", ".join(
            f"`{name}`{_what_it_is(namespace.get(name))}{_files_text(files[name])}"
            for name in chosen
        )
        one = len(chosen) == 1
        report.notes.append(
            template.format(
                names=shown, holds="holds" if one else "hold", them="it" if one else "them"
            )
        )


def _files_text(files: Optional[dict[str, int]]) -> str:
    """' (38.1 MiB of /data/train.arrow)': the files a variable maps, their bytes."""
    return f" ({files_text(files)})" if files else ""


def _held_elsewhere_notes(report: ReleaseReport, stays: list[tuple]) -> None:
    """Why deleting a variable the user named frees less than it holds: who else holds it."""
    verb = report.wording.stays
    for label, amount, holders in stays:
        shown = ", ".join(
            f"`{holder.label}`" if holder.typed else holder.label for holder in holders[:5]
        )
        more = f" (+{len(holders) - 5} more)" if len(holders) > 5 else ""
        where = f": still held by {shown}{more}" if holders else ""
        why = (
            "it keeps that memory alive: delete it too to free it"
            if len(holders) == 1
            else "they keep it alive: delete them too to free it"
        )
        kinds = {holder.kind for holder in holders}
        if LOGGER in kinds:
            why = (
                "logging keeps every logger: remove the handler that keeps it, "
                "`logger.removeHandler(handler)`, to free it"
            )
        elif MODULE_GLOBAL in kinds:
            why = f"{_MODULE_GLOBAL_WHY}: `del` it or assign it anew to free it"
        elif FINALIZER in kinds:
            why = _FINALIZER_WHY
        elif THREAD in kinds:
            why = f"a running thread keeps its function's arguments: {_THREAD_FIX}"
        report.notes.append(
            f"`{label}`: {format_bytes(amount)} of its memory {verb}{where} ({why})"
        )


_MODULE_GLOBAL_WHY = "a global of your own module keeps it, and %gpu_reset never deletes one"
_FINALIZER_FIX = (
    "it runs when the object it watches is freed (or when called; its detach() lets go "
    "without running)"
)
_FINALIZER_WHY = (
    "a weakref.finalize keeps its function and arguments until it runs, and %gpu_reset "
    f"never runs or removes one: {_FINALIZER_FIX}"
)
_THREAD_FIX = "they go when the function the thread runs returns (%gpu_reset never stops one)"
REGISTRY_NAMES_SHOWN = 5
# the roots of registries a reset never changes, named with their fix (in this order)
_REGISTRY_ROOTS = (MODULE_GLOBAL, FINALIZER, THREAD)


def _registry_notes(report: ReleaseReport, found: Scan) -> None:
    """What the globals of the user's modules, ``weakref.finalize``'s finalizers and running
    threads keep: a reset leaves them as they are; the note names them, their bytes and
    the fix."""
    reach = found.reach
    holding = [root for root in reach.holding() if root.kind in _REGISTRY_ROOTS]
    if not holding:
        return
    labels = {entry[0]: entry[1] for entry in found.roots}
    for kind in _REGISTRY_ROOTS:
        roots = [root for root in holding if root.kind == kind]
        if not roots:
            continue
        sizes = [(dropping.nbytes(found, reach.keys_reached({root})), root) for root in roots]
        sizes.sort(key=lambda pair: -pair[0])
        shown = ", ".join(
            f"`{labels.get(root, root.key)}` ({format_bytes(amount)})"
            for amount, root in sizes[:REGISTRY_NAMES_SHOWN]
        )
        more = len(sizes) - REGISTRY_NAMES_SHOWN
        shown += f" (+{more} more)" if more > 0 else ""
        if kind == MODULE_GLOBAL:
            first = labels.get(sizes[0][1], "")
            report.notes.append(
                f"{report.wording.held} held by globals of your own modules, which %gpu_reset "
                f"never deletes: {shown}; `del {first}` (or assigning it anew) frees what "
                "it keeps"
            )
        elif kind == FINALIZER:
            report.notes.append(
                f"{report.wording.held} held by weakref.finalize until it runs, which "
                f"%gpu_reset never runs or removes: {shown}; {_FINALIZER_FIX}"
            )
        else:
            report.notes.append(
                f"{report.wording.held} held by running threads: {shown}; {_THREAD_FIX}"
            )


def add_history_note(plan: ResetPlan) -> None:
    """The note on earlier reruns' leaks (`cells.past_leaks`), last in either report. A
    flagged cell whose holders a reset has said are gone is said once: later resets (and
    dry runs) leave it out, so a note that no longer changes does not repeat each time."""
    shell = plan.shell
    settled = _SETTLED.setdefault(shell, set()) if shell is not None else set()
    note = past_leaks.history_note(shell, plan.namespace, plan.dry_run, settled)
    if note is not None:
        plan.report.notes.append(note)
        if not plan.dry_run:
            settled.update(past_leaks.gone_cells(shell, plan.namespace))


# per shell: the flagged cells a reset said had every holder gone (weakly: a test's shell)
_SETTLED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# ---------------------------------------------------------------- the dry run


def describe(plan: ResetPlan) -> ReleaseReport:
    """The dry run's report: the plan, with the figures now and what would stay held."""
    report = plan.report
    report.devices = [DeviceRelease(*figures) for figures in plan.before]
    found, _drop = plan.take()  # the drop is never applied
    seen = set(found.keys)
    staying = dropping.would_stay(found, plan.dropped)
    if staying is None:  # walked again, as the drop would leave the notebook
        del found
        staying = scan(
            namespace=plan.namespace,
            shell=plan.shell,
            budget_s=plan.scan_budget_s,
            without=plan.dropped,
        ).leftovers
    report.leftovers = staying
    _dry_run_notes(report, plan.health, plan.sync_timeout_s)
    failures = failed_runs.dry_run_note(plan.shell, seen)
    if failures is not None:
        report.notes.append(failures)
    add_history_note(plan)
    return report


def _dry_run_notes(report: ReleaseReport, health: cuda_health.ContextHealth, wait_s: float) -> None:
    if health.broken:
        report.restart_required = True
        report.warnings.append(f"{health.detail}; {cuda_health.RESTART_ADVICE}")
    elif health.busy:
        report.notes.append(
            f"the GPU is still running CUDA work queued by the last cell ({health.detail});"
            f" %gpu_reset waits up to {wait_s:g} s for it before emptying the cache"
        )
    elif health.state == cuda_health.FORKED:
        report.notes.append(f"no CUDA cache to empty: {health.detail}")
    frames = len(torch_compile.compiled_codes())
    if frames:
        report.notes.append(
            f"would run torch._dynamo.reset(): {counted(frames, 'compiled frame')}; "
            f"{torch_compile.RECOMPILE_NOTE}"
        )
