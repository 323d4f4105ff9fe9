"""Per-cell cost of the extension's hooks (memory tracker, CUDA advisor, every-cell reseed),
at 10^3 and 10^6 live objects, against ipyexperiments' CellLogger.

Run: python bench/bench_tracker.py [--quick] [--smoke] [--json PATH]

In one real IPython ``InteractiveShell``, ``run_cell("pass")`` is timed in interleaved
rounds (drift hits every configuration alike):
- bare shell (the baseline);
- ``%load_ext colab_gpu_guard`` (tracker + advisor hooks; every-cell reseed off);
- the same plus ``%seed_all 42 --every-cell``;
- ipyexperiments' ``CellLogger`` (the peer: the real class from the ``ipyexperiments``
  package, with its CPU backend - its PyTorch backend needs NVML, i.e. a GPU; per cell it
  runs ``gc.collect()``, reads the process RSS twice and samples RSS in a busy thread).
A rerun is timed too: ``run_cell("pass", store_history=True)`` again and again (each cell a
rerun of the one before, judged for keeping memory again), unloaded and loaded in paired
rounds. Reported per cell: what each adds to the bare shell's ``run_cell``, beside two controls:
three no-op callbacks (IPython's dispatch), and one ``pread`` of ``/proc/self/statm`` (the
resident-size read the tracker takes after every cell: a system call, whose cost is the
machine's; in a Firecracker VM it is several microseconds). The tracker's
``pre_run_cell`` + ``post_run_cell`` pair is also timed alone. Target (issue 8): <= 20 us
per cell, flat in the number of live objects.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
import statistics
import sys
import threading
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import NOT_RUN, bench_parser, print_rows, row, write_json  # noqa: E402

TARGET_US = 20.0


def per_call_us(function, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        function()
    return (time.perf_counter() - start) / calls * 1e6


def cell_logger(shell):
    """ipyexperiments' real CellLogger (CPU backend), or (None, why)."""
    try:
        from ipyexperiments.cell_logger import CellLogger
    except Exception as error:  # not installed
        return None, f"ipyexperiments not importable ({type(error).__name__})"
    logger = CellLogger(exp=types.SimpleNamespace(backend="cpu"), compact=True)
    logger.ipython = shell
    return logger, "ipyexperiments CellLogger (real, CPU backend: its GPU backend needs NVML)"


