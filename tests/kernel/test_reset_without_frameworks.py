"""`%gpu_reset`, `find_leftovers` and `%gpu_history` where neither torch nor NumPy can be
imported: no error, exceptions and frames are still released, and nothing is imported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench._common import path_first

ROOT = str(Path(__file__).resolve().parents[2])

SCRIPT = r"""
import tests.blocker as blocker
blocker.block("torch", "numpy", "cupy", "jax")
import sys, weakref
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "colab_gpu_guard")

class Payload:
    pass

shell.user_ns.update(Payload=Payload, weakref=weakref, refs={})
refs = shell.user_ns["refs"]
CELL = "def f():\n    p = Payload()\n    refs['p'] = weakref.ref(p)\n    raise ValueError\nf()"
shell.run_cell(CELL, store_history=True)
assert refs["p"]() is not None
shell.run_line_magic("gpu_reset", "--dry-run")
assert refs["p"]() is not None
shell.run_line_magic("gpu_reset", "")
assert refs["p"]() is None, "the failed frame's locals were not released"
from colab_gpu_guard.leftovers import find_leftovers
found = find_leftovers()
assert list(found) == [] and any("no array framework" in n for n in found.notes), found.notes
shell.run_line_magic("gpu_history", "")
bad = [m for m in ("torch", "numpy") if m in sys.modules]
print("OK", bad)
"""


@pytest.mark.slow
def test_reset_works_without_torch_or_numpy():
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={
            **os.environ,
            "PYTHONPATH": path_first(ROOT),
        },
    )
    assert "OK []" in done.stdout, done.stdout + done.stderr
    assert "gpu_reset --dry-run" in done.stdout and "memory history" in done.stdout
