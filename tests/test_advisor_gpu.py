"""The advisor against real CUDA errors, each in a fresh subprocess (a device-side assert
ruins the CUDA context of the process it happens in). Skipped without a CUDA device."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MARK = "ADVISOR-RESULT:"

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

PRELUDE = """
import json, sys, time
import IPython
from IPython.testing.globalipapp import start_ipython
ip = start_ipython() or IPython.get_ipython()
ip.run_line_magic("load_ext", "colab_gpu_guard")
def report(**values):
    sys.stdout.flush()
    print("ADVISOR-RESULT:" + json.dumps(values), flush=True)
"""


def run_script(body: str, timeout: float = 300) -> tuple[dict, str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("CUDA_LAUNCH_BLOCKING", None)
    done = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env=env,
    )
    output = done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith(MARK)]
    assert lines, f"no result (exit {done.returncode}):\n{output[-4000:]}"
    return json.loads(lines[-1][len(MARK) :]), output


def test_real_device_side_assert_says_restart_and_status_reports_broken_quickly():
    result, output = run_script(
        """
        ip.run_cell(
            "import torch\\n"
            "x = torch.zeros(2, device='cuda')[torch.tensor([5], device='cuda')]\\n"
            "torch.cuda.synchronize()\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        started = time.monotonic()
        state = cuda_health.health().state
        status_health, status_text = None, ""
        try:
            from colab_gpu_guard import status
        except ImportError:
            status = None
        if status is not None:
            snapshot = status.gpu_status(leftovers=False)
            status_health, status_text = snapshot.torch.health, str(snapshot)
        elapsed = time.monotonic() - started
        report(state=state, status_health=status_health, status_text=status_text,
               elapsed=elapsed, error=type(sys.last_value).__name__)
        """
    )
    assert "device-side assert triggered" in output
    assert "CUDA advisor: the CUDA context is broken - restart required" in output
    assert "Restart session" in output and "CUDA_LAUNCH_BLOCKING=1" in output
    assert output.index("Traceback") < output.index("CUDA advisor:")
    assert result["state"] == "broken"
    if result["status_health"] is not None:
        assert result["status_health"] == "broken"
        assert "broken" in result["status_text"].lower()
    assert result["elapsed"] < 10.0


def test_real_cross_entropy_label_out_of_range_is_a_sticky_error():
    result, output = run_script(
        """
        ip.run_cell(
            "import torch, torch.nn.functional as F\\n"
            "logits = torch.randn(4, 3, device='cuda')\\n"
            "labels = torch.tensor([0, 1, 2, 3], device='cuda')  # 3 is out of range\\n"
            "loss = F.cross_entropy(logits, labels)\\n"
            "loss.item()\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        report(state=cuda_health.health().state)
        """
    )
    assert "restart required" in output and "CrossEntropyLoss" in output
    assert result["state"] == "broken"


def test_real_oom_gets_diagnosis_and_memory_returns_to_its_prior_level():
    result, output = run_script(
        """
        import torch
        torch.zeros(1, device="cuda")  # start CUDA before the baseline
        base = torch.cuda.memory_allocated()
        cell = (
            "def step():\\n"
            "    kept = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\\n"
            "    huge = torch.empty(2**50, dtype=torch.uint8, device='cuda')\\n"
            "step()\\n"
        )
        ip.run_cell(cell, store_history=True)
        error = type(sys.last_value).__name__
        after = torch.cuda.memory_allocated()
        ip.run_line_magic("gpu_advice", "off")  # the control: IPython alone keeps `kept`
        ip.run_cell(cell, store_history=True)
        after_plain = torch.cuda.memory_allocated()
        report(base=base, after=after, after_plain=after_plain, error=error)
        """
    )
    assert result["error"] == "OutOfMemoryError"
    assert "CUDA advisor: GPU out of memory" in output
    assert "requested" in output and "1024 TiB" in output
    assert "Released the failed cell's traceback frames" in output
    assert result["after"] == result["base"]
    assert result["after_plain"] >= result["base"] + 256 * 2**20
