"""The tracker's event wiring: record every cell of a shell through IPython's
``pre_run_cell`` / ``post_run_cell`` until `%unload_ext` (the engine is
`colab_gpu_guard.cells.tracker`), and the warning line under a result that keeps much accelerator
memory in the output history (`colab_gpu_guard.cells.output_warning`)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from ..cells import tracker as engine
from ..cells.output_warning import OutputWarning

if TYPE_CHECKING:
    from .registration import Registration


class Tracking(NamedTuple):
    tracker: engine.MemoryTracker
    output_warning: OutputWarning


def install(registration: Registration, maxlen: int = engine.DEFAULT_MAXLEN) -> Tracking:
    """Start recording every cell of ``registration.shell`` and warning under heavy
    results; stops when the registration closes (``%unload_ext``)."""
    shell = registration.shell

    def outputs() -> dict:
        # imported on first need (a heavy result, a flagged rerun): %load_ext stays cheap
        from .. import notebook_refs

        return notebook_refs.output_history(shell)

    tracker = engine.MemoryTracker(maxlen=maxlen, namespace=shell.user_ns, outputs=outputs)
    warning = OutputWarning()
    registration.register_event("pre_run_cell", tracker.pre_run_cell)
    registration.register_event("post_run_cell", tracker.post_run_cell)

    def warn_output(result: Any = None) -> None:
        value = getattr(result, "result", None)
        if value is None:  # a statement, or a line ending with ';': nothing displayed
            return
        try:
            cell = result.execution_count
            line = warning.line(value, f"Out[{cell}]")
            if line is None or outputs().get(cell) is not value:
                return  # light, or not kept in Out (history not stored, or the cache is off)
        except Exception:  # an event callback on a user's value: never breaks the cell
            return
        print(line, file=sys.stdout)

    registration.register_event("post_run_cell", warn_output)
    engine.activate(shell, tracker)

    def remove() -> None:
        tracker.close()
        engine.deactivate(shell, tracker)

    registration.add_cleanup(remove)
    return Tracking(tracker, warning)
