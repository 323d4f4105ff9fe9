"""Earlier failed runs whose tracebacks still hold arrays (a reference cycle with IPython's
record of the run), for a dry run's estimate (see docs/cells.md, "Earlier failed runs")."""

from __future__ import annotations

import gc
import sys
from typing import Any, NamedTuple, Optional

from ..units import format_bytes
from .held_memory import holding_locals

MAX_LABELS = 2

# failed cells since the reset's last full collection (None: not known, as before the
# tracker counted): a dry run looks for their records only when there may be some
_failures: Optional[int] = None


def count_failure() -> None:
    """A cell failed (the tracker's count)."""
    global _failures
    _failures = (_failures or 0) + 1


# how many resets have run in this process (each drops the notebook's hidden holders and
# runs a full collection): a rerun whose previous run came before one is judged on what
# is found holding that run's objects, not on the figures (`reruns`)
resets = 0


def collected() -> None:
    """A full collection ran (the reset's): no earlier failed run's cycle is left."""
    global _failures, resets
    _failures = 0
    resets += 1


class FailedRun(NamedTuple):
    """An earlier failed run: its cell, the locals of its traceback that hold arrays, and
    the bytes they hold beyond what `seen` counted."""

    cell: Optional[int]
    labels: tuple[str, ...]
    nbytes: int


def _result_type() -> Optional[type]:
    shell_module = sys.modules.get("IPython.core.interactiveshell")
    return getattr(shell_module, "ExecutionResult", None)


def in_cycle(error: BaseException, record: Any) -> bool:
    """Whether a frame on `error`'s traceback refers to `record` (the run's record that
    refers to `error`): the two keep each other alive until the garbage collector runs."""
    if record is None:
        return False
    tb = error.__traceback__
    while tb is not None:
        if any(item is record for item in gc.get_referents(tb.tb_frame)):
            return True
        tb = tb.tb_next
    return False


def earlier_failures(shell: Any, seen: set) -> list[FailedRun]:
    """The failed runs other than the last error whose record and traceback are in a
    reference cycle, with what their traceback locals hold that is not in `seen` (storage
    keys already counted: a name's, or another run's). Oldest first."""
    from ..notebook_refs.roots import raised_by_our_magic, users_exceptions  # not at %load_ext

    result_type = _result_type()
    if result_type is None:
        return []
    last, _tracebacks, _sources = users_exceptions(shell)
    kept = {id(error) for error in last}
    records = [item for item in gc.get_objects() if type(item) is result_type]
    runs = []
    for record in records:
        error = record.__dict__.get("error_in_exec")
        if not isinstance(error, BaseException) or id(error) in kept:
            continue
        if raised_by_our_magic(error):  # a bad magic line: not the user's failed run
            continue
        if not in_cycle(error, record):
            continue
        held = holding_locals(error, seen)
        if held:
            cell = record.__dict__.get("execution_count")
            labels = tuple(label for label, _size in held)
            runs.append(
                FailedRun(
                    cell if type(cell) is int else None, labels, sum(size for _label, size in held)
                )
            )
    del records
    return sorted(runs, key=lambda run: (run.cell is None, run.cell or 0))


def dry_run_note(shell: Any, seen: set) -> Optional[str]:
    """The dry run's note on earlier failed runs' tracebacks (None: none holds arrays;
    no cell failed since the reset's last collection: not looked for)."""
    if _failures == 0:
        return None
    runs = earlier_failures(shell, seen)
    if not runs:
        return None
    total = sum(run.nbytes for run in runs)
    cells = ", ".join(dict.fromkeys(f"[{run.cell}]" for run in runs if run.cell is not None))
    labels = list(dict.fromkeys(label for run in runs for label in run.labels))
    shown = ", ".join(labels[:MAX_LABELS]) + (
        f" (+{len(labels) - MAX_LABELS} more)" if len(labels) > MAX_LABELS else ""
    )
    which = "1 earlier failed run" if len(runs) == 1 else f"{len(runs)} earlier failed runs"
    return (
        f"not in this estimate: the tracebacks of {which}{f' ({cells})' if cells else ''} "
        f"hold {format_bytes(total)} in {shown}, in reference cycles with IPython's records "
        "of those runs: the reset's gc.collect() frees them unless something else holds them"
    )
