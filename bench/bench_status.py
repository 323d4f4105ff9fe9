"""Cost of a GPU status snapshot (`gpu_status()`), its views, and the CLI.

Run: python bench/bench_status.py [--quick] [--smoke] [--json PATH]

Peer (issue 8, row 5): gpustat's ``GPUStatCollection.new_query()`` - it needs NVML, so
without a GPU its row says "not run: no GPU" rather than inventing a number.

Prints medians (and p90) and ratios against baselines measured in this same run:
- `nvidia-smi -q` as a subprocess, when nvidia-smi exists (what a user would otherwise run);
- an uncached `pynvml.nvmlInit()` attempt per snapshot (what not caching the init costs);
- `python -c pass`, for the CLI's interpreter start-up.
Targets (issue 4): a full snapshot in <= 5 ms per GPU on a real GPU, <= 10 ms without a GPU.
No GPU here means the no-GPU target is the one checked; on a GPU machine both NVML and the
per-GPU target are measured for real.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import NOT_RUN, bench_parser, p90, print_rows, row, write_json  # noqa: E402
from bench._common import timed_ms as timed  # noqa: E402
from colab_gpu_guard import nvml  # noqa: E402
from colab_gpu_guard.status import gpu_status  # noqa: E402

NO_GPU_TARGET_MS = 10.0
PER_GPU_TARGET_MS = 5.0


def subprocess_ms(argv: list[str], runs: int, env: Optional[dict] = None) -> list[float]:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=False, env=env, cwd=ROOT)
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def uncached_init() -> None:
    """What a snapshot pays per call when the init (or its failure) is not cached."""
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return
    pynvml.nvmlShutdown()


def compiled_env() -> dict:
    """An environment for fresh processes that reuses compiled bytecode, as an installed
    package does (this checkout may run with PYTHONDONTWRITEBYTECODE=1)."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "colab_gpu_guard_bench")
    return env


def cold_first_snapshot_ms(runs: int) -> list[float]:
    code = (
        "import time; t = time.perf_counter(); "
        "from colab_gpu_guard.status import gpu_status; gpu_status(leftovers=False); "
        "print((time.perf_counter() - t) * 1e3)"
    )
    env = compiled_env()
    subprocess.run([sys.executable, "-c", code], capture_output=True, env=env, check=True)
    samples = []
    for _ in range(runs):
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
        ).stdout
        samples.append(float(out.strip().splitlines()[-1]))
    return samples


def main(argv: Optional[list[str]] = None) -> int:
    parser = bench_parser(__doc__.splitlines()[0], "fewer repetitions")
    args = parser.parse_args(argv)
    runs = 50 if args.quick else 400
    process_runs = 3 if args.quick else 10
    if args.smoke:
        runs, process_runs = 10, 1

    nvml.set_pynvml(None)
    first = gpu_status(leftovers=False)
    gpus = first.gpu_count if first.nvml.available else 0
    target = PER_GPU_TARGET_MS * gpus if gpus else NO_GPU_TARGET_MS
    target_text = f"<= {target:g} ms" + (f" ({gpus} GPU x 5 ms)" if gpus else " (no GPU)")
    env = compiled_env()
    subprocess.run(
        [sys.executable, "-m", "colab_gpu_guard", "status"],
        env=env,
        check=False,
        capture_output=True,
        cwd=ROOT,
    )  # compile once

    rows = []  # (case, samples, baseline name or None, target ms or None)
    smi = shutil.which("nvidia-smi")
    baselines: dict[str, list[float]] = {}
    if smi:
        baselines["nvidia-smi -q"] = subprocess_ms([smi, "-q"], process_runs)
    baselines["uncached nvmlInit"] = timed(uncached_init, runs)
    baselines["python -c pass"] = subprocess_ms([sys.executable, "-c", "pass"], process_runs)
    snapshot_baseline = "nvidia-smi -q" if smi else "uncached nvmlInit"

    rows.append(("nvml.snapshot()", timed(nvml.snapshot, runs), snapshot_baseline, None))
    rows.append(
        (
            "gpu_status(leftovers=False)",
            timed(lambda: gpu_status(leftovers=False), runs),
            snapshot_baseline,
            target,
        )
    )
    rows.append(
        (
            "gpu_status() (+leftovers)",
            timed(lambda: gpu_status(namespace={}), runs),
            snapshot_baseline,
            None,
        )
    )
    snap = gpu_status(leftovers=False)
    rows.append(("  .to_text()", timed(snap.to_text, runs), None, None))
    rows.append(("  .to_html()", timed(snap.to_html, runs), None, None))
    rows.append(("  .to_json()", timed(snap.to_json, runs), None, None))
    rows.append(("first snapshot, fresh process", cold_first_snapshot_ms(process_runs), None, None))
    rows.append(
        (
            "python -m colab_gpu_guard status",
            subprocess_ms(
                [sys.executable, "-m", "colab_gpu_guard", "status"], process_runs, env=env
            ),
            "nvidia-smi -q" if smi else "python -c pass",
            None,
        )
    )
    try:  # in a notebook torch is usually imported: its version and CUDA state are read
        import torch  # noqa: F401

        rows.append(
            (
                "gpu_status(), torch imported",
                timed(lambda: gpu_status(leftovers=False), runs),
                snapshot_baseline,
                target,
            )
        )
    except ImportError:
        pass
    # Our own per-GPU Python cost, on the fake two-GPU machine from the tests.
    try:
        sys.path.insert(0, str(ROOT))
        from tests import fake_pynvml

        nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))
        rows.append(
            (
                "gpu_status, fake 2 GPUs",
                timed(lambda: gpu_status(leftovers=False), runs),
                None,
                2 * PER_GPU_TARGET_MS,
            )
        )
    except ImportError:
        pass
    finally:
        nvml.set_pynvml(None)

    print(f"python {sys.version.split()[0]} on {sys.platform}; NVML: {first.nvml}")
    if not smi:
        print("nvidia-smi not found: no nvidia-smi baseline on this machine; the snapshot")
        print("is compared with an uncached nvmlInit attempt instead.")
    print()
    header = (
        f"{'case':34} {'median ms':>10} {'p90 ms':>8}  {'baseline':18} {'base ms':>8} "
        f"{'ratio':>7}  {'target':24} {'pass':4}"
    )
    print(header)
    print("-" * len(header))
    for name, samples in baselines.items():
        print(f"{'[baseline] ' + name:34} {statistics.median(samples):10.3f} {p90(samples):8.3f}")
    failed = False
    for case, samples, baseline, case_target in rows:
        median = statistics.median(samples)
        base_text, base_ms, ratio = "", "", ""
        if baseline is not None and baseline in baselines:
            base = statistics.median(baselines[baseline])
            base_text, base_ms, ratio = baseline, f"{base:.3f}", f"{median / base:.3f}"
        target_cell, verdict = "", ""
        if case_target is not None:
            target_cell = f"<= {case_target:g} ms"
            if case_target == target and not case.startswith("gpu_status, fake"):
                target_cell = target_text
            ok = median <= case_target
            failed |= not ok
            verdict = "PASS" if ok else "FAIL"
        print(
            f"{case:34} {median:10.3f} {p90(samples):8.3f}  {base_text:18} {base_ms:>8} "
            f"{ratio:>7}  {target_cell:24} {verdict}"
        )
    print()
    print("ratio = median / baseline median (below 1: faster than the baseline).")
    print("Fresh-process rows import the package (bytecode compiled once beforehand).")
    out_rows = uniform_rows(rows, baselines, gpus, target, runs, smi)
    print()
    print_rows(out_rows)
    write_json(args.json, "status", out_rows)
    return 1 if failed else 0


