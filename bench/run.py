"""Run every benchmark, each in its own fresh interpreter, and print one table.

Usage: python -m bench [--quick] [--smoke] [--json PATH] [--only NAME ...]

Each script writes uniform rows (name, ours, baseline_or_peer, unit, ratio, target,
result, note) as JSON; this runner collects them, prints one table and writes all of it,
with the machine (CPU model, cores, Python, torch) and date, to ``--json`` (default
``bench/results/latest.json``). Ratios are measured within one run: compare ratios, not
absolute times, across runs. A script that does not write JSON (the panel bench, when it
has no ``--json``) gets a "see output" row and its printed table is kept verbatim.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import SEE_OUTPUT, machine, path_first, print_rows, row  # noqa: E402

# (name, script, what it covers in issue 8)
BENCHES = (
    ("seeding", "bench_seeding.py", "1. %load_ext cost; every-cell reseed hook"),
    ("tracker", "bench_tracker.py", "2. per-cell hook cost vs ipyexperiments CellLogger"),
    ("leftovers", "bench_leftovers.py", "3. find_leftovers vs gc scan and MemReporter"),
    ("reset", "bench_reset.py", "4. gpu_reset vs %reset -f out + gc + empty_cache"),
    ("status", "bench_status.py", "5. gpu_status vs nvidia-smi -q and gpustat"),
    ("panel", "bench_panel.py", "6. panel refresh cost"),
)
TIMEOUT_S = {"full": 1800, "quick": 600, "smoke": 300}


SHARED_OPTIONS = ("--quick", "--smoke", "--json")  # what _common.bench_parser gives


def accepts(script: Path, option: str) -> bool:
    try:
        text = script.read_text()
    except OSError:
        return False
    return f'"{option}"' in text or (option in SHARED_OPTIONS and "bench_parser(" in text)


def run_one(name: str, script: str, mode: str, scratch: str) -> dict:
    path = HERE / script
    argv = [sys.executable, str(path)]
    if mode in ("quick", "smoke"):
        argv.append("--quick")
    if mode == "smoke" and accepts(path, "--smoke"):
        argv.append("--smoke")
    out_json = None
    if accepts(path, "--json"):
        out_json = os.path.join(scratch, f"{name}.json")
        argv += ["--json", out_json]
    env = dict(os.environ, PYTHONPATH=path_first(str(ROOT)))
    start = time.perf_counter()
    try:
        done = subprocess.run(
            argv,
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S[mode],
        )
        rc, stdout, stderr = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as error:
        rc, stdout, stderr = "timeout", error.stdout or "", error.stderr or ""
        stdout = stdout.decode() if isinstance(stdout, bytes) else stdout
        stderr = stderr.decode() if isinstance(stderr, bytes) else stderr
    seconds = time.perf_counter() - start
    rows: list[dict] = []
    if out_json and os.path.exists(out_json):
        with open(out_json) as handle:
            rows = json.load(handle)["rows"]
    elif out_json is None and rc != "timeout" and stdout.strip():
        rows = [
            row(
                name,
                f"{name}: {script} (no --json)",
                None,
                result=SEE_OUTPUT,
                note=f"its own table is printed below (exit status {rc}; 1: a target failed)",
            )
        ]
    if not rows:
        rows = [
            row(
                name,
                f"{name}: {script}",
                None,
                result="error",
                note=f"exit status {rc}: {(stderr or stdout).strip().splitlines()[-1:]}",
            )
        ]
    return {
        "name": name,
        "script": f"bench/{script}",
        "argv": argv[1:],
        "rc": rc,
        "seconds": round(seconds, 1),
        "rows": rows,
        "stdout": stdout,
        "stderr_tail": "\n".join(stderr.strip().splitlines()[-20:]),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer runs")
    parser.add_argument(
        "--smoke", action="store_true", help="tiny sizes, for the test suite (implies --quick)"
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default=str(HERE / "results" / "latest.json"),
        help="where to write the JSON (default: bench/results/latest.json)",
    )
    parser.add_argument("--only", nargs="*", metavar="NAME", help="run only these benches")
    args = parser.parse_args(argv)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    selected = [bench for bench in BENCHES if not args.only or bench[0] in args.only]
    info = machine()
    print(
        f"colab_gpu_guard benchmarks ({mode}) on {info['cpu']}, {info['cores']} cores, "
        f"Python {info['python']}, torch {info['torch']}, {info['date']}"
    )
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, script, what in selected:
            print(f"  running {script} ({what}) ...", flush=True)
            results.append(run_one(name, script, mode, scratch))
    rows = [item for result in results for item in result["rows"]]
    print()
    print_rows(rows)
    for result in results:
        if any(item["result"] == SEE_OUTPUT for item in result["rows"]):
            print(f"\n--- {result['script']} output (verbatim) ---\n{result['stdout'].rstrip()}")
    failed = [item["name"] for item in rows if item["result"] in ("FAIL", "error")]
    print(f"\n{len(rows)} rows; {len(failed)} FAIL/error" + (f": {failed}" if failed else ""))
    payload = {
        "machine": info,
        "mode": mode,
        "rows": rows,
        "scripts": [
            {key: result[key] for key in ("name", "script", "argv", "rc", "seconds")}
            for result in results
        ],
        "outputs": {result["name"]: result["stdout"] for result in results},
        "stderr_tails": {r["name"]: r["stderr_tail"] for r in results if r["stderr_tail"]},
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as handle:
        json.dump(payload, handle, indent=2, default=str)
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
