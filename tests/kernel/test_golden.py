"""Every magic's output, byte for byte, against the text recorded in tests/golden/.

`tests/golden/scenario.py` runs one fixed session in a fresh interpreter (a plain IPython
shell, a fake two-GPU NVML, real CPU torch, host memory held still) and prints what every
magic, the panel's sections, the advisor and the CLI show. Code moved inside the package
must leave this text unchanged; a deliberate change of wording is recorded with
``CGG_UPDATE_GOLDEN=1 python -m pytest tests/kernel/test_golden.py`` and reviewed in the diff.
IPython 7 and 9 show the same magics, but their tracebacks differ in length (so do the
frame counts `%gpu_reset` reports): each major version has its own file.
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("numpy")
IPython = pytest.importorskip("IPython")

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
EXPECTED = GOLDEN / f"expected_ipython{IPython.version_info[0]}.txt"


@pytest.mark.slow
@pytest.mark.cpu_only
def test_every_magic_prints_what_it_printed_before():
    present = [name for name in ("cupy", "jax") if importlib.util.find_spec(name)]
    if present:  # %seed_all reports them: the recorded machine (CI's) has neither
        pytest.skip(f"recorded without {' and '.join(present)}")
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    done = subprocess.run(
        [sys.executable, str(GOLDEN / "scenario.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if os.environ.get("CGG_UPDATE_GOLDEN") == "1":
        EXPECTED.write_text(done.stdout, encoding="utf-8")
    assert EXPECTED.is_file(), f"no golden text for IPython {IPython.version_info[0]}"
    expected = EXPECTED.read_text(encoding="utf-8")
    if done.stdout != expected:
        diff = difflib.unified_diff(
            expected.splitlines(), done.stdout.splitlines(), "recorded", "now", lineterm=""
        )
        pytest.fail("the magics' output changed:\n" + "\n".join(list(diff)[:200]))
