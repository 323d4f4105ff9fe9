"""Records for tests: the tracker's and the leftovers scan's, with plain defaults."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

from colab_gpu_guard.cells.rerun_holders import GRAPHS, ITEMS, VARIABLE, Growth, Holder
from colab_gpu_guard.cells.tracker import CellMemory
from colab_gpu_guard.leftovers import Leftover


def cell_memory(**fields) -> CellMemory:
    """A tracker record with the given fields, the rest zero (a cell without CUDA)."""
    values = dict(
        cell=None,
        allocated_before=0,
        allocated_after=0,
        peak=0,
        reserved_after=0,
        ooms=0,
        nvml_used_after=None,
        rerun_leak=False,
        leak_bytes=0,
        duration_s=0.0,
    )
    values.update(fields)
    return CellMemory(**values)


def grew(name: str, count: int = 1, graphs: int = 0, graph_nbytes=None) -> Holder:
    """A user's list `name` that grew during a rerun by `count` items (all autograd graphs
    where `graphs` is given), the holder of what the rerun kept (its bytes not measured)."""
    items = GRAPHS if graphs else ITEMS
    return Holder(VARIABLE, name, None, Growth(count, items, graphs, graph_nbytes))


def leftover(**fields) -> Leftover:
    """A leftovers entry with the given fields, the rest plain."""
    values = dict(
        name="x",
        holder="user variable",
        shape=(),
        dtype="float32",
        device="cpu",
        nbytes=0,
        storage_id=0,
    )
    values.update(fields)
    return Leftover(**values)


def reruns(run_cell, cell: str, times: int = 3) -> tuple[list[CellMemory], str]:
    """Run `cell` `times` times in a real shell (its output captured): the tracker's
    records of the runs after the first (the reruns), and the history as text after."""
    from IPython.utils.capture import capture_output

    from colab_gpu_guard.cells.tracker import format_history, memory_history

    with capture_output():
        runs = [run_cell(cell).execution_count for _ in range(times)]
    by_cell = {record.cell: record for record in memory_history()}
    return [by_cell[run] for run in runs[1:]], format_history(memory_history())


@contextmanager
def collector_off() -> Iterator[None]:
    """No garbage collection while it is on: whether the cyclic collector happens to run
    during a cell depends on what else allocated; the test says when it runs. Off by its
    threshold as well as by `gc.disable()`, which any ``gc.enable()`` meanwhile undoes: in
    a full suite run a collection once freed a previous run's model in the middle of a
    test that keeps it in a reference cycle, with the collector disabled."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.disable()
    gc.set_threshold(0)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.enable()
