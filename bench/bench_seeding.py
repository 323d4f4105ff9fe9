"""Cost of `%load_ext colab_gpu_guard`, of per-cell reseeding (`--every-cell`), and of an
`isolated_rng()` block against saving and restoring the three global streams by hand.

Run: python bench/bench_seeding.py [--quick] [--smoke] [--json PATH]
Prints medians and ratios against baselines measured in this same run.
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import bench_parser, path_first, print_rows, row, write_json  # noqa: E402

LOAD_SCRIPT = textwrap.dedent(
    """
    import sys, time
    t0 = time.perf_counter()
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    t1 = time.perf_counter()
    before = set(sys.modules)
    if {load}:
        shell.run_line_magic("load_ext", "colab_gpu_guard")
    t2 = time.perf_counter()
    heavy = sorted({{"torch", "numpy", "ipywidgets", "tensorflow", "jax", "cupy"}}
                   & (set(sys.modules) - before))
    print(t1 - t0, t2 - t1, ",".join(heavy))
    """
)


def compiled_env() -> dict:
    """Fresh interpreters that reuse compiled bytecode, as an installed package does (this
    checkout may run with PYTHONDONTWRITEBYTECODE=1, which would time the compiler)."""
    env = dict(os.environ, PYTHONPATH=path_first(str(ROOT)))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "colab_gpu_guard_bench")
    return env


def load_ext_cost(runs: int) -> dict:
    bare, loaded, heavy = [], [], set()
    env = compiled_env()
    script = LOAD_SCRIPT.format(load=True)
    subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, check=True)
    for _ in range(runs):
        for load, sink in ((False, bare), (True, loaded)):
            out = subprocess.run(
                [sys.executable, "-c", LOAD_SCRIPT.format(load=load)],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            sink.append(float(out[0]) + float(out[1]))
            if load and len(out) > 2:
                heavy.update(out[2].split(","))
    added = statistics.median(loaded) - statistics.median(bare)
    return {
        "bare_shell_start_ms": statistics.median(bare) * 1e3,
        "with_load_ext_ms": statistics.median(loaded) * 1e3,
        "added_ms": added * 1e3,
        "ratio": statistics.median(loaded) / statistics.median(bare),
        "heavy_modules_imported": sorted(heavy),
        "target": "<= 30 ms added, no heavy module",
        "pass": added <= 0.030 and not heavy,
    }


def per_cell_cost(cells: int, repeats: int) -> dict:
    import numpy  # noqa: F401  (the user's notebook has them imported)
    import torch  # noqa: F401
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()

    def time_cells() -> float:
        start = time.perf_counter()
        for _ in range(cells):
            shell.run_cell("pass", store_history=False)
        return (time.perf_counter() - start) / cells

    shell.run_line_magic("load_ext", "colab_gpu_guard")  # warm every code path once
    with contextlib.redirect_stdout(io.StringIO()):
        shell.run_line_magic("seed_all", "42 --every-cell")
    shell.run_line_magic("unload_ext", "colab_gpu_guard")
    samples: dict[str, list[float]] = {"bare": [], "loaded": [], "every": []}
    quiet = contextlib.redirect_stdout(io.StringIO())
    for _ in range(repeats):  # interleaved rounds, so drift hits all three alike
        samples["bare"].append(time_cells())
        shell.run_line_magic("load_ext", "colab_gpu_guard")
        samples["loaded"].append(time_cells())
        with quiet:
            shell.run_line_magic("seed_all", "42 --every-cell")
        samples["every"].append(time_cells())
        shell.run_line_magic("unload_ext", "colab_gpu_guard")
    bare, loaded, every_cell = (statistics.median(samples[k]) for k in ("bare", "loaded", "every"))

    from colab_gpu_guard.seeding import CellReseeder

    reseeder = CellReseeder(42)

    class Info:
        raw_cell = "x = torch.rand(3)\n" * 5

    start = time.perf_counter()
    for _ in range(cells):
        reseeder(Info)
    hook_only = (time.perf_counter() - start) / cells
    return {
        "bare_run_cell_us": bare * 1e6,
        "loaded_run_cell_us": loaded * 1e6,
        "every_cell_run_cell_us": every_cell * 1e6,
        "every_cell_added_us": (every_cell - bare) * 1e6,
        "reseed_hook_alone_us": hook_only * 1e6,
        "ratio_every_cell_vs_bare": every_cell / bare,
        "target": "reseed hook <= 20 us per cell (random + NumPy + torch imported)",
        "pass": hook_only <= 20e-6,
    }


def isolation_cost(repeats: int) -> dict:
    """`with isolated_rng(): pass` (every stream checked before it is restored, the
    notebook's generators listed) against get/set of torch's CPU state, Python random and
    NumPy's legacy state by hand (what torch.random.fork_rng and Lightning's isolate_rng
    do, with fewer streams); interleaved, medians."""
    import random

    import numpy
    import torch

    from colab_gpu_guard.seeding import isolated_rng

    def by_hand() -> None:
        states = (torch.get_rng_state(), random.getstate(), numpy.random.get_state())
        torch.set_rng_state(states[0])
        random.setstate(states[1])
        numpy.random.set_state(states[2])

    def ours() -> None:
        with isolated_rng():
            pass

    samples: dict[str, list[float]] = {"hand": [], "ours": []}
    for _ in range(repeats):
        for name, call in (("hand", by_hand), ("ours", ours)):
            start = time.perf_counter()
            for _ in range(20):
                call()
            samples[name].append((time.perf_counter() - start) / 20)
    hand, isolated = (statistics.median(samples[k]) for k in ("hand", "ours"))
    return {"by_hand_us": hand * 1e6, "isolated_rng_us": isolated * 1e6, "ratio": isolated / hand}


def rows_of(results: dict) -> list[dict]:
    load, cell = results["load_ext"], results["per_cell"]
    isolation = results["isolation"]
    heavy = ", ".join(load["heavy_modules_imported"]) or "none"
    return [
        row(
            "seeding",
            "%load_ext colab_gpu_guard (fresh interpreter)",
            load["with_load_ext_ms"],
            load["bare_shell_start_ms"],
            baseline="bare InteractiveShell start",
            target="<= 30 ms added, no torch/numpy/ipywidgets",
            ok=load["pass"],
            note=f"{load['added_ms']:+.1f} ms added; heavy modules imported: {heavy}",
        ),
        row(
            "seeding",
            "--every-cell reseed hook alone",
            cell["reseed_hook_alone_us"],
            unit="us",
            target="<= 20 us per cell",
            ok=cell["pass"],
            note="random + NumPy + torch imported",
        ),
        row(
            "seeding",
            "isolated_rng() round trip (CPU streams)",
            isolation["isolated_rng_us"],
            isolation["by_hand_us"],
            baseline="torch, random and NumPy state saved and restored by hand",
            unit="us",
            note="checks every stream before restoring, lists the notebook's generators",
        ),
    ]


def main(argv=None) -> int:
    parser = bench_parser(__doc__, "few repeats")
    args = parser.parse_args(argv)
    runs, cells, repeats = (7, 2000, 5)
    if args.quick:
        runs, cells, repeats = (3, 200, 3)
    if args.smoke:
        runs, cells, repeats = (1, 50, 1)
    results = {
        "load_ext": load_ext_cost(runs),
        "per_cell": per_cell_cost(cells, repeats),
        "isolation": isolation_cost(repeats * 5),
    }
    rows = rows_of(results)
    cell = results["per_cell"]
    print_rows(rows)
    print(
        f"run_cell('pass'): bare {cell['bare_run_cell_us']:.1f} us, extension loaded "
        f"{cell['loaded_run_cell_us']:.1f} us, "
        f"with --every-cell {cell['every_cell_run_cell_us']:.1f} us"
    )
    write_json(args.json, "seeding", rows, details=results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
