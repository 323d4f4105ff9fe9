"""Run a script in a fresh interpreter with this checkout first on PYTHONPATH, and read the
JSON it prints: what GPU tests need when the process's CUDA state must start clean
(`run_python`), and what tests of a fresh torch need (`run_forked`: forked, not started)."""

from __future__ import annotations

import atexit
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
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        env=_environment(env),
        timeout=timeout,
        cwd=ROOT,
    )
    return _result(done, marker)


def _environment(env: Optional[dict]) -> dict:
    """`env` (default: os.environ) with this checkout first on PYTHONPATH."""
    environment = dict(os.environ if env is None else env)
    environment["PYTHONPATH"] = path_first(str(ROOT), environment)
    return environment


def _result(done: subprocess.CompletedProcess, marker: str = "") -> dict:
    """The JSON on the last line of `done`'s stdout starting with `marker`; without a
    marker, the last line, and the script must have exited cleanly."""
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


# ---------------------------------------------------------------- a fresh torch, forked

# One interpreter imports torch and this package, then forks once per script: each child
# is a new process whose torch has never run anything (the state a fresh interpreter's
# torch is in), for a fork instead of a 3 s start. Only for scripts that need nothing from
# the interpreter's start: variables torch reads on import, CPU affinity and the hash seed
# need `run_python`. Every child shares the parent's random state: seed in the script.
_ZYGOTE = r"""
import json, os, sys, tempfile
import torch
import colab_gpu_guard
for line in sys.stdin:
    request = json.loads(line)
    out, err = (tempfile.TemporaryFile("w+") for _ in range(2))
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        sys.argv = ["-c", *request["args"]]
        status = 0
        try:
            exec(compile(request["code"], "<forked>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except BaseException:
            import traceback
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    _, waited = os.waitpid(pid, 0)
    out.seek(0)
    err.seek(0)
    reply = {"rc": os.waitstatus_to_exitcode(waited), "stdout": out.read(), "stderr": err.read()}
    out.close()
    err.close()
    print(json.dumps(reply), flush=True)
"""

_zygotes: dict[tuple, subprocess.Popen] = {}


def fork_python(
    code: str, env: Optional[dict] = None, args: tuple[str, ...] = ()
) -> subprocess.CompletedProcess:
    """`code` run as ``python -c code *args`` would run it (`env` replaces os.environ), in a
    child forked from an interpreter that imported torch and ran nothing (one per `env`,
    kept until exit): its exit status and output."""
    environment = _environment(env)
    environment.pop("PYTEST_CURRENT_TEST", None)  # pytest's, new in every test
    key = tuple(sorted(environment.items()))
    zygote = _zygotes.get(key)
    if zygote is None or zygote.poll() is not None:
        zygote = _zygotes[key] = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
            cwd=ROOT,
        )
    assert zygote.stdin is not None and zygote.stdout is not None
    zygote.stdin.write(json.dumps({"code": textwrap.dedent(code), "args": list(args)}) + "\n")
    zygote.stdin.flush()
    line = zygote.stdout.readline()
    assert line, f"the forking interpreter exited ({zygote.poll()})"
    done = json.loads(line)
    return subprocess.CompletedProcess(
        ["python", "-c", code, *args], done["rc"], done["stdout"], done["stderr"]
    )


def run_forked(code: str, env: Optional[dict] = None, args: tuple[str, ...] = ()) -> dict:
    """`run_python(code, env, args=args)` in a forked child (`fork_python`): the JSON on
    the last line of stdout; the script must exit cleanly."""
    return _result(fork_python(code, env, args))


@atexit.register
def _stop_zygotes() -> None:
    for zygote in _zygotes.values():
        if zygote.poll() is None and zygote.stdin is not None:
            zygote.stdin.close()  # its loop ends
            try:
                zygote.wait(10)
            except subprocess.TimeoutExpired:
                zygote.kill()
