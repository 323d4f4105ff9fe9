"""`python -m colab_gpu_guard status`: output, exit codes, --watch ended by SIGINT."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from colab_gpu_guard import nvml
from colab_gpu_guard.__main__ import CLEAR_SCREEN, main
from colab_gpu_guard.status import GpuStatus
from tests import fake_pynvml

ROOT = Path(__file__).resolve().parents[2]
POSIX = os.name == "posix"


@pytest.fixture(autouse=True)
def real_pynvml_after():
    yield
    nvml.set_pynvml(None)


def _ctrl_c_as_at_a_terminal() -> None:
    # A job a script starts in the background inherits SIGINT ignored (POSIX), and Python
    # keeps an ignored SIGINT ignored: the child is given what a terminal gives it.
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def cli(*args: str, **kwargs) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, "-m", "colab_gpu_guard", *args],
        cwd=ROOT,
        env=env,
        stdout=kwargs.pop("stdout", subprocess.PIPE),
        stderr=subprocess.PIPE,
        preexec_fn=_ctrl_c_as_at_a_terminal if POSIX else None,
        **kwargs,
    )


def read_until(stream, needle: bytes, count: int, timeout: float = 30.0) -> bytes:
    """Read from a pipe/pty fd until `needle` was seen `count` times (or fail)."""
    fd = stream if isinstance(stream, int) else stream.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while data.count(needle) < count:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"timed out; got {data[-2000:]!r}"
        ready, _, _ = select.select([fd], [], [], remaining)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty whose child closed it
                chunk = b""
            assert chunk, f"stream closed early; got {data[-2000:]!r}"
            data += chunk
    return data


# ---------------------------------------------------------------- in-process


def test_status_prints_text_on_the_real_no_gpu_path(capsys):
    nvml.set_pynvml(None)
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("GPU status")
    assert "host RAM" in out
    if not nvml.snapshot().available:  # this machine: nvidia-ml-py finds no driver
        assert "No GPU: no NVIDIA driver on this machine" in out


def test_status_json_is_a_snapshot(capsys):
    assert main(["status", "--json"]) == 0
    snap = GpuStatus.from_json(capsys.readouterr().out)
    assert snap.leftovers is None  # a terminal has no notebook variables


def test_status_with_fake_gpus(capsys):
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))
    assert main(["status"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in out and "MIG 2:" in out and "<- this kernel" in out
    assert main(["status", "--json", "--processes"]) == 0
    snap = GpuStatus.from_json(capsys.readouterr().out)
    assert snap.gpu_count == 2 and snap.process_limit is None


def test_no_gpu_still_exits_zero(capsys):
    for world, line in (
        (fake_pynvml.no_library(), "No GPU: no NVIDIA driver on this machine"),
        (fake_pynvml.driver_not_loaded(), "NVML not available: the NVIDIA driver is not loaded"),
    ):
        nvml.set_pynvml(fake_pynvml.install(world))
        assert main(["status"]) == 0
        assert line in capsys.readouterr().out


@pytest.mark.parametrize("value", ["0", "-1", "abc", "nan", "inf", ""])
def test_watch_needs_a_positive_number(value, capsys):
    assert main(["status", "--watch", value]) == 2
    err = capsys.readouterr().err
    assert "--watch" in err and "above 0" in err


@pytest.mark.parametrize(
    "argv",
    [[], ["bogus"], ["status", "--nope"], ["status", "extra"], ["status", "--watch"]],
)
def test_bad_arguments_exit_2(argv, capsys):
    assert main(argv) == 2
    assert "usage:" in capsys.readouterr().err


def test_help_exits_0(capsys):
    assert main(["--help"]) == 0
    assert "status" in capsys.readouterr().out
    assert main(["status", "--help"]) == 0
    assert "--watch SECONDS" in capsys.readouterr().out


# ---------------------------------------------------------------- real processes


def test_module_runs_and_exits_0():
    process = cli("status")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    assert out.decode().startswith("GPU status")
    assert b"Traceback" not in err
    # a terminal (or a notebook's `!python -m ...`) is not the kernel: it says "this process"
    assert b"this kernel" not in out
    assert b"(PID" not in out or b"this process" in out


def test_status_names_the_installed_torch_from_its_metadata_without_importing_it():
    """The CLI never imports torch; it still says which torch is installed (it said "torch
    not imported" whatever was installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("torch")
    except PackageNotFoundError:
        pytest.skip("torch is not installed here")
    process = cli("status", "--json")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err.decode()
    torch_info = json.loads(out)["torch"]
    assert torch_info["version"] is None  # not imported
    assert torch_info["installed_version"] == version("torch")
    process = cli("status")
    out, _ = process.communicate(timeout=60)
    assert f"torch {version('torch')} installed, not imported in this process" in out.decode()


def test_module_bad_watch_exits_2_with_a_clear_message():
    process = cli("status", "--watch", "-3")
    _, err = process.communicate(timeout=60)
    assert process.returncode == 2
    assert b"expected a number of seconds above 0, got '-3'" in err


@pytest.mark.skipif(not POSIX, reason="needs POSIX signals")
def test_watch_repeats_and_ends_cleanly_on_sigint():
    process = cli("status", "--watch", "0.1")
    try:
        out = read_until(process.stdout, b"GPU status", 3)
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"KeyboardInterrupt" not in err
    assert CLEAR_SCREEN.encode() not in out + rest  # not a terminal: plain repeated output


@pytest.mark.skipif(not POSIX, reason="needs POSIX signals")
def test_watch_json_prints_one_document_per_line():
    process = cli("status", "--watch", "0.1", "--json")
    try:
        out = read_until(process.stdout, b"\n", 2)
        process.send_signal(signal.SIGINT)
        rest, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err.decode()
    lines = [line for line in (out + rest).decode().splitlines() if line]
    assert len(lines) >= 2
    assert all(json.loads(line)["schema_version"] == 1 for line in lines)


@pytest.mark.skipif(not POSIX, reason="needs a pseudo-terminal")
def test_watch_redraws_in_place_on_a_terminal():
    import pty

    leader, follower = pty.openpty()
    process = cli("status", "--watch", "0.1", stdout=follower)
    os.close(follower)
    try:
        out = read_until(leader, CLEAR_SCREEN.encode(), 2)
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
        os.close(leader)
    assert process.returncode == 0, err.decode()
    assert b"Ctrl-C to stop" in out
    assert b"Traceback" not in err


@pytest.mark.skipif(not POSIX, reason="needs POSIX pipes")
def test_a_reader_that_goes_away_ends_watch_quietly():
    process = cli("status", "--watch", "0.05")
    read_until(process.stdout, b"GPU status", 1)
    process.stdout.close()  # like `| head -1` exiting
    try:
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    err = process.stderr.read()
    assert process.returncode == 0, err.decode()
    assert b"Traceback" not in err and b"BrokenPipe" not in err


def test_a_failure_to_report_exits_1_with_one_line(monkeypatch, capsys):
    from colab_gpu_guard import status

    def broken(**kwargs):
        raise RuntimeError("cannot read /proc")

    monkeypatch.setattr(status, "gpu_status", broken)
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err == "python -m colab_gpu_guard status: error: RuntimeError: cannot read /proc\n"