def gpustat_samples(runs: int) -> tuple[Optional[list[float]], str]:
    """gpustat's new_query() per call, or (None, why it could not run)."""
    try:
        import gpustat
    except Exception as error:
        return None, f"gpustat not importable ({type(error).__name__})"
    try:
        gpustat.new_query()
    except Exception as error:
        return None, f"no GPU: gpustat.new_query() raised {type(error).__name__}"
    return timed(gpustat.new_query, runs), "gpustat.new_query()"


def uniform_rows(rows, baselines, gpus, target, runs, smi) -> list[dict]:
    by_case = {case: samples for case, samples, _b, _t in rows}
    ours = statistics.median(by_case["gpu_status(leftovers=False)"])
    per_gpu = ours / gpus if gpus else None
    where = f"{gpus} GPU(s), per GPU" if gpus else "no GPU here"
    out = [
        row(
            "status",
            "gpu_status() snapshot (no-GPU path)" if not gpus else "gpu_status() per GPU",
            per_gpu if gpus else ours,
            statistics.median(baselines["uncached nvmlInit"]),
            baseline="uncached nvmlInit attempt",
            target=f"<= {PER_GPU_TARGET_MS:g} ms per GPU" if gpus else f"<= {target:g} ms",
            ok=(per_gpu if gpus else ours) <= (PER_GPU_TARGET_MS if gpus else target),
            note=where,
        )
    ]
    if smi:
        smi_ms = statistics.median(baselines["nvidia-smi -q"])
        out.append(
            row(
                "status",
                "gpu_status() vs nvidia-smi -q",
                per_gpu if gpus else ours,
                smi_ms / max(gpus, 1),
                baseline="nvidia-smi -q subprocess (per GPU)",
                note=where,
            )
        )
    else:
        out.append(
            row(
                "status",
                "gpu_status() vs nvidia-smi -q",
                ours,
                result=NOT_RUN,
                note="no GPU: nvidia-smi not found",
            )
        )
    samples, why = gpustat_samples(runs)
    if samples is None:
        out.append(
            row("status", "gpu_status() vs gpustat new_query()", ours, result=NOT_RUN, note=why)
        )
    else:
        out.append(
            row(
                "status",
                "gpu_status() vs gpustat new_query()",
                per_gpu if gpus else ours,
                statistics.median(samples) / max(gpus, 1),
                baseline="gpustat.new_query() (per GPU)",
                note=where,
            )
        )
    if "gpu_status, fake 2 GPUs" in by_case:
        fake = statistics.median(by_case["gpu_status, fake 2 GPUs"])
        out.append(
            row(
                "status",
                "gpu_status() per GPU, fake 2-GPU NVML",
                fake / 2,
                target=f"<= {PER_GPU_TARGET_MS:g} ms per GPU",
                ok=fake / 2 <= PER_GPU_TARGET_MS,
                note="our Python cost per GPU (tests/fake_pynvml.py)",
            )
        )
    return out


if __name__ == "__main__":
    sys.exit(main())
