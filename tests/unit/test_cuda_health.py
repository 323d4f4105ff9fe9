"""colab_gpu_guard.cuda_health: a synchronise that outlasts its time is busy, never broken;
only this process's own CUDA error is broken; a passing probe clears a wrong mark; only
devices with a context are synchronised; a forked child says so. Without a GPU, torch is a
stand-in whose synchronize blocks or raises on demand; the gpu tests use the real thing."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from colab_gpu_guard import cuda_health
from tests.child import run_python
from tests.fake_cuda import fake_torches

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_torch(monkeypatch):
    with fake_torches(monkeypatch) as use:
        yield use


def waited(detail: str) -> float:
    match = re.fullmatch(
        r"torch\.cuda\.synchronize\(\) on cuda:0 has not returned after (\d+\.\d) s", detail
    )
    assert match, detail
    return float(match.group(1))


# ---------------------------------------------------------------- busy is not broken


def test_a_synchronise_that_outlasts_its_time_is_busy_then_ok(fake_torch):
    torch = fake_torch()
    torch.cuda.release.clear()  # a long kernel is still running
    busy = cuda_health.health(probe=True, timeout=0.2)
    assert busy.state == "busy" and busy.busy and not busy.broken
    assert 0.2 <= waited(busy.detail) < 5
    assert cuda_health.broken_reason() is None
    # asked again while it still runs: no second synchronise, busy again
    again = cuda_health.health(probe=True, timeout=0.1)
    assert again.state == "busy" and waited(again.detail) >= 0.3
    assert torch.cuda.synced == [0]
    assert cuda_health.health().state == "busy"  # without a probe too
    threads = [t for t in threading.enumerate() if t.name == "colab_gpu_guard-sync"]
    assert len(threads) == 1
    torch.cuda.release.set()  # the kernel finishes
    assert cuda_health._running.done.wait(5)
    assert cuda_health.health() == cuda_health.ContextHealth("ok")
    assert cuda_health.health(probe=True, timeout=2) == cuda_health.ContextHealth("ok")
    assert torch.cuda.synced == [0, 0]  # the next probe synchronised afresh
    assert cuda_health.broken_reason() is None


def test_a_probe_waits_on_the_synchronise_already_running(fake_torch):
    torch = fake_torch()
    torch.cuda.release.clear()
    assert cuda_health.health(probe=True, timeout=0.05).busy
    threading.Timer(0.2, torch.cuda.release.set).start()
    assert cuda_health.health(probe=True, timeout=5).state == "ok"
    assert torch.cuda.synced == [0]


def test_an_error_raised_by_the_synchronise_is_broken_and_marked(fake_torch):
    torch = fake_torch()
    torch.cuda.error = RuntimeError("CUDA error: an illegal memory access was encountered")
    found = cuda_health.health(probe=True, timeout=2)
    expected = "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert found == cuda_health.ContextHealth("broken", expected)
    assert cuda_health.broken_reason() == expected
    assert cuda_health.health() == cuda_health.ContextHealth("broken", expected)


def test_a_busy_synchronise_that_later_fails_marks_broken(fake_torch):
    torch = fake_torch()
    torch.cuda.release.clear()
    torch.cuda.error = RuntimeError("CUDA error: device-side assert triggered")
    assert cuda_health.health(probe=True, timeout=0.05).busy
    torch.cuda.release.set()
    assert cuda_health._running.done.wait(5)
    assert cuda_health.health().state == "broken"


# ---------------------------------------------------------------- the mark


def test_a_passing_probe_clears_a_wrong_mark(fake_torch):
    torch = fake_torch()
    cuda_health.mark_broken("CUDA error: device-side assert triggered (seen in a child)")
    assert cuda_health.health().broken  # no probe: the mark stands
    assert torch.cuda.synced == []
    assert cuda_health.health(probe=True, timeout=2) == cuda_health.ContextHealth("ok")
    assert cuda_health.broken_reason() is None and torch.cuda.synced == [0]


def test_a_failing_or_busy_probe_keeps_the_mark(fake_torch):
    torch = fake_torch()
    cuda_health.mark_broken("first error")
    torch.cuda.release.clear()
    assert cuda_health.health(probe=True, timeout=0.05) == cuda_health.ContextHealth(
        "broken", "first error"
    )
    torch.cuda.error = RuntimeError("CUDA error: unspecified launch failure")
    torch.cuda.release.set()
    assert cuda_health._running.done.wait(5)
    found = cuda_health.health(probe=True, timeout=2)
    assert found.detail == "RuntimeError: CUDA error: unspecified launch failure"
    assert found.broken and cuda_health.broken_reason() == found.detail


def test_a_mark_without_a_started_cuda_is_never_probed(monkeypatch):
    torch = pytest.importorskip("torch")  # CPU build: CUDA never starts

    def forbidden(*args):
        raise AssertionError("synchronize called")

    monkeypatch.setattr(torch.cuda, "synchronize", forbidden)
    cuda_health.mark_broken("marked by hand")
    try:
        assert cuda_health.health(probe=True).state == "broken"
    finally:
        cuda_health.clear()
    assert cuda_health.health(probe=True).state == "not initialised"


# ---------------------------------------------------------------- which devices, forks


def test_only_devices_with_a_context_are_synchronised(fake_torch):
    torch = fake_torch(count=3, contexts=(1, 2))
    assert cuda_health.health(probe=True, timeout=2).state == "ok"
    assert torch.cuda.synced == [1, 2]
    assert cuda_health.synchronized_devices() == "cuda:1, cuda:2"
    torch.cuda.release.clear()
    torch.cuda.contexts = {2}
    busy = cuda_health.health(probe=True, timeout=0.05)
    assert busy.detail.startswith("torch.cuda.synchronize() on cuda:2 has not returned")


def test_a_forked_child_says_so_and_calls_nothing(fake_torch):
    torch = fake_torch(bad_fork=True)
    cuda_health.mark_broken("inherited from the parent")
    found = cuda_health.health(probe=True, timeout=2)
    assert found == cuda_health.ContextHealth("forked", cuda_health.FORKED_DETAIL)
    assert torch.cuda.synced == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_real_fork_during_a_synchronise_starts_clean(fake_torch):
    torch = fake_torch()
    torch.cuda.release.clear()
    assert cuda_health.health(probe=True, timeout=0.05).busy
    pid = os.fork()
    if pid == 0:  # the child: the parent's thread and lock did not come along
        code = 1
        try:
            free = cuda_health._lock.acquire(timeout=1)
            code = 0 if free and cuda_health._running is None else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert cuda_health.health().busy  # the parent's synchronise still runs


def test_panel_free_memory_on_a_busy_gpu_says_wait_not_restart(ip, fake_torch, monkeypatch):
    pytest.importorskip("ipywidgets")
    from colab_gpu_guard.ipython import panel as panel_module
    from colab_gpu_guard.ipython.panel.actions import BUSY_MESSAGE
    from colab_gpu_guard.reset import plan as reset_plan

    stub = fake_torch()
    monkeypatch.setattr(reset_plan, "SYNC_TIMEOUT_S", 0.1)
    assert ip.run_cell("%gpu_panel", store_history=True).error_in_exec is None
    instance = panel_module.current_panel(ip)
    stub.cuda.release.clear()
    instance.free_button.click()
    message = instance.message.value
    assert BUSY_MESSAGE in message and "cgg-msg-ok" in message
    assert "press Free memory again when that work finishes" in message
    assert "restart" not in message.lower()
    assert "cgg-health-busy" in instance.header.value  # the refresh after the action
    ip.run_line_magic("gpu_panel", "--close")


# ---------------------------------------------------------------- a real busy GPU


CUDA_PRELUDE = """
import json, os, sys, time
import torch
torch.zeros(1, device="cuda")
torch.cuda._sleep(1000)  # load the spin kernel before timing it
torch.cuda.synchronize()
started = time.monotonic()
torch.cuda._sleep(2 * 10**8)
torch.cuda.synchronize()
CYCLES_PER_S = 2 * 10**8 / (time.monotonic() - started)
def queue_seconds(seconds):
    torch.cuda._sleep(int(CYCLES_PER_S * seconds))  # one spin kernel, queued, async
