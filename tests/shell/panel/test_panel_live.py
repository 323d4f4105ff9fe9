"""%gpu_panel --live: the GPU lines updated by one thread while a cell runs, in a real
IPython shell (the thread, its stops and joins, the magic's refusals and bad input) and in
a real kernel (the comm messages leave the kernel while the cell runs). Also: a click read
in another thread while a cell runs waits for the cell to end.

NVML answers from the fake machine of tests/fake_pynvml.py, whose memory the cells change.
Runs with ipywidgets 8 (the main .venv) and 7.7.1 (the Colab-like environment)."""

from __future__ import annotations

import gc
import os
import re
import sys
import threading
import time
import types
import weakref
from pathlib import Path

import pytest

ipywidgets = pytest.importorskip("ipywidgets")

from colab_gpu_guard import cuda_health, nvml
from colab_gpu_guard.ipython import panel as panel_module
from colab_gpu_guard.ipython.magics.panel import LIVE_OFF
from colab_gpu_guard.ipython.panel import live
from colab_gpu_guard.status import chart
from colab_gpu_guard.units import format_bytes
from tests import fake_pynvml
from tests.fake_pynvml import GiB

ROOT = Path(__file__).resolve().parents[3]
THREAD_NAME = "colab_gpu_guard panel live"
LIVE = "GPU lines live, "


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    for key in ("COLAB_RELEASE_TAG", "COLAB_GPU", "COLAB_BACKEND_VERSION"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    yield
    for instance in list(panel_module._panels.values()):
        instance.close()
    panel_module._panels.clear()
    nvml.set_pynvml(None)
    cuda_health.clear()


@pytest.fixture
def machine():
    """A fake Tesla T4 that NVML answers from; a cell may change its memory."""
    world = fake_pynvml.one_gpu()
    nvml.set_pynvml(fake_pynvml.install(world))
    return world


@pytest.fixture
def panel(ip, machine):
    ip.run_cell("%gpu_panel", store_history=True)
    instance = panel_module.current_panel(ip)
    assert instance is not None
    ip.user_ns.update(panel=instance, machine=machine)
    yield instance
    for name in ("panel", "machine", "seen", "step", "rest"):
        ip.user_ns.pop(name, None)


def live_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def used_text(used: int) -> str:
    """The GPU line's 'used of total' for a T4 whose NVML used is `used`."""
    return f"{format_bytes(used)} of {format_bytes(15360 * 2**20)}"


# A cell that grows the GPU's memory by 1 GiB, then records what the panel shows after
# each 0.3 s for `steps` steps: (header, GPU line, the other sections) as the front end
# would receive them.
WATCH_CELL = """
import time
seen = []
machine.gpus[0].used += 1 << 30
for step in range({steps}):  # not `_`: the output history owns it
    time.sleep(0.3)
    lefts = [getattr(part, 'value', None) for part in panel.leftovers.parts()]
    rest = (panel.now.value, lefts, panel.history.value, panel.details.value)
    seen.append((panel.header.value, panel.devices.children[0].value, rest))
"""


# ---------------------------------------------------------------- the live thread


def test_live_updates_the_gpu_line_while_a_cell_runs(ip, panel, machine, monkeypatch):
    before = machine.gpus[0].used
    assert used_text(before) in panel.devices.children[0].value
    full = []
    real = panel.refresher.snapshot
    monkeypatch.setattr(panel.refresher, "snapshot", lambda shell: full.append(1) or real(shell))
    for toggle in panel.toggles.values():  # every section open, as a user might have it
        toggle.value = True
    panel.live_every(0.5)
    (thread,) = live_threads()
    assert thread.daemon and panel.live_seconds == 0.5
    rest = (
        panel.now.value,
        [getattr(p, "value", None) for p in panel.leftovers.parts()],
        panel.history.value,
        panel.details.value,
    )
    result = ip.run_cell(WATCH_CELL.format(steps=6), store_history=True)
    assert result.success
    seen = ip.user_ns["seen"]
    cell = result.execution_count
    # before the cell ended, the line showed the grown memory, and the header said live
    grown = used_text(before + GiB)
    assert any(grown in line for _, line, _ in seen), seen
    assert used_text(before) in seen[0][1]  # the first 0.3 s: no tick yet
    assert any(f"cell [{cell}] running since" in head and LIVE in head for head, _, _ in seen)
    assert all("a click now is queued: runs when the cell ends" in head for head, _, _ in seen)
    # only the cheap snapshot ran during the cell (no leftovers scan), and only the header
    # and GPU lines were written
    assert full == [1]  # the one after the cell
    assert all(during == rest for _, _, during in seen)
    stats = panel.live_stats()
    assert stats.ticks >= 2 and stats.failures == 0
    # under the line, sparklines of its memory (rising with it) and of how busy it was
    lines = [line for _, line, _ in seen if "cgg-sparklines" in line]
    assert lines, seen
    memory = re.search(r'memory <span class="cgg-spark">([^<]*)</span> ([^<]*)</span>', lines[-1])
    blocks = memory.group(1)
    assert len(blocks) >= 2 and set(blocks) <= set(chart.sparkline([0, 1, 2, 3, 4, 5, 6, 7], 7))
    assert blocks[-1] >= blocks[0] and memory.group(2) == format_bytes(machine.gpus[0].used)
    assert 'busy <span class="cgg-spark">' in lines[-1] and "% </span>" not in lines[-1]
    # after the cell: the header back to the versions alone, with the same figures
    assert "running since" not in panel.header.value and LIVE not in panel.header.value
    assert f"after cell [{cell}]," in panel.text()
    assert grown in panel.devices.children[0].value
    # between cells it sleeps: no tick while no cell runs
    ticks = panel.live_stats().ticks
    time.sleep(1.2)
    assert panel.live_stats().ticks == ticks


def test_without_live_nothing_runs_during_a_cell(ip, panel, machine):
    assert live_threads() == [] and panel.live_seconds is None and panel.live_thread is None
    before = machine.gpus[0].used
    result = ip.run_cell(WATCH_CELL.format(steps=3), store_history=True)
    seen = ip.user_ns["seen"]
    assert all(used_text(before) in line and LIVE not in head for head, line, _ in seen)
    assert live_threads() == []
    # the refresh after the cell shows it
    assert used_text(before + GiB) in panel.devices.children[0].value
    assert f"after cell [{result.execution_count}]," in panel.text()
    assert "running since" not in panel.header.value  # not live: a cell's start wrote nothing


def test_live_every_retimes_and_stops(panel):
    panel.live_every(2)
    (thread,) = live_threads()
    panel.live_every(0.5)
    assert live_threads() == [thread] and panel.live_seconds == 0.5  # the same thread
    panel.live_every(None)
    assert not thread.is_alive() and panel.live_seconds is None and live_threads() == []
    for bad in (0.1, 61, float("nan")):
        with pytest.raises(ValueError, match="0.5 to 60"):
            panel.live_every(bad)
    assert live_threads() == []


@pytest.mark.parametrize("how", ["close", "close_all", "magic_close", "new", "unload"])
def test_the_thread_is_joined_when_the_panel_goes(ip, panel, how):
    panel.live_every(0.5)
    (thread,) = live_threads()
    if how == "close":
        panel.close()
    elif how == "close_all":
        ipywidgets.Widget.close_all()
    elif how == "magic_close":
        ip.run_cell("%gpu_panel --close", store_history=True)
    elif how == "new":
        ip.run_cell("%gpu_panel --new", store_history=True)
        assert panel_module.current_panel(ip) is not panel
    else:
        ip.run_line_magic("unload_ext", "colab_gpu_guard")
        ip.run_line_magic("load_ext", "colab_gpu_guard")  # the fixture unloads it
    assert not thread.is_alive()
    assert live_threads() == []
    assert panel.live_seconds is None


def test_a_tick_never_writes_after_the_cell_ended(ip, panel, monkeypatch):
    """A tick whose snapshot is still being taken when the cell ends writes nothing: the
    header stays as the refresh after the cell drew it."""
    slow_started = threading.Event()
    real = live.live_status

    def slow():
        slow_started.set()
        time.sleep(0.6)
        return real()

    monkeypatch.setattr(panel.live_lines, "snapshot", slow)
    panel.live_every(0.5)
    result = ip.run_cell("import time\ntime.sleep(0.7)", store_history=True)  # ends mid-tick
    assert slow_started.is_set()
    after = panel.header.value
    assert "running since" not in after and f"after cell [{result.execution_count}]," in (
        panel.text()
    )
    time.sleep(0.8)  # the tick's snapshot returns now
    assert panel.header.value == after
    assert panel.live_stats().ticks == 1


def test_failing_ticks_stop_the_thread_and_say_so_after_the_cell(ip, panel, monkeypatch):
    escaped = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args))

    def broken():
        raise RuntimeError("NVML exploded <b>")

    monkeypatch.setattr(panel.live_lines, "snapshot", broken)
    panel.live_every(0.5)
    (thread,) = live_threads()
    ip.run_cell("import time\ntime.sleep(2.2)", store_history=True)
    thread.join(2)
    assert not thread.is_alive() and escaped == []
    assert panel.live_seconds is None
    assert "live updates stopped: RuntimeError: NVML exploded &lt;b&gt;" in panel.message.value


