"""%%gpu_trace and %gpu_trace on without torch: one line naming what is missing, the cell
runs untraced, never a traceback (a subprocess where torch looks uninstalled)."""

from __future__ import annotations

from tests.blocker import run_in_blocked_shell


def test_gpu_trace_without_torch_says_so_in_one_line_and_runs_the_cell():
    result = run_in_blocked_shell(
        """
        ran = ip.run_cell("%%gpu_trace\\nvalue = 21 * 2\\n", store_history=True)
        print("VALUE", ip.user_ns["value"], ran.success)
        ip.run_line_magic("gpu_trace", "on")
        print("DONE", "torch" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        "gpu_trace: PyTorch is not installed: pip install torch (see the README for CUDA "
        "builds); the cell ran untraced\n" in out
    )
    assert "VALUE 42 True" in out
    assert "; cells run untraced\n" in out
    assert "DONE False" in out
    assert "Traceback" not in out + result.stderr
