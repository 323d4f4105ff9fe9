"""CUBLAS_WORKSPACE_CONFIG on a real GPU: what the detection says is what torch does.

torch before 2.10 reads the variable once, at the first cuBLAS matmul of the process
(ATen ``Context::alertCuBLASConfigNotDeterministic`` keeps it in a function-local static);
torch 2.10 and later do not check it at all (pytorch/pytorch#161749). Each case runs in a
fresh interpreter, since the first matmul fixes the answer for the rest of the process.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from tests.child import run_python

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.gpu

torch = pytest.importorskip("torch")

from colab_gpu_guard.seeding import determinism  # noqa: E402

MATMUL = """
def matmul():
    a = torch.randn(64, 64, device="cuda")
    try:
        (a @ a).sum().item()
        return None
    except RuntimeError as error:
        return str(error)
"""


def run(body: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    return run_python("import json, os, torch\n" + MATMUL + textwrap.dedent(body), env)


@pytest.fixture(scope="module")
def needed() -> bool:
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    requirement = determinism.cublas_requirement(torch)
    assert requirement.needed is not None, requirement.evidence
    return bool(requirement.needed)


def test_detection_agrees_with_a_deterministic_matmul_without_the_variable(needed):
    result = run(
        """
        from colab_gpu_guard.seeding import determinism
        torch.use_deterministic_algorithms(True)
        error = matmul()
        scan = determinism.cublas_requirement_from_libraries(
            determinism._torch_libraries(torch)).needed
        print(json.dumps(dict(error=error, scan=scan, version=torch.__version__)))
        """
    )
    raised = result["error"] is not None
    assert raised == needed, result
    assert result["scan"] in (needed, None), result  # the slow path agrees where it can tell
    if raised:
        assert "CUBLAS_WORKSPACE_CONFIG" in result["error"]
    if determinism.cublas_requirement_from_version(torch.__version__) is not None:
        assert needed is (tuple(int(p) for p in torch.__version__.split(".")[:2]) < (2, 10))


def test_setting_it_after_cuda_started_but_before_the_first_matmul_is_in_time(needed):
    """What the old wording ("set before CUDA started") got wrong."""
    if not needed:
        pytest.skip("this torch does not check CUBLAS_WORKSPACE_CONFIG")
    result = run(
        """
        from colab_gpu_guard import seed_all
        torch.zeros(1, device="cuda")  # CUDA started, a context made, no cuBLAS call yet
        report = seed_all(0, deterministic=True)
        print(json.dumps(dict(error=matmul(), warnings=report.warnings,
                              value=os.environ.get("CUBLAS_WORKSPACE_CONFIG"))))
        """
    )
    assert result["value"] == ":4096:8"
    assert result["error"] is None, result
    assert any("a cuBLAS matmul may have run" in w for w in result["warnings"]), result


def test_setting_it_after_the_first_matmul_is_too_late(needed):
    if not needed:
        pytest.skip("this torch does not check CUBLAS_WORKSPACE_CONFIG")
    result = run(
        """
        from colab_gpu_guard import seed_all
        assert matmul() is None  # deterministic mode off: torch reads the variable now
        seed_all(0, deterministic=True)
        late = matmul()
        seed_all(0, warn_only=True)  # the advice's no-restart way out
        print(json.dumps(dict(late=late, warn_only=matmul())))
        """
    )
    assert result["late"] is not None and "CuBLAS" in result["late"], result
    assert result["warn_only"] is None, result