def test_live_started_inside_a_cell_covers_the_rest_of_it(ip, machine):
    """`%gpu_panel --live` then the training loop, in one cell: the panel, opened in that
    cell, did not see it begin; the rest of the cell is live all the same."""
    ip.user_ns["machine"] = machine
    code = (
        "from colab_gpu_guard.ipython import panel as panel_module\n"
        "from colab_gpu_guard.ipython.panel.refresh import running_cell\n"
        "import time\n"
        "panel = panel_module.panel()\n"
        "panel.live_every(0.5, this_cell=running_cell(get_ipython()))\n"
        + WATCH_CELL.format(steps=5)
    )
    result = ip.run_cell(code, store_history=True)
    assert result.success, result.error_in_exec
    seen = ip.user_ns["seen"]
    assert any(f"cell [{result.execution_count}] running" in h and LIVE in h for h, _, _ in seen)
    assert any(used_text(machine.gpus[0].used) in line for _, line, _ in seen)
    for name in ("panel", "machine", "seen", "step", "rest"):
        ip.user_ns.pop(name, None)


# ---------------------------------------------------------------- the magic


def test_seconds_are_parsed_and_bounded():
    assert live.parse_seconds("0.5") == 0.5 and live.parse_seconds(" 60 ") == 60.0
    assert live.parse_seconds("off") is None and live.parse_seconds("OFF") is None
    assert live.parse_seconds("0") is None and live.parse_seconds("0.0") is None
    for bad in ("0.4", "61", "-1", "nan", "inf", "1e9"):
        with pytest.raises(ValueError, match="out of range: --live SECONDS"):
            live.parse_seconds(bad)
    with pytest.raises(ValueError, match="not 'fast': --live SECONDS \\(a number from 0.5 to"):
        live.parse_seconds("fast")


