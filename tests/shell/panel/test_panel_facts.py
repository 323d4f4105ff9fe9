"""The panel's three facts - device memory, the driver and CUDA versions, what is held
between cells - in the collapsed panel and in its text and static copies; failures said
once; Details keeping one line per action; Seed saying why it is slow; the chart not
charging the panel's own cell; a cell that changed nothing not scanned again; `panel()`
without ipywidgets. Real IPython shell, real torch (CPU), the fake NVML."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ipywidgets = pytest.importorskip("ipywidgets")

from colab_gpu_guard import host_memory  # noqa: E402
from colab_gpu_guard.ipython.panel import actions as panel_actions  # noqa: E402
from colab_gpu_guard.ipython.panel import refresh as panel_refresh  # noqa: E402
from colab_gpu_guard.status import chart, panel_html  # noqa: E402
from colab_gpu_guard.units import format_bytes, jargon_in  # noqa: E402
from tests import fake_pynvml  # noqa: E402
from tests.panel_widgets import open_sections  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


def _text(html: str) -> str:
    """The words of an HTML fragment (tags dropped, entities read)."""
    import html as html_module

    return html_module.unescape(re.sub(r"<style>.*?</style>|<[^>]+>", "", html))


def test_the_three_facts_collapsed_and_in_every_fallback(ip, run_cell, world, show, torch):
    world(fake_pynvml.one_gpu())
    run_cell("import torch\nkeep = torch.ones(1000, 1000)")
    run_cell("torch.ones(500, 1000) * 2")  # an output the history keeps: Out[N]
    out_cell = ip.execution_count - 1
    instance = show(opened=False)
    keep = ip.user_ns["keep"]
    kept, shown = keep.nbytes, ip.user_ns["Out"][out_cell].nbytes  # independent figures
    header, now = _text(instance.header.value), _text(instance.now.value)
    # 1. the driver and CUDA versions lead the header (what the fake driver reports)
    assert header.startswith("driver 550.54.15 · CUDA 12.4")
    # 2. the GPU's memory
    device = _text(instance.devices.children[0].value)
    assert "Tesla T4" in device and "3.66 GiB of 15 GiB" in device
    # 3. what is held between cells, by name, biggest first, each figure its array's bytes
    expected = (
        f"held between cells: `keep` {format_bytes(kept)}, `Out[{out_cell}]` {format_bytes(shown)}"
    )
    assert now.startswith(expected.replace("`", "")), now
    # the text fallback (text/plain: GitHub, terminals, --to markdown) and the static copy
    text = instance.text()
    first, gpu, held = text.splitlines()[:3]
    assert first.startswith("GPU guard · driver 550.54.15 · CUDA 12.4 · after cell [")
    assert gpu.startswith("GPU 0 Tesla T4: ") and "3.66 GiB of 15 GiB" in gpu
    assert held.startswith(expected)
    static = _text(instance.snapshot_html())
    assert "driver 550.54.15 · CUDA 12.4" in static and "3.66 GiB of 15 GiB" in static
    assert expected.replace("`", "") in static
    assert jargon_in(text) == [] and jargon_in(now) == []


def test_every_nvml_call_failing_is_said_once_with_its_reason(world, show):
    machine = fake_pynvml.one_gpu()
    failing = fake_pynvml.NVML_ERROR_UNKNOWN
    machine.fail = dict.fromkeys(
        (
            "nvmlSystemGetDriverVersion",
            "nvmlSystemGetCudaDriverVersion",
            "nvmlSystemGetNVMLVersion",
            "nvmlDeviceGetCount",
        ),
        failing,
    )
    world(machine)
    instance = show()
    status = instance.last_status
    why = status.nvml.reason("driver_version")  # the reason the nvml layer gives
    assert why and status.nvml.reason("devices") == why
    assert f"NVML failed: {why}" in _text(instance.header.value)
    assert "cgg-versions" in instance.header.value and "#b71c1c" in instance.header.value
    (line,) = instance.devices.children
    assert _text(line.value).startswith("No GPU")
    text = instance.text()
    assert text.count(why) == 1, text  # said once, in the header
    assert text.splitlines()[1].startswith("No GPU ·")


def test_a_lost_gpu_is_said_lost(world, show):
    machine = fake_pynvml.two_gpus()
    machine.gpus[1].lost = "calls"
    world(machine)
    instance = show()
    first, second = (_text(line.value) for line in instance.devices.children)
    assert "A100" in first and "lost" not in first
    assert second.startswith("GPU 1 is lost: it has fallen off the bus")
    assert "\nGPU 1 is lost: it has fallen off the bus" in instance.text()


def test_the_rerun_leak_line_stays_under_an_action_message(ip, run_cell, show, torch):
    instance = show()
    run_cell("import torch\nkept_batches = []")
    training = "for step in range(4):\n    kept_batches.append(torch.ones(1024, 1024))"
    run_cell(training)
    run_cell(training)  # a rerun that keeps 16 MiB more
    record = instance.last_status.history[-1]
    assert record.rerun_leak and record.leak_bytes >= 16 * 2**20
    leak = _text(instance.now.value)
    assert f"rerun leak: cell [{record.cell}] (a rerun of [{record.cell - 1}]) kept " in leak
    assert "in host memory again, held by `kept_batches`" in leak and "of cpu" not in leak
    instance.free_button.click()  # nothing the leak holds is freed: the line stays
    assert instance.message.layout.display != "none" and "gpu_reset" in instance.message.value
    assert "rerun leak: cell [" in _text(instance.now.value)
    assert instance.now.layout.display != "none"
    assert "rerun leak: cell [" in instance.text()


def test_details_keeps_the_last_actions_line_and_its_report_one_click_away(ip, show, torch):
    instance = show()
    for _ in range(3):
        instance.free_button.click()
    instance.seed_button.click()
    details = instance.details.value
    assert details.count("last action:") == 1 and "seed_all:" in _text(details)
    assert "gpu_reset" not in _text(details)
    assert len(_text(details).splitlines()) < 20  # it does not grow with each action
    toggle, report = instance.report_toggle, instance.report
    assert toggle.layout.display != "none" and report.layout.display == "none"
    toggle.value = True  # one click: the full report of the last action
    assert report.layout.display != "none" and toggle.description == "\u25be full report"
    seed_report = _text(report.value)
    assert "seed" in seed_report and len(seed_report.splitlines()) > 1
    instance.free_button.click()  # the next action replaces it
    assert "gpu_reset" in _text(instance.report.value) and "seed_all:" not in _text(
        instance.details.value
    )


def test_seed_says_why_it_is_slow_the_first_time(ip, show, torch, monkeypatch):
    """torch.use_deterministic_algorithms imports torch._inductor.config (torch's source,
    checked in a fresh interpreter); before that, a ticked Seed says it loads torch's
    compiler; after it, nothing. The modules are never removed from this process (a second
    copy of torch's compiler config broke torch.compile for every later test)."""
    from colab_gpu_guard import seed_all
    from colab_gpu_guard.frameworks import torch as torch_support
    from tests.child import run_python

    imported = run_python(
        """
        import json, sys, torch
        before = "torch._inductor.config" in sys.modules
        torch.use_deterministic_algorithms(False)
        print(json.dumps([before, "torch._inductor.config" in sys.modules]))
        """
    )
    assert imported == [False, True]  # what the message claims
    modules = dict(sys.modules)
    modules.pop("torch._inductor.config", None)
    monkeypatch.setattr(panel_actions, "sys", types.SimpleNamespace(modules=modules))
    assert "torch's compiler" in panel_actions.seed_is_slow(True)
    assert panel_actions.seed_is_slow(False) == ""  # no deterministic mode: nothing loads
    instance = show()
    seen = []
    real_show = instance.view.show_message
    monkeypatch.setattr(
        instance.view, "show_message", lambda html: seen.append(html) or real_show(html)
    )
    instance.deterministic.value = True
    try:
        instance.seed_button.click()
    finally:
        seed_all(0, deterministic=False)  # the modes as they were
    assert "Seed... the first deterministic seed loads torch&#x27;s compiler" in seen[0]
    monkeypatch.setattr(panel_actions, "sys", sys)  # the real modules again
    assert panel_actions.seed_is_slow(True) == ""  # loaded now: nothing to say
    monkeypatch.setattr(torch_support, "loaded", lambda: None)  # as before torch is imported
    assert panel_actions.seed_is_slow(False).startswith("importing torch first")


def test_the_chart_does_not_charge_the_panels_own_cell(ip, run_cell, show, torch):
    run_cell("import torch")
    instance = show()
    own = instance.view.own_cell
    assert own == ip.execution_count - 1  # the %gpu_panel cell
    run_cell("grown = torch.ones(2048, 1024)")
    open_sections(instance, "History")
    history = html.unescape(instance.history.value)
    assert f"cell [{own}]: host resident memory not charged: {chart.OWN_CELL}" in history
    own_bar = re.search(
        rf'<div class="cgg-cell" title="cell \[{own}\]:[^"]*"[^>]*>(.*?)</div>', history
    )
    assert own_bar is not None and "cgg-cell-bar" not in own_bar.group(1)  # no bar drawn


def _counted_scans(instance, monkeypatch) -> tuple[list, list]:
    """The panel's leftovers scans, counted (one item each), and its clock, set by hand."""
    scans: list = []
    real = panel_refresh._take_status

    def counted(shell, leftovers=True):
        scans.extend([1] if leftovers else [])
        return real(shell, leftovers=leftovers)

    monkeypatch.setattr(panel_refresh, "_take_status", counted)
    monkeypatch.setattr(instance.refresher, "snapshot", counted)
    now = [1000.0]
    monkeypatch.setattr(panel_refresh, "_clock", lambda: now[0])
    return scans, now


def test_a_cell_that_changed_nothing_is_not_scanned_again(ip, run_cell, show, torch, monkeypatch):
    instance = show(opened=False)
    scans, now = _counted_scans(instance, monkeypatch)
    # the host held still: the no-GPU line shows this process's resident size, which a
    # leftovers scan itself may grow past the next MiB (rightly shown: a value written)
    still = host_memory.host_ram()
    monkeypatch.setattr(host_memory, "host_ram", lambda: still)
    run_cell("import torch\nbatches = [torch.ones(8)]")
    assert len(scans) == 1  # a new variable: scanned
    refreshes, quiet, updates = instance.refreshes, instance.refresher.quiet, instance.updates
    for source in ("pass", "1 + 1;", "x = None\ndel x"):
        run_cell(source)
    assert len(scans) == 1  # nothing the scan looks at changed...
    # ...and right after the last snapshot (QUIET_S): nothing taken, nothing written
    assert instance.refreshes == refreshes and instance.refresher.quiet == quiet + 3
    assert instance.updates == updates
    assert "`batches`" in instance.text()
    now[0] += panel_refresh.QUIET_S + 0.5  # later: the cheap snapshot, nothing written
    run_cell("pass")
    assert len(scans) == 1 and instance.refreshes == refreshes + 1
    assert instance.updates == updates
    open_sections(instance, "History")  # the chart is drawn after every cell
    run_cell("pass")
    assert instance.refreshes == refreshes + 2 and len(scans) == 1
    instance.toggles["History"].value = False
    run_cell("batches.append(torch.ones(8))")  # a list grew: scanned again
    assert len(scans) == 2 and "batches" in instance.text()
    run_cell("2 * 3")  # an output the history keeps: scanned
    assert len(scans) == 3
    now[0] += panel_refresh.UNCHANGED_S + 1  # the last scan is old: scanned, changed or not
    run_cell("pass")
    assert len(scans) == 4


def test_after_unchanged_cells_a_rebound_new_or_deleted_name_is_scanned(
    ip, run_cell, show, torch, monkeypatch
):
    """The namespace's print leaves out only IPython's input names (`_i`, `_i12`, `In`...):
    a variable rebound, added (even one named like them) or deleted is found by the next
    cell's refresh, however many unchanged cells came before."""
    instance = show(opened=False)
    scans, now = _counted_scans(instance, monkeypatch)
    run_cell("import torch\nkept = torch.ones(8)")
    assert len(scans) == 1
    cases = (
        ("kept = torch.ones(16)", "`kept`"),  # rebound
        ("_i_weights = torch.ones(32)", "`_i_weights`"),  # new, named like an input
        ("_ix2 = torch.ones(32)", "`_ix2`"),
        ("del kept", None),
    )
    for source, shown in cases:
        for _ in range(3):
            now[0] += panel_refresh.QUIET_S + 0.5  # the cheap snapshot, no scan
            run_cell("pass")
        count = len(scans)
        now[0] += panel_refresh.QUIET_S + 0.5
        run_cell(source)
        assert len(scans) == count + 1, source
        if shown:
            assert shown in instance.text(), (source, instance.text())
    assert "`kept`" not in instance.text()
    run_cell("del _i_weights, _ix2")


def test_toggles_keep_their_width_when_a_count_appears(show):
    instance = show(opened=False)
    for name, toggle in instance.toggles.items():
        widest = panel_html.WIDEST_LABEL[name]
        assert toggle.layout.min_width == f"{round(len(widest) * 6.6) + 30}px"
    labels = [instance.toggles[name].description for name in ("Leftovers", "Processes")]
    assert all(len(label) <= len(panel_html.WIDEST_LABEL[label.split()[1]]) + 2 for label in labels)


def test_panel_api_without_ipywidgets_says_what_is_missing(tmp_path):
    """A fresh process where ipywidgets cannot be imported: `colab_gpu_guard.panel()`
    returns one line saying what is missing and how to install it, and the status."""
    code = (
        "import sys; sys.modules['ipywidgets'] = None\n"
        "import colab_gpu_guard\n"
        "from colab_gpu_guard import nvml\nfrom tests import fake_pynvml\n"
        "nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))\n"
        "report = colab_gpu_guard.panel()\nprint(report)\nprint(type(report).__name__)\n"
        "print('ipywidgets' in sys.modules and sys.modules['ipywidgets'] is not None)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Traceback" not in out + done.stderr
    first, rest = out.split("\n", 1)
    assert first == (
        "panel(): the panel needs ipywidgets, which is not installed here "
        "(pip install ipywidgets); the status as text instead:"
    )
    assert rest.startswith("GPU status |")
    assert out.rstrip().endswith("PanelUnavailable\nFalse")


@pytest.mark.gpu
def test_real_gpu_three_facts_match_nvml_and_torch(ip, run_cell, show, torch):
    """On a real GPU: the header's driver and CUDA versions are NVML's own answers (read
    here through pynvml, not through the package), the GPU line names the GPU NVML names
    and its total memory, and the held line's figure for a CUDA tensor is its bytes."""
    import pynvml

    from colab_gpu_guard import nvml

    nvml.set_pynvml(None)
    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
    cuda = pynvml.nvmlSystemGetCudaDriverVersion()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = pynvml.nvmlDeviceGetName(handle)
    name = name.decode() if isinstance(name, bytes) else name
    total = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    run_cell("import torch\ngpu_held = torch.ones(64, 1024, 1024, device='cuda')")  # 256 MiB
    instance = show(opened=False)
    header = _text(instance.header.value)
    assert header.startswith(f"driver {driver} · CUDA {cuda // 1000}.{(cuda % 1000) // 10}")
    line = _text(instance.devices.children[0].value)
    assert name in line and f"of {format_bytes(total)}" in line
    held = ip.user_ns["gpu_held"]
    assert f"gpu_held {format_bytes(held.nbytes)}" in _text(instance.now.value)
    ip.user_ns.pop("gpu_held")
