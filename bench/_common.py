"""Shared pieces of the benchmark scripts: uniform result rows, JSON output, machine info.

Every script can run on its own (``python bench/bench_x.py [--quick] [--smoke] [--json P]``)
and is also run by ``python -m bench``, which collects the rows each one writes.
A row compares *ours* with a baseline or peer measured in the same run; absolute times are
not comparable across runs on these shared machines, ratios are.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from typing import Any, Callable, Optional

PASS, FAIL, NOT_RUN, INFO, SEE_OUTPUT = "PASS", "FAIL", "not run", "-", "see output"
ROW_FIELDS = (
    "bench",
    "name",
    "ours",
    "baseline_or_peer",
    "baseline",
    "unit",
    "ratio",
    "target",
    "result",
    "note",
)


def row(
    bench: str,
    name: str,
    ours: Optional[float],
    baseline_value: Optional[float] = None,
    *,
    baseline: str = "",
    unit: str = "ms",
    target: str = "",
    ok: Optional[bool] = None,
    result: Optional[str] = None,
    note: str = "",
) -> dict[str, Any]:
    """One result row; ``ratio`` = ours / baseline (below 1: ours is faster/smaller)."""
    ratio = None
    if ours is not None and baseline_value:
        ratio = ours / baseline_value
    if result is None:
        result = INFO if ok is None else (PASS if ok else FAIL)
    return {
        "bench": bench,
        "name": name,
        "ours": ours,
        "baseline_or_peer": baseline_value,
        "baseline": baseline,
        "unit": unit,
        "ratio": ratio,
        "target": target,
        "result": result,
        "note": note,
    }


def machine() -> dict[str, Any]:
    """CPU model, cores, Python and torch versions, date (never imports torch)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    torch_version = "not installed"
    try:
        from importlib.metadata import version

        torch_version = version("torch")
    except Exception:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch_version,
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
    }


def write_json(path: Optional[str], bench: str, rows: list[dict], **extra: Any) -> None:
    if not path:
        return
    with open(path, "w") as handle:
        json.dump({"bench": bench, "rows": rows, **extra}, handle, indent=2, default=str)


def fmt(value: Optional[float], unit: str = "") -> str:
    if value is None:
        return "-"
    if abs(value) >= 100:
        text = f"{value:.0f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    return f"{text} {unit}".strip()


def print_rows(rows: list[dict]) -> None:
    """The uniform table: what, ours, baseline/peer, ratio, target, result."""
    header = (
        f"{'benchmark':48} {'ours':>12} {'baseline/peer':>14} {'ratio':>7}  "
        f"{'target':28} {'result':10} note"
    )
    print(header)
    print("-" * len(header))
    for item in rows:
        ratio = "-" if item["ratio"] is None else f"{item['ratio']:.3g}x"
        print(
            f"{item['name'][:48]:48} {fmt(item['ours'], item['unit']):>12} "
            f"{fmt(item['baseline_or_peer'], item['unit']):>14} {ratio:>7}  "
            f"{item['target'][:28]:28} {item['result']:10} "
            + "; ".join(
                part
                for part in (item["baseline"] and "vs " + item["baseline"], item["note"])
                if part
            )
        )


def p90(samples: list[float]) -> float:
    """The 90th percentile by nearest rank: the smallest sample >= 90% of the samples."""
    ordered = sorted(samples)
    return ordered[max(0, math.ceil(0.9 * len(ordered)) - 1)]


def timed_ms(function: Callable[[], object], runs: int, warmup: int = 3) -> list[float]:
    """`runs` wall-clock samples of `function()` in milliseconds, after `warmup` calls."""
    for _ in range(warmup):
        function()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        samples.append((time.perf_counter() - start) * 1e3)
    return samples


def interleaved_ms(
    functions: dict[str, Callable[[], object]], runs: int, warmup: int = 3
) -> dict[str, list[float]]:
    """`runs` samples (ms) of each function, taken in rounds that call each one in turn, so
    that machine noise drifting over the run hits them alike."""
    for _ in range(warmup):
        for function in functions.values():
            function()
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(runs):
        for name, function in functions.items():
            start = time.perf_counter()
            function()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return samples


def bench_parser(description: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every bench script takes: --quick, --smoke (test suite), --json PATH."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes (test suite)")
    parser.add_argument("--json", metavar="PATH", help="also write the result rows as JSON")
    return parser


def path_first(root: str, env: Optional[dict] = None) -> str:
    """PYTHONPATH for a child interpreter: `root` first, then whatever `env` (default: this
    process's environment) had (IPython itself may come from a PYTHONPATH entry, as on the
    lent GPU machine)."""
    existing = (os.environ if env is None else env).get("PYTHONPATH")
    return os.pathsep.join(part for part in (root, existing) if part)


def print_verdicts(lines) -> int:
    """Print (text, ok) lines, ok None for a line without a target, then PASS or FAIL;
    the exit status: 1 when any target failed."""
    failed = False
    for text, ok in lines:
        failed |= ok is False
        print(text if ok is None else f"{text}: {'PASS' if ok else 'FAIL'}")
    print("FAIL" if failed else "PASS")
    return 1 if failed else 0
