"""Smoke test: `python -m bench --quick --smoke` runs every benchmark and writes every row.

No timing assertions: the machines are shared and noisy; the numbers live in
docs/benchmarks.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench._common import path_first

ROOT = Path(__file__).resolve().parents[2]
FIELDS = ("name", "ours", "baseline_or_peer", "unit", "ratio", "target", "result", "note")
BENCHES = ("seeding", "tracker", "leftovers", "reset", "status", "panel")

pytest.importorskip("torch")


@pytest.mark.slow
def test_bench_runs_in_smoke_mode(tmp_path):
    out = tmp_path / "bench.json"
    env = dict(os.environ, PYTHONPATH=path_first(str(ROOT)))
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["mode"] == "smoke"
    assert {"cpu", "cores", "python", "torch", "date"} <= set(payload["machine"])
    rows = payload["rows"]
    assert {row["bench"] for row in rows} == set(BENCHES)
    for row in rows:
        assert set(FIELDS) <= set(row), row
        assert row["result"] != "error", row
    names = " | ".join(row["name"] for row in rows)
    for expected in (
        "%load_ext",
        "per cell added",
        "find_leftovers, ",
        "gpu_reset, ",
        "gpu_status()",
        "panel",
    ):
        assert expected in names
    assert "benchmark" in done.stdout and "JSON:" in done.stdout


@pytest.mark.slow
def test_bench_versions_compares_this_checkout_with_a_commit(tmp_path):
    out = tmp_path / "versions.json"
    env = dict(os.environ, PYTHONPATH=path_first(str(ROOT)))
    done = subprocess.run(
        [sys.executable, "bench/bench_versions.py", "--against", "HEAD", "--smoke"]
        + ["--json", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [row["name"].split(",")[0] for row in rows] == [
        "%load_ext colab_gpu_guard",
        "per cell added by the hooks",
        "the tracker's pre_run_cell + post_run_cell alone",
        "find_leftovers()",  # of tensors
        "find_leftovers()",  # of one tensor's rows
        "find_leftovers()",  # of pandas frames
        "gpu_status() as text",
    ]
    for row in rows:
        assert row["ours"] is not None and row["baseline_or_peer"] is not None, row
        assert row["baseline"] == "commit HEAD"


def test_live_slowdown_verdict_says_when_the_machine_cannot_tell():
    from bench.bench_panel_live import LiveCost

    def verdict(slowdown: float, same: tuple) -> object:
        cost = LiveCost(1.0, 2.0, 1.0, 0.01, 1.3, slowdown, same, 3, "fake NVML")
        return cost.lines()[-1]

    assert verdict(0.99, (0.99, 1.01, 1.0))[1] is True
    assert verdict(0.90, (0.99, 1.01, 1.0))[1] is False  # quiet machine: a real slowdown
    text, ok = verdict(0.90, (0.75, 1.2, 1.0))  # live off varies more than 3%
    assert ok is None and "CANNOT TELL" in text
    assert verdict(0.60, (0.75, 1.2, 1.0))[1] is False  # below even the noise
