"""No torch, no NumPy: every magic still gives clear messages, never a traceback.

Runs in a subprocess where torch and NumPy look uninstalled (tests/blocker.py); the
"minimal" CI environment runs the same checks with them really absent.
"""

from __future__ import annotations

from tests.blocker import run_in_blocked_shell


def test_seed_all_without_torch_or_numpy_reports_them_as_missing():
    result = run_in_blocked_shell(
        """
        import random
        ip.run_line_magic("seed_all", "42")
        first = random.random()
        ip.run_line_magic("seed_all", "42 --deterministic -v")
        assert random.random() == first
        print("DONE", "torch" in sys.modules, "numpy" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert (
        "seed 42: random seeded; not seeded: PyTorch (not installed), NumPy (not installed);"
        " deterministic off\n" in out
    )
    assert "skipped  PyTorch: not installed" in out  # the full report (-v)
    assert "skipped  NumPy: not installed" in out
    assert "no torch, so no torch flags were set" in out
    assert "DONE False False" in out
    assert "Traceback" not in out + result.stderr


def test_worker_helpers_without_torch_say_what_is_missing():
    result = run_in_blocked_shell(
        """
        from colab_gpu_guard import dataloader_generator
        try:
            dataloader_generator(1)
        except ModuleNotFoundError as error:
            print("ERR", error)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "ERR PyTorch is not installed: pip install torch" in result.stdout


def test_every_magic_and_the_cli_work_without_torch_or_numpy():
    result = run_in_blocked_shell(
        """
        for magic, line in [
            ("gpu_status", ""), ("gpu_status", "--json"), ("gpu_status", "--history"),
            ("gpu_history", ""), ("gpu_reset", "--dry-run"), ("gpu_reset", ""),
            ("gpu_reset", "--all"), ("gpu_advice", ""), ("gpu_advice", "off"),
            ("gpu_advice", "on"), ("gpu_panel", ""), ("gpu_panel", "--close"),
        ]:
            print("MAGIC", magic, line)
            ip.run_line_magic(magic, line)
        from colab_gpu_guard.__main__ import main
        print("CLI", main(["status"]), main(["status", "--json"]))
        print("DONE", "torch" in sys.modules, "numpy" in sys.modules)
        """
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "CLI 0 0" in out
    assert "DONE False False" in out
    assert "Traceback" not in out + result.stderr
    assert "NVML not available" in out or "NVML" in out