"""


@pytest.mark.gpu
def test_gpu_busy_gpu_is_busy_then_ok_and_reset_says_wait_not_restart():
    from tests.child import run_script

    result, output = run_script(
        CUDA_PRELUDE
        + """
from IPython.utils.capture import capture_output
from colab_gpu_guard import cuda_health
from colab_gpu_guard.reset import plan as reset_plan
queue_seconds(3.0)
probe = cuda_health.health(probe=True, timeout=0.5)
plain = cuda_health.health()
torch.cuda.synchronize()  # wait for the kernel here
time.sleep(0.2)
after = cuda_health.health(probe=True, timeout=2.0)
queue_seconds(reset_plan.SYNC_TIMEOUT_S + 2.5)
began = time.monotonic()
with capture_output() as captured:
    ip.run_line_magic("gpu_reset", "")
reset_s = time.monotonic() - began
torch.cuda.synchronize()
time.sleep(0.2)
with capture_output() as second:
    ip.run_line_magic("gpu_reset", "")
report(probe=[probe.state, probe.detail], plain=plain.state, after=after.state,
       reset_text=captured.stdout, reset_s=reset_s, second_text=second.stdout,
       mark=cuda_health.broken_reason(), cycles_per_s=CYCLES_PER_S)
"""
    )
    assert result["cycles_per_s"] > 1e8, result  # the spin kernel ran at a GPU clock
    assert result["probe"][0] == "busy", result
    assert result["probe"][1].startswith("torch.cuda.synchronize() on cuda:0 has not returned")
    assert result["plain"] == "busy" and result["after"] == "ok"
    text = result["reset_text"]
    assert "the GPU is still running CUDA work queued by the last cell" in text, text
    assert "the cached memory was not emptied; run %gpu_reset again" in text
    assert "restart" not in text.lower() and "empty_cache" not in text
    assert 4.5 <= result["reset_s"] < 9.0  # it waited its 5 s, not for the whole kernel
    assert "torch.cuda.synchronize() on cuda:0" in result["second_text"]
    assert "torch.cuda.empty_cache()" in result["second_text"]
    assert result["mark"] is None


# ---------------------------------------------------------------- a real fork after CUDA


FORK_SCRIPT = """
import json, os, sys, tempfile, time
import torch
torch.zeros(1, device="cuda")
torch.cuda.synchronize()
from colab_gpu_guard import cuda_health, status
from colab_gpu_guard.reset import apply as reset
out = tempfile.mktemp(suffix=".json")
pid = os.fork()
if pid == 0:
    try:
        started = time.monotonic()
        health = cuda_health.health(probe=True, timeout=2.0)
        snap = status.gpu_status(leftovers=False)
        report = reset.gpu_reset(namespace={})
        from colab_gpu_guard.seeding import seed_all
        seeded = str(seed_all(7))
        data = dict(seeded=seeded, health=health.state, detail=health.detail,
                    status=snap.torch.health,
                    notes=list(snap.notes), status_text=snap.to_text(),
                    reset_state=report.cuda_state, reset_text=str(report),
                    restart=report.restart_required, elapsed=time.monotonic() - started)
    except BaseException as error:
        data = dict(error=repr(error))
    with open(out, "w") as handle:
        json.dump(data, handle)
    os._exit(0)
