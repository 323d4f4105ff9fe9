"""Per-cell cost of the memory tracker's hooks, with 10^6 objects alive.

Run: python bench/bench_tracker.py [--quick]

Prints medians and ratios measured in this same run:
- the tracker's pre_run_cell + post_run_cell pair, called directly (the hook cost itself);
- a whole cell (`shell.run_cell("pass")`) in a real IPython shell with the extension loaded,
  against the same bare shell without it;
- the gc.collect-per-cell approach (what ipyexperiments does after every cell), with the
  same objects alive.
Target (issue 3): <= 20 microseconds per cell for the hooks, whatever the number of live
objects; without CUDA (as here) the torch part is a dictionary lookup.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from colab_gpu_guard.tracker import MemoryTracker  # noqa: E402

TARGET_US = 20.0


def per_call_us(function, calls: int, repeats: int) -> float:
    """Median over `repeats` batches of the mean time of one call, in microseconds."""
    function()
    batches = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            function()
        batches.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(batches)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10^5 objects, fewer calls")
    args = parser.parse_args()
    objects, calls, repeats, cells = (
        (100_000, 2_000, 5, 200) if args.quick else (1_000_000, 20_000, 7, 1_000)
    )
    import torch  # noqa: F401  (imported, CUDA not initialised: the common CPU case)

    alive = [[n] for n in range(objects)]  # lists are always gc-tracked

    tracker = MemoryTracker()
    info = types.SimpleNamespace(raw_cell="x = model(batch)\nloss = x.sum()")
    result = types.SimpleNamespace(execution_count=1)

    def hooks() -> None:
        tracker.pre_run_cell(info)
        tracker.post_run_cell(result)

    hook_us = per_call_us(hooks, calls, repeats)
    small_us = None
    alive_count = len(gc.get_objects())
    gc_us = per_call_us(gc.collect, max(3, calls // 2_000), repeats)

    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()

    def cell() -> None:
        shell.run_cell("pass", store_history=True)

    shell_tracker = MemoryTracker()

    def with_tracker(on: bool) -> None:
        for event, hook in (
            ("pre_run_cell", shell_tracker.pre_run_cell),
            ("post_run_cell", shell_tracker.post_run_cell),
        ):
            if on:
                shell.events.register(event, hook)
            else:
                shell.events.unregister(event, hook)

    # interleave the two configurations so that drift affects both alike
    bare_runs, tracked_runs = [], []
    for _ in range(repeats):
        bare_runs.append(per_call_us(cell, cells, 1))
        with_tracker(True)
        tracked_runs.append(per_call_us(cell, cells, 1))
        with_tracker(False)
    bare_us = statistics.median(bare_runs)
    tracked_us = statistics.median(tracked_runs)
    shell.run_line_magic("load_ext", "colab_gpu_guard")
    loaded_us = per_call_us(cell, cells, repeats)
    shell.run_line_magic("unload_ext", "colab_gpu_guard")
    shell_tracker.close()
    tracker.close()

    del alive
    gc.collect()
    small = MemoryTracker()

    def small_hooks() -> None:
        small.pre_run_cell(info)
        small.post_run_cell(result)

    small_us = per_call_us(small_hooks, calls, repeats)
    small.close()

    print(
        f"tracker hooks per cell, {alive_count} gc objects alive "
        f"({objects} extra), torch imported, CUDA not initialised"
    )
    print(f"{'what':52} {'median':>12} {'ratio':>9}")
    rows = [
        ("tracker pre+post hooks (10^6-object process)", hook_us, 1.0),
        ("tracker pre+post hooks (after freeing them)", small_us, small_us / hook_us),
        ("gc.collect() per cell (ipyexperiments-style)", gc_us, gc_us / hook_us),
        ("run_cell('pass'), bare shell", bare_us, 1.0),
        ("run_cell('pass'), bare shell + tracker hooks", tracked_us, tracked_us / bare_us),
        ("run_cell('pass'), whole extension loaded", loaded_us, loaded_us / bare_us),
    ]
    for name, micros, ratio in rows:
        print(f"{name:52} {micros:9.2f} us {ratio:8.2f}x")
    print(f"  gc.collect per cell costs {gc_us / hook_us:.0f}x the tracker's hooks")
    print(
        f"  a whole cell costs {tracked_us - bare_us:+.1f} us more with the tracker's hooks "
        f"({tracked_us / bare_us:.3f}x the bare shell; the whole extension, every module's "
        f"hooks: {loaded_us / bare_us:.3f}x)"
    )
    ok = hook_us <= TARGET_US
    print(
        f"target: hooks <= {TARGET_US:g} us per cell at {objects} live objects: "
        f"{hook_us:.2f} us {'PASS' if ok else 'FAIL'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
