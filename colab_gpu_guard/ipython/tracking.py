"""The tracker's event wiring: record every cell of a shell through IPython's
``pre_run_cell`` / ``post_run_cell`` until `%unload_ext` (the engine is
`colab_gpu_guard.tracker`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import tracker as engine

if TYPE_CHECKING:
    from .registration import Registration


def install(
    registration: Registration, maxlen: int = engine.DEFAULT_MAXLEN
) -> engine.MemoryTracker:
    """Start recording every cell of ``registration.shell``; stops when the registration
    closes (``%unload_ext``)."""
    tracker = engine.MemoryTracker(maxlen=maxlen)
    shell = registration.shell
    registration.register_event("pre_run_cell", tracker.pre_run_cell)
    registration.register_event("post_run_cell", tracker.post_run_cell)
    engine.activate(shell, tracker)

    def remove() -> None:
        tracker.close()
        engine.deactivate(shell, tracker)

    registration.add_cleanup(remove)
    return tracker
