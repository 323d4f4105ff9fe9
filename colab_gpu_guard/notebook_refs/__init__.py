"""Where a notebook keeps references behind the user's back, and how to let go of them.

The only package that knows IPython's attributes; IPython is never imported here unless the
user's process already has it.
"""

from __future__ import annotations

from typing import Any

# The references IPython keeps: the running shell (`shell`), the user namespace and
# ``user_ns_hidden``, the output history (``Out``/``_oh``, ``_N``, ``_``/``__``/``___`` in
# ``user_ns``, in ``user_ns_hidden`` and on the display hook, the last cell's result), the
# last exception (``sys.last_*``, ``last_execution_result``, ``InteractiveTB.tb``,
# exceptions chained to it) and the post-mortem debugger's frames (`frames`). `roots()`
# lists every reference a scan starts from as typed `Root` records.
from .frames import (
    ChainLink,
    clear_frame,
    clear_frames,
    debugger_of,
    exception_chain,
    finished_frames,
    frame_calls,
    frame_function,
    held_exceptions,
    holds_locals,
    is_function_frame,
    is_resumable,
    release_traceback_frames,
    running_locals,
    traceback_frames,
    traceback_frames_exited,
)
from .roots import (
    DEBUGGER,
    DISPLAYHOOK,
    EXCEPTION,
    HIDDEN_UNDERSCORE,
    LAST_RESULT,
    OUT,
    OUTPUT_NAME_KIND,
    UNDERSCORE,
    VARIABLE,
    Root,
    RootKey,
    bookkeeping_frame,
    roots,
)
from .shell import (
    hidden_underscore_label,
    ipython_names,
    is_output_name,
    managed_underscores,
    namespace_to_scan,
    output_history,
    resolve_namespace,
    running_shell,
    stale_hidden_underscores,
)

__all__ = [
    "DEBUGGER",
    "DISPLAYHOOK",
    "EXCEPTION",
    "HIDDEN_UNDERSCORE",
    "LAST_RESULT",
    "OUT",
    "OUTPUT_NAME_KIND",
    "UNDERSCORE",
    "VARIABLE",
    "ChainLink",
    "DropPlan",
    "Dropped",
    "Root",
    "RootKey",
    "bookkeeping_frame",
    "clear_frame",
    "clear_frames",
    "debugger_of",
    "exception_chain",
    "finished_frames",
    "frame_calls",
    "frame_function",
    "held_exceptions",
    "holds_locals",
    "hidden_underscore_label",
    "ipython_names",
    "is_function_frame",
    "is_output_name",
    "is_resumable",
    "managed_underscores",
    "namespace_to_scan",
    "output_history",
    "plan_drop",
    "release_traceback_frames",
    "resolve_namespace",
    "roots",
    "running_locals",
    "running_shell",
    "stale_hidden_underscores",
    "traceback_frames",
    "traceback_frames_exited",
]

# A `DropPlan` (`plan_drop`) says what dropping some roots would do and `apply()` does it.
# The drop plan is imported when first asked for: `%load_ext` imports this package for the
# tracker, which needs none of it.
_DROP = ("DropPlan", "Dropped", "plan_drop")


def __getattr__(name: str) -> Any:
    if name in _DROP:
        from . import drop

        return getattr(drop, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