@pytest.mark.parametrize("value", ["fast", "0.1", "61", "nan", "-2"])
def test_bad_live_values_are_usage_errors_and_change_nothing(ip, panel, capsys, value):
    panel.live_every(2)
    (thread,) = live_threads()
    capsys.readouterr()
    result = ip.run_cell(f"%gpu_panel --live {value}", store_history=True)
    out = capsys.readouterr()
    text = out.out + out.err
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert "--live SECONDS (a number from 0.5 to 60), or --live off" in text
    assert "Traceback" not in text
    assert live_threads() == [thread] and panel.live_seconds == 2
    assert panel_module.current_panel(ip) is panel


def test_bad_live_value_opens_no_panel(ip, machine, capsys):
    result = ip.run_cell("%gpu_panel --live 0.01", store_history=True)
    assert type(result.error_in_exec).__name__ == "UsageError"
    assert panel_module.current_panel(ip) is None


def test_in_a_terminal_live_says_there_is_no_front_end(ip, machine, capsys):
    assert getattr(ip, "kernel", None) is None  # IPython's test shell: no kernel
    ip.run_cell("%gpu_panel --live 1", store_history=True)
    out = capsys.readouterr().out
    assert f"gpu_panel: {live.NO_KERNEL}\n" in out
    assert panel_module.current_panel(ip) is not None  # the panel is shown all the same
    assert live_threads() == []


