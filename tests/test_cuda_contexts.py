"""Which CUDA devices this process has a context on: only those are ever visited."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from colab_gpu_guard.frameworks import torch as torch_support

ROOT = Path(__file__).resolve().parent.parent


def test_no_context_without_cuda_started():
    torch = pytest.importorskip("torch")
    if torch_support.cuda_initialized(torch):
        pytest.skip("CUDA already started in this process")
    assert torch_support.devices_with_context(torch) == []
    assert not torch_support.cuda_initialized(torch)  # asking started nothing


@pytest.mark.gpu
def test_gpu_context_only_where_a_tensor_was_made():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    body = textwrap.dedent(
        """
        import torch
        from colab_gpu_guard.frameworks import torch as torch_support
        torch.zeros(1, device="cuda:0")
        print(torch_support.devices_with_context(torch), torch.cuda.device_count())
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    devices, count = done.stdout.split("]")
    assert devices.strip() == "[0"
    assert int(count) >= 1