def measure(objects: int, cells: int, peer_cells: int, repeats: int) -> dict:
    import numpy  # noqa: F401  (a notebook has them imported)
    import torch  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard.cells.tracker import MemoryTracker

    alive = [[n] for n in range(objects)]  # lists are always gc-tracked
    gc.collect()
    live = len(gc.get_objects())
    # the history database as a notebook kernel has it (a file): a stored cell wakes
    # IPython's history thread, which writes it there
    shell = InteractiveShell.instance()
    quiet = io.StringIO()

    def cell() -> None:
        shell.run_cell("pass", store_history=False)

    def stored_cell() -> None:
        # a rerun as a notebook runs it: the same source again, stored in the history
        # (an execution count, IPython's history thread woken after it)
        shell.run_cell("pass", store_history=True)

    def load(every_cell: bool) -> None:
        shell.run_line_magic("load_ext", "colab_gpu_guard")
        if every_cell:
            with contextlib.redirect_stdout(quiet):
                shell.run_line_magic("seed_all", "42 --every-cell")

    def unload() -> None:
        with contextlib.redirect_stdout(quiet):
            shell.run_line_magic("seed_all", "--no-every-cell")
        shell.run_line_magic("unload_ext", "colab_gpu_guard")

    # Warm every code path once. The first load also starts the tracker's NVML reader
    # thread, which imports pynvml and tries nvmlInit once per kernel; let that one-time
    # start-up finish before timing (it is not a per-cell cost).
    load(True)
    for _ in range(100):
        cell()
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(
        thread.name == "colab_gpu_guard-nvml" and thread.is_alive()
        for thread in threading.enumerate()
    ):
        time.sleep(0.01)
    unload()
    logger, peer_note = cell_logger(shell)
    samples: dict[str, list[float]] = {"bare": [], "loaded": [], "every": [], "peer_bare": []}
    samples["peer"] = []
    samples["noop"] = []
    samples["rerun_bare"] = []
    samples["rerun_loaded"] = []

    # the control: as many callbacks as the extension registers, doing nothing - what
    # IPython's dispatch costs, plus this machine's noise between blocks of cells
    def noop_pre(info=None) -> None:
        pass

    def noop_post(result=None) -> None:
        pass

    def noop_post_2(result=None) -> None:
        pass

    noops = (("pre_run_cell", noop_pre), ("post_run_cell", noop_post))
    noops += (("post_run_cell", noop_post_2),)
    # the second control: the one read of the resident size the tracker takes per cell,
    # alone (a system call: its cost is this machine's, and a floor for the tracker's)
    statm = os.open("/proc/self/statm", os.O_RDONLY) if os.path.exists("/proc/self/statm") else None
    samples["statm"] = []

    def statm_post(result=None) -> None:
        os.pread(statm, 128, 0)

    for _ in range(repeats):
        samples["bare"].append(per_call_us(cell, cells))
        for event, callback in noops:
            shell.events.register(event, callback)
        samples["noop"].append(per_call_us(cell, cells))
        for event, callback in noops:
            shell.events.unregister(event, callback)
        if statm is not None:
            shell.events.register("post_run_cell", statm_post)
            samples["statm"].append(per_call_us(cell, cells))
            shell.events.unregister("post_run_cell", statm_post)
        load(False)
        samples["loaded"].append(per_call_us(cell, cells))
        unload()
        # paired: a stored rerun unloaded, then loaded, back to back in each round
        samples["rerun_bare"].append(per_call_us(stored_cell, cells))
        load(False)
        samples["rerun_loaded"].append(per_call_us(stored_cell, cells))
        unload()
        load(True)
        samples["every"].append(per_call_us(cell, cells))
        unload()
        if logger is not None:
            samples["peer_bare"].append(per_call_us(cell, peer_cells))
            with contextlib.redirect_stdout(quiet):
                logger.start()
                samples["peer"].append(per_call_us(cell, peer_cells))
                logger.stop()
    if statm is not None:
        os.close(statm)
    in_place = hooks_in_place(shell, load, unload, cells * repeats)
    tracker = MemoryTracker()
    info = types.SimpleNamespace(raw_cell="x = model(batch)\nloss = x.sum()")
    # the fields of IPython's ExecutionResult the tracker reads
    result = types.SimpleNamespace(execution_count=1, result=None, error_in_exec=None)

    def hooks() -> None:
        tracker.pre_run_cell(info)
        tracker.post_run_cell(result)

    hooks()
    hook_us = statistics.median(per_call_us(hooks, cells) for _ in range(repeats))
    tracker.close()
    # the output warning's check of a displayed result that holds no arrays (None is one
    # comparison in its hook; a string or a list of numbers costs a type check)
    from colab_gpu_guard.cells.output_warning import OutputWarning

    warning = OutputWarning()
    plain = ["text", [1, 2, 3]]

    def check_outputs() -> None:
        for value in plain:
            warning.line(value, "Out[1]")

    warn_us = statistics.median(per_call_us(check_outputs, cells) for _ in range(repeats)) / 2
    del alive
    median = {key: statistics.median(values) if values else None for key, values in samples.items()}
    rerun_added = statistics.median(
        loaded - bare for loaded, bare in zip(samples["rerun_loaded"], samples["rerun_bare"])
    )
    peer_added = None
    if median["peer"] is not None:
        peer_added = median["peer"] - median["peer_bare"]
    return {
        "objects": objects,
        "gc_objects_alive": live,
        "cells": cells * repeats,
        "peer_cells": peer_cells * repeats,
        "bare_us": median["bare"],
        "loaded_added_us": median["loaded"] - median["bare"],
        "rerun_bare_us": median["rerun_bare"],
        "rerun_added_us": rerun_added,
        "every_cell_added_us": median["every"] - median["bare"],
        "noop_added_us": median["noop"] - median["bare"],
        "statm_added_us": median["statm"] - median["bare"] if median["statm"] else None,
        "peer_added_us": peer_added,
        "tracker_hooks_us": hook_us,
        "in_place_first_us": in_place["first"],
        "in_place_rerun_us": in_place["rerun"],
        "output_warning_us": warn_us,
        "peer_note": peer_note,
    }


