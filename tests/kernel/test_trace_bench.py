"""bench/bench_trace.py runs (smoke sizes) and writes its rows: on a machine without CUDA
the CUDA rows say "not run" and why; the CPU rows have figures. No timing is asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench._common import NOT_RUN, path_first

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_trace_writes_its_rows(tmp_path):
    pytest.importorskip("torch")
    import torch

    out = tmp_path / "trace.json"
    done = subprocess.run(
        [sys.executable, "bench/bench_trace.py", "--smoke", "--json", str(out)],
        cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=path_first(str(ROOT))),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {row["name"]: row for row in json.loads(out.read_text())["rows"]}
    cuda = [row for name, row in rows.items() if name.endswith("(CUDA)")]
    assert len(cuda) == 3
    if not torch.cuda.is_available():
        assert all(row["result"] == NOT_RUN and "no CUDA device" in row["note"] for row in cuda)
    cpu = [row for name, row in rows.items() if name.endswith("(CPU)")]
    assert len(cpu) == 3 and all(row["ours"] is not None for row in cpu)
    assert rows["replay 2,000 events into the report (CPU)"]["ratio"] is not None
