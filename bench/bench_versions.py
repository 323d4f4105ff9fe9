"""This checkout against another commit, measured in the same run: `%load_ext`, the per-cell
hooks, find_leftovers (of tensors, of one tensor's rows, and of pandas frames) and
gpu_status.

Run: python bench/bench_versions.py --against REV [--quick] [--smoke] [--json PATH]

REV is checked out into a temporary git worktree. Every sample runs in a fresh interpreter
with PYTHONPATH set to one tree, the two trees alternating sample by sample, so machine
drift hits both alike; ratio = this checkout / REV (below 1: this checkout is faster).
The public API is used, and the tracker from either of its homes, so any two versions
compare.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import bench_parser, path_first, print_rows, row, write_json  # noqa: E402

# Each script prints one number: milliseconds (or microseconds per cell) of one sample.
SCRIPTS = {
    "%load_ext colab_gpu_guard, added to a fresh shell (ms)": """
        import time
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        start = time.perf_counter()
        shell.run_line_magic("load_ext", "colab_gpu_guard")
        print((time.perf_counter() - start) * 1e3)
    """,
    "per cell added by the hooks, torch imported (us)": """
        import time, torch
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        def per_cell():
            start = time.perf_counter()
            for _ in range({cells}):
                shell.run_cell("pass", store_history=False)
            return (time.perf_counter() - start) / {cells}
        per_cell()
        bare = min(per_cell() for _ in range(3))
        shell.run_line_magic("load_ext", "colab_gpu_guard")
        per_cell()
        loaded = min(per_cell() for _ in range(3))
        print((loaded - bare) * 1e6)
    """,
    "the tracker's pre_run_cell + post_run_cell alone (us)": """
        import time, types, torch
        try:
            from colab_gpu_guard.cells.tracker import MemoryTracker
        except ImportError:  # a tree from before the cells/ room
            from colab_gpu_guard.tracker import MemoryTracker
        tracker = MemoryTracker(nvml=False)
        info = types.SimpleNamespace(raw_cell="x = 1\\n")
        result = types.SimpleNamespace(execution_count=1)
        def per_cell():
            start = time.perf_counter()
            for _ in range({cells}):
                tracker.pre_run_cell(info)
                tracker.post_run_cell(result)
            return (time.perf_counter() - start) / {cells}
        per_cell()
        print(min(per_cell() for _ in range(5)) * 1e6)
    """,
    "find_leftovers(), {tensors} CPU tensors (ms)": """
        import gc, time, torch
        import colab_gpu_guard
        namespace = {{"layers": [torch.zeros(4) for _ in range({tensors})]}}
        list(colab_gpu_guard.find_leftovers(namespace=namespace))
        gc.collect()
        start = time.perf_counter()
        list(colab_gpu_guard.find_leftovers(namespace=namespace))
        print((time.perf_counter() - start) * 1e3)
    """,
    # a dataset kept as its rows (`list(tensor)`): views of one storage, measured together
    "find_leftovers(), {views} row views of one CPU tensor (ms)": """
        import gc, time, torch
        import colab_gpu_guard
        namespace = {{"rows": list(torch.zeros({views}, 8))}}
        list(colab_gpu_guard.find_leftovers(namespace=namespace))
        gc.collect()
        start = time.perf_counter()
        list(colab_gpu_guard.find_leftovers(namespace=namespace))
        print((time.perf_counter() - start) * 1e3)
    """,
    # pandas 3's columns: Arrow strings, nullable integers, categoricals, floats
    "find_leftovers(), {frames} pandas frames of 20 columns (ms)": """
        import gc, time
        import numpy as np, pandas as pd
        import colab_gpu_guard
        n = 1000
        def frame():
            return pd.DataFrame({{
                **{{f"s{{i}}": [f"x{{j}}" for j in range(n)] for i in range(5)}},
                **{{f"i{{i}}": pd.array(np.arange(n), dtype="Int64") for i in range(5)}},
                **{{f"c{{i}}": pd.Categorical(["a", "b"] * (n // 2)) for i in range(5)}},
                **{{f"f{{i}}": np.ones(n) for i in range(5)}},
            }})
        namespace = {{f"df{{k}}": frame() for k in range({frames})}}
        list(colab_gpu_guard.find_leftovers(namespace=namespace))
        gc.collect()
        start = time.perf_counter()
        list(colab_gpu_guard.find_leftovers(namespace=namespace))
        print((time.perf_counter() - start) * 1e3)
    """,
    "gpu_status() as text, no GPU (ms)": """
        import time
        import colab_gpu_guard
        str(colab_gpu_guard.gpu_status())
        start = time.perf_counter()
        str(colab_gpu_guard.gpu_status())
        print((time.perf_counter() - start) * 1e3)
    """,
}


def sample(tree: Path, script: str) -> float:
    env = dict(os.environ, PYTHONPATH=path_first(str(tree)))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "cgg_bench_versions")
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, cwd=tree
    )
    if done.returncode != 0:
        raise RuntimeError(f"{tree}: {done.stderr.strip().splitlines()[-1:]}")
    return float(done.stdout.split()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = bench_parser(__doc__.splitlines()[0], "fewer samples")
    parser.add_argument("--against", metavar="REV", required=True, help="the commit to compare")
    args = parser.parse_args(argv)
    # --smoke (the test suite): one sample each, no warm-up - the machinery, not a figure
    runs = 1 if args.smoke else 7 if args.quick else 21
    sizes = {
        "cells": 200 if args.smoke else 2000,
        "tensors": 1000 if args.smoke else 20000,
        "views": 1000 if args.smoke else 20000,
        "frames": 2 if args.smoke else 50,
    }
    with tempfile.TemporaryDirectory() as scratch:
        other = Path(scratch) / "against"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", str(other), args.against],
            check=True,
        )
        try:
            rows = []
            for name, script in SCRIPTS.items():
                code = textwrap.dedent(script.format(**sizes))
                ours, theirs = [], []
                if not args.smoke:
                    sample(ROOT, code), sample(other, code)  # warm the bytecode caches
                for _ in range(runs):
                    ours.append(sample(ROOT, code))
                    theirs.append(sample(other, code))
                unit = "us" if "(us)" in name else "ms"
                rows.append(
                    row(
                        "versions",
                        name.format(**sizes).rsplit(" (", 1)[0],
                        statistics.median(ours),
                        statistics.median(theirs),
                        baseline=f"commit {args.against}",
                        unit=unit,
                        note=f"median of {runs}, alternating fresh interpreters",
                    )
                )
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(other)], check=False
            )
    print_rows(rows)
    write_json(args.json, "versions", rows, against=args.against)
    return 0


if __name__ == "__main__":
    sys.exit(main())