def hooks_in_place(shell, load, unload, cells: int) -> dict[str, float]:
    """The tracker's pre_run_cell + post_run_cell, each call timed where it runs: inside
    ``run_cell``, with the caches as the rest of the cell leaves them (a loop calling the
    hooks back to back keeps them warm). Medians of `cells` cells, for cells run for the
    first time (a new source each) and for reruns of one source."""
    load(False)
    events = shell.events.callbacks
    tracker_pre, tracker_post = events["pre_run_cell"][0], events["post_run_cell"][0]
    timings: list[float] = []
    clock = time.perf_counter

    def pre(info=None) -> None:
        start = clock()
        tracker_pre(info)
        timings.append(clock() - start)

    def post(result=None) -> None:
        start = clock()
        tracker_post(result)
        timings[-1] += clock() - start

    events["pre_run_cell"][0], events["post_run_cell"][0] = pre, post
    medians = {}
    try:
        for mode in ("first", "rerun"):
            timings.clear()
            for n in range(cells):
                shell.run_cell("pass" if mode == "rerun" else f"_bench_{n} = {n}")
            medians[mode] = statistics.median(timings) * 1e6
    finally:
        events["pre_run_cell"][0], events["post_run_cell"][0] = tracker_pre, tracker_post
        for n in range(cells):
            shell.user_ns.pop(f"_bench_{n}", None)
        unload()
    return medians