def test_in_colab_live_says_colab_shows_no_updates_during_a_cell(ip, machine, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    ip.run_cell("%gpu_panel --live 1", store_history=True)
    out = capsys.readouterr().out
    said = [line for line in out.splitlines() if line.startswith("gpu_panel:")]
    assert said == [f"gpu_panel: {live.COLAB}"]
    assert "Colab does not show widget updates sent while a cell runs" in live.COLAB
    assert live_threads() == []
    assert live.why_not_live(ip) == live.COLAB


def test_ipykernel_7_0_is_refused(ip, monkeypatch):
    """ipykernel 7.0.x dropped messages sent from threads (fixed in 7.1)."""
    kernel_module = pytest.importorskip("ipykernel")
    monkeypatch.setattr(ip, "kernel", object(), raising=False)
    monkeypatch.setattr(kernel_module, "__version__", "7.0.1")
    assert live.why_not_live(ip) == live.BROKEN_KERNEL.format(version="7.0.1")
    monkeypatch.setattr(kernel_module, "__version__", "7.1.0")
    assert live.why_not_live(ip) is None
    monkeypatch.setattr(kernel_module, "__version__", "6.17.1")
    assert live.why_not_live(ip) is None


def test_live_off_stops_the_thread(ip, panel, capsys):
    panel.live_every(1)
    (thread,) = live_threads()
    ip.run_cell("%gpu_panel --live off", store_history=True)
    assert not thread.is_alive() and panel.live_seconds is None
    assert "gpu_panel: live updates off: the panel refreshes after each cell" in (
        capsys.readouterr().out
    )
    panel.live_every(1)
    ip.run_cell("%gpu_panel --new --live off", store_history=True)  # a new panel, not live
    fresh = panel_module.current_panel(ip)
    assert fresh is not panel and fresh.live_seconds is None and live_threads() == []
    assert capsys.readouterr().out.endswith(f"gpu_panel: {LIVE_OFF}\n")
    ip.run_cell("%gpu_panel --close", store_history=True)
    ip.run_cell("%gpu_panel --live 0", store_history=True)
    assert capsys.readouterr().out.endswith("gpu_panel: no panel open\n")


def test_a_stopped_panel_does_not_go_live(ip, panel):
    panel_module.stop_panels(ip)  # as %unload_ext does: the view stays, no more refreshes
    panel.live_every(1)
    assert panel.live_seconds is None and live_threads() == []


# ---------------------------------------------------------------- clicks during a cell


CLICK_FROM_A_THREAD = """
import threading
clicker = threading.Thread(target=panel.{button}.click)
clicker.start()
clicker.join()
during = (panel.refreshes, panel.message.value, dict(panel.queued))
"""


def test_a_click_from_another_thread_during_a_cell_waits_for_it(ip, panel, run_cell, torch):
    """As JupyterLab 4.4+ with ipykernel 7 delivers it (a comm subshell's thread): Free
    memory must not free what the running cell uses; it runs when the cell ends."""
    run_cell("import torch")
    result = run_cell("torch.ones(256, 1024) * 3")  # held only by the output history
    probe = weakref.ref(result.result)
    ip.user_ns["probe"] = probe
    del result
    run_cell("pass")
    refreshes = panel.refreshes
    run_cell(
        CLICK_FROM_A_THREAD.format(button="free_button") + "alive_during = probe() is not None"
    )
    gc.collect()
    assert ip.user_ns["alive_during"] is True
    during_refreshes, message, queued = ip.user_ns["during"]
    assert during_refreshes == refreshes
    assert "Free memory: queued, runs when the cell ends" in message and list(queued) == [
        "Free memory"
    ]
    assert probe() is None, "Free memory did not run after the cell"
    assert "gpu_reset: dropped " in panel.message.value and panel.queued == {}
    for name in ("during", "clicker", "alive_during"):
        ip.user_ns.pop(name, None)


def test_a_click_in_the_cells_own_thread_runs_at_once(ip, panel, run_cell):
    refreshes = panel.refreshes
    run_cell("panel.refresh_button.click()\nduring = panel.refreshes")
    assert ip.user_ns.pop("during") == refreshes + 1
    assert panel.queued == {}


@pytest.fixture
def torch(ip):
    module = pytest.importorskip("torch")
    ip.user_ns["probe"] = None
    yield module
    ip.user_ns.pop("probe", None)


# ---------------------------------------------------------------- in a real kernel


class Kernel:
    """A real ipykernel (jupyter_client), its iopub messages collected per execution."""

    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        from bench._common import path_first

        env = dict(os.environ, PYTHONPATH=path_first(str(ROOT)))
        self.manager, self.client = start_new_kernel(
            startup_timeout=120, kernel_name="python3", env=env, cwd=str(ROOT)
        )

    def execute(self, code: str, timeout: float = 60) -> tuple[list[dict], dict]:
        """Run `code`; (its iopub messages, its execute_reply)."""
        msg_id = self.client.execute(code)
        messages = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.client.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
            if message["parent_header"].get("msg_id") != msg_id:
                continue
            messages.append(message)
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
        return messages, self.reply(msg_id, timeout)

    def reply(self, msg_id: str, timeout: float = 60) -> dict:
        """The shell reply to `msg_id` (replies to earlier requests are passed over)."""
        while True:
            reply = self.client.get_shell_msg(timeout=timeout)
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    def run(self, code: str, timeout: float = 60) -> str:
        messages, reply = self.execute(code, timeout)
        assert reply["content"]["status"] == "ok", reply["content"]
        return stdout(messages)

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def stdout(messages: list[dict]) -> str:
    return "".join(
        m["content"]["text"]
        for m in messages
        if m["msg_type"] == "stream" and m["content"]["name"] == "stdout"
    )


def updates(messages: list[dict], comm_id: str) -> list[dict]:
    """The widget state updates sent for `comm_id`, in order."""
    return [
        m
        for m in messages
        if m["msg_type"] == "comm_msg"
        and m["content"]["comm_id"] == comm_id
        and m["content"]["data"].get("method") == "update"
    ]


@pytest.fixture
def kernel():
    pytest.importorskip("jupyter_client")
    started = Kernel()
    try:
        yield started
    finally:
        started.close()


SETUP = """
%load_ext colab_gpu_guard
import time
from colab_gpu_guard import nvml
from tests import fake_pynvml
machine = fake_pynvml.one_gpu()
nvml.set_pynvml(fake_pynvml.install(machine))
"""


@pytest.mark.slow
def test_live_updates_leave_a_real_kernel_while_the_cell_runs(kernel):
    kernel.run(SETUP)
    out = kernel.run("%gpu_panel --live 0.5")
    assert "gpu_panel: the GPU lines update every 0.5 s while a cell runs" in out
    ids = kernel.run(
        "import colab_gpu_guard\npanel = colab_gpu_guard.panel()\n"
        "print(panel.header.model_id, panel.devices.children[0].model_id)"
    ).split()
    header_id, device_id = ids
    messages, reply = kernel.execute(
        "for step in range(4):\n    machine.gpus[0].used += 1 << 30\n    time.sleep(0.5)"
    )
    started = next(m for m in messages if m["msg_type"] == "execute_input")["header"]["date"]
    ended = reply["header"]["date"]
    live_heads = [
        m
        for m in updates(messages, header_id)
        if LIVE in m["content"]["data"]["state"].get("value", "")
    ]
    device_lines = updates(messages, device_id)
    assert len(live_heads) >= 2, [m["content"]["data"] for m in updates(messages, header_id)]
    # the updates were sent while the cell ran, spread over it, not at its end
    assert all(started < m["header"]["date"] < ended for m in live_heads)
    assert (ended - live_heads[0]["header"]["date"]).total_seconds() >= 0.8
    assert len(device_lines) >= 3  # ticks saw the memory grow (plus the refresh after)
    assert (ended - device_lines[0]["header"]["date"]).total_seconds() >= 0.8
    # the kernel is really a kernel: the magic's front-end check let it start; off stops it
    threads = kernel.run(
        f"import threading\nprint(sum(t.name == {THREAD_NAME!r} for t in threading.enumerate()))"
    )
    assert threads.strip() == "1"
    assert "live updates off" in kernel.run("%gpu_panel --live off")
    assert (
        kernel.run(
            f"time.sleep(0.2)\nprint(sum(t.name == {THREAD_NAME!r} for t in threading.enumerate()))"
        ).strip()
        == "0"
    )
    # without a GPU there is nothing to keep live: it says so and starts nothing
    out = kernel.run(
        "nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))\n"
        "%gpu_panel --new --live 1\n"
        f"print(sum(t.name == {THREAD_NAME!r} for t in threading.enumerate()))"
    )
    assert "gpu_panel: No GPU: no NVIDIA driver on this machine" in out
    assert "no GPU lines to keep live (no live updates started)" in out
    assert out.rstrip().endswith("0")


def on_subshell(kernel: Kernel, msg_type: str, content: dict, subshell: str) -> str:
    """Send a shell request to `subshell`, as JupyterLab 4.4+ does with comm messages."""
    message = kernel.client.session.msg(msg_type, content)
    message["header"]["subshell_id"] = subshell
    kernel.client.shell_channel.send(message)
    return message["header"]["msg_id"]


@pytest.mark.slow
def test_a_click_read_on_a_subshell_during_a_cell_waits_for_it(kernel):
    """JupyterLab 4.4+ sends widget comm messages to a kernel subshell. ipykernel 7.0 to 7.3
    read them there at once, in the subshell's thread, while the main shell runs a cell;
    7.4 sends them where the widget last published from, which is the subshell when code
    run there wrote to it. Either way the click is said to be queued and runs after the
    cell."""
    info = kernel.client.kernel_info(reply=True)["content"]
    if "kernel subshells" not in info.get("supported_features", []):
        pytest.skip("this ipykernel has no subshells: clicks are read between cells")
    kernel.run(SETUP)
    kernel.run("%gpu_panel")
    button_id, message_id = kernel.run(
        "import colab_gpu_guard\npanel = colab_gpu_guard.panel()\n"
        "print(panel.refresh_button.model_id, panel.message.model_id)"
    ).split()
    kernel.client.control_channel.send(kernel.client.session.msg("create_subshell_request", {}))
    subshell = kernel.client.control_channel.get_msg(timeout=30)["content"]["subshell_id"]
    code = "panel.refresh_button.tooltip = 'take a new snapshot now (from a subshell)'"
    request = {"code": code, "silent": False, "store_history": False, "user_expressions": {}}
    assert (
        kernel.reply(on_subshell(kernel, "execute_request", request, subshell))["content"]["status"]
        == "ok"
    )
    msg_id = kernel.client.execute(
        "start, quiet = panel.refreshes, panel.refresher.quiet\ntime.sleep(2)\n"
        "during = (panel.refreshes - start, list(panel.queued))"
    )
    time.sleep(0.8)  # the cell is running
    click = {"comm_id": button_id, "data": {"method": "custom", "content": {"event": "click"}}}
    on_subshell(kernel, "comm_msg", click, subshell)
    messages = []
    while True:
        message = kernel.client.get_iopub_msg(timeout=30)
        messages.append(message)
        if (
            message["parent_header"].get("msg_id") == msg_id
            and message["msg_type"] == "status"
            and message["content"]["execution_state"] == "idle"
        ):
            break
    assert kernel.reply(msg_id)["content"]["status"] == "ok"
    # read during the cell, in the subshell's thread: kept, and said so at once
    assert kernel.run("print(during)").strip() == "(0, ['Refresh'])"
    said = [m["content"]["data"]["state"].get("value", "") for m in updates(messages, message_id)]
    assert any("Refresh: queued, runs when the cell ends" in text for text in said), said
    # run after the cell: its own refresh, the click's, and after print(during) one more
    # or none (a cell that changed nothing, within a second of the last: `QUIET_S`)
    done = "print(panel.refreshes - start + panel.refresher.quiet - quiet, panel.queued)"
    assert kernel.run(done).strip() == "3 {}"


# ---------------------------------------------------------------- honest freshness


def test_a_panel_made_in_a_cell_says_the_cell_before_it(ip, machine, run_cell):
    """Made while cell [N] runs, the panel's figures are 'after cell [N-1]' (IPython 9.8+
    counts a cell before running it: its execution_count is N+1 then), and after the
    cell 'after cell [N]'."""
    run_cell("pass")  # so that a cell came before
    result = run_cell(
        "import colab_gpu_guard\nmade = colab_gpu_guard.panel(new=True)\nheader_then = made.text()"
    )
    cell = result.execution_count
    assert f"after cell [{cell - 1}]," in ip.user_ns["header_then"]
    assert f"after cell [{cell}]," in ip.user_ns["made"].text()
    for name in ("made", "header_then"):
        ip.user_ns.pop(name, None)
