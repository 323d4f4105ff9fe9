"""Run a script in a fresh interpreter with this checkout first on PYTHONPATH, and read the
JSON it prints: what GPU tests need when the process's CUDA state must start clean."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Optional

from bench._common import path_first

ROOT = Path(__file__).resolve().parent.parent


def run_python(
    code: str,
    env: Optional[dict] = None,
    marker: str = "",
    timeout: float = 300,
    args: tuple[str, ...] = (),
) -> dict:
    """The JSON on the last line of stdout starting with `marker`. Without a marker, the
    last line, and the script must exit cleanly. `env` replaces os.environ (PYTHONPATH
    keeps its entries after this checkout's root); `args` are the script's sys.argv[1:]."""
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = path_first(str(ROOT), environment)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        cwd=ROOT,
    )
    output = f"(exit {done.returncode})\n{done.stdout[-2000:]}{done.stderr[-4000:]}"
    if marker:
        lines = [line for line in done.stdout.splitlines() if line.startswith(marker)]
    else:
        assert done.returncode == 0, output
        lines = done.stdout.strip().splitlines()[-1:]
    assert lines, f"no result {output}"
    return json.loads(lines[-1][len(marker) :])


MARK = "ADVISOR-RESULT:"
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