def rows_of(results: list[dict]) -> list[dict]:
    rows = []
    for result in results:
        size = f"10^{len(str(result['objects'])) - 1}"
        peer = result["peer_added_us"]
        note = (
            f"{result['cells']} cells; peer over {result['peer_cells']} cells: "
            f"{result['peer_note']}"
        )
        for key, label in (("loaded_added_us", "reseed off"), ("every_cell_added_us", "reseed on")):
            ours = result[key]
            rows.append(
                row(
                    "tracker",
                    f"per cell added, {label}, {size} objects",
                    ours,
                    peer,
                    baseline="ipyexperiments CellLogger added" if peer is not None else "",
                    unit="us",
                    target=f"<= {TARGET_US:g} us per cell",
                    ok=ours <= TARGET_US,
                    note=note,
                )
            )
        rerun = result["rerun_added_us"]
        rows.append(
            row(
                "tracker",
                f"per cell added, a stored rerun of one cell, {size} objects",
                result["rerun_bare_us"] + rerun,
                result["rerun_bare_us"],
                baseline="the same cells, extension unloaded",
                unit="us",
                target=f"<= {TARGET_US:g} us per cell added",
                ok=rerun <= TARGET_US,
                note=f"{rerun:+.1f} us per cell (median of paired rounds); run_cell('pass', "
                "store_history=True) again and again: each a rerun of the last",
            )
        )
        rows.append(
            row(
                "tracker",
                f"control: 3 no-op callbacks added, {size} objects",
                result["noop_added_us"],
                unit="us",
                target="(IPython's dispatch + this machine's noise)",
                ok=None,
                note="the rows above minus this is what our hooks cost beyond any callback",
            )
        )
        if result["statm_added_us"] is not None:
            rows.append(
                row(
                    "tracker",
                    f"control: one /proc/self/statm read per cell, {size} objects",
                    result["statm_added_us"],
                    unit="us",
                    target="(this machine's system call cost)",
                    ok=None,
                    note="the tracker's one resident-size read per cell, alone: part of "
                    "the rows above",
                )
            )
        rows.append(
            row(
                "tracker",
                f"tracker pre+post hooks alone, {size} objects",
                result["tracker_hooks_us"],
                unit="us",
                target=f"<= {TARGET_US:g} us per cell",
                ok=result["tracker_hooks_us"] <= TARGET_US,
                note=f"{result['gc_objects_alive']} gc objects alive",
            )
        )
        for mode, label in (("first", "a new cell"), ("rerun", "a rerun")):
            value = result[f"in_place_{mode}_us"]
            rows.append(
                row(
                    "tracker",
                    f"tracker hooks timed inside run_cell, {label}, {size} objects",
                    value,
                    unit="us",
                    target=f"<= {TARGET_US:g} us per cell",
                    ok=value <= TARGET_US,
                    note="median per cell; caches as the cell leaves them",
                )
            )
        rows.append(
            row(
                "tracker",
                f"output warning check of a result holding no arrays, {size} objects",
                result["output_warning_us"],
                unit="us",
                target=f"<= {TARGET_US:g} us per cell",
                ok=result["output_warning_us"] <= TARGET_US,
                note="a str or a list of ints displayed; a statement costs one comparison",
            )
        )
    small, big = results[0], results[-1]
    flat = big["loaded_added_us"] - small["loaded_added_us"]
    rows.append(
        row(
            "tracker",
            "flatness: added per cell, most vs fewest objects",
            big["loaded_added_us"],
            small["loaded_added_us"],
            baseline=f"{small['objects']} objects",
            unit="us",
            target=f"flat (within {TARGET_US:g} us)",
            ok=abs(flat) <= TARGET_US,
            note=f"{big['objects']} objects: {flat:+.1f} us; peer: "
            + (
                f"{big['peer_added_us']:.0f} vs {small['peer_added_us']:.0f} us"
                if big["peer_added_us"] is not None and small["peer_added_us"] is not None
                else "n/a"
            ),
        )
    )
    return rows


def main(argv=None) -> int:
    parser = bench_parser(__doc__.splitlines()[0], "10^5 objects, fewer cells")
    parser.add_argument(
        "--cuda",
        action="store_true",
        help="with CUDA initialised first (the hooks then read torch's allocator each cell)",
    )
    args = parser.parse_args(argv)
    setting = "no CUDA"
    if args.cuda:
        import torch

        if not torch.cuda.is_available():
            why = "no CUDA device here"
            print(f"--cuda: not run: {why}")
            rows = [
                row("tracker", "per cell added, CUDA initialised", None, result=NOT_RUN, note=why)
            ]
            write_json(args.json, "tracker", rows)
            return 0
        torch.ones(1, device="cuda")  # CUDA initialised, as after a notebook's first GPU cell
        setting = f"CUDA initialised on {torch.cuda.get_device_name(0)}"
    sizes, cells, peer_cells, repeats = (1_000, 1_000_000), 500, 2, 20
    if args.quick:
        sizes, cells, peer_cells, repeats = (1_000, 100_000), 500, 5, 3
    if args.smoke:
        sizes, cells, peer_cells, repeats = (1_000, 10_000), 50, 2, 1
    results = [measure(objects, cells, peer_cells, repeats) for objects in sizes]
    rows = rows_of(results)
    if args.cuda:
        for entry in rows:
            entry["name"] += ", CUDA initialised"
    print(f"run_cell('pass') in a real InteractiveShell; torch + NumPy imported, {setting}")
    print_rows(rows)
    write_json(args.json, "tracker", rows, details=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