deadline = time.monotonic() + 90
while time.monotonic() < deadline:
    if os.waitpid(pid, os.WNOHANG)[0]:
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    print("HEALTH-RESULT:" + json.dumps({"hung": True}))
    sys.exit(0)
with open(out) as handle:
    child = json.load(handle)
child["parent"] = cuda_health.health(probe=True, timeout=5.0).state
print("HEALTH-RESULT:" + json.dumps(child))
"""


@pytest.mark.gpu
def test_gpu_fork_after_cuda_started_child_says_so_and_does_not_hang():
    result = run_python(FORK_SCRIPT, marker="HEALTH-RESULT:", timeout=240)
    assert not result.get("hung"), "status/reset hung in the forked child"
    assert "error" not in result, result
    assert result["health"] == "forked" and result["detail"] == cuda_health.FORKED_DETAIL
    assert result["status"] == "forked" and cuda_health.FORKED_DETAIL in result["notes"]
    assert "CUDA context: forked" in result["status_text"]
    assert result["reset_state"] == "forked" and not result["restart"]
    assert f"no CUDA cache to empty: {cuda_health.FORKED_DETAIL}" in result["reset_text"]
    assert (
        "PyTorch CUDA: this process was forked after CUDA initialised; CUDA cannot be used here"
        in " ".join(result["seeded"].split())
    ), result["seeded"]
    assert result["elapsed"] < 60
    assert result["parent"] == "ok"  # the parent's context is untouched
