"""The %gpu_panel widget in a real IPython shell: its tree for 0/1/2 (fake) GPUs, the
buttons, HTML escaping, refreshing after cells, closing, and %reload_ext hygiene.

Runs with ipywidgets 8 (the main .venv) and 7.7.1 (the Colab-like environments)."""

from __future__ import annotations

import dataclasses
import gc
import html
import importlib
import re
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest

ipywidgets = pytest.importorskip("ipywidgets")

from colab_gpu_guard import cuda_health, host_memory, nvml  # noqa: E402
from colab_gpu_guard.ipython import panel as panel_module  # noqa: E402
from colab_gpu_guard.ipython.panel import refresh as panel_refresh  # noqa: E402
from colab_gpu_guard.leftovers.groups import group_leftovers  # noqa: E402
from colab_gpu_guard.status import (  # noqa: E402
    DeviceMemory,
    chart,
    compact,
    panel_html,
    panel_leftovers,
)
from tests import fake_pynvml  # noqa: E402
from tests.fake_pynvml import GiB, MiB  # noqa: E402
from tests.panel_widgets import (  # noqa: E402
    HOSTILE,
    all_widgets,
    assert_escaped,
    html_of,
    open_sections,
)
from tests.records import cell_memory, leftover  # noqa: E402
from tests.shared_shell import open_models  # noqa: E402

CORE_MODULES = ("@jupyter-widgets/controls", "@jupyter-widgets/base")


# ---------------------------------------------------------------- fixtures and helpers


def leftovers_text(instance) -> str:
    """The Leftovers section as shown: the totals, each listed group's toggle and line
    (and its arrays when open), the lines under them."""
    view = instance.leftovers
    parts = [view.head.value]
    for row in view.rows:
        parts += [html.escape(row.toggle.description), row.line.value]
        if row.toggle.value:
            parts.append(row.body.value)
    return "\n".join(parts + [view.foot.value])


def open_groups(instance):
    """Open every listed leftovers group, as a user clicking each would."""
    for row in instance.leftovers.rows:
        if not row.toggle.value:
            row.toggle.set_state({"value": True})
    return instance


def render_leftovers(status) -> str:
    """The Leftovers section's HTML around the groups (the totals, the lines under)."""
    return panel_leftovers.render_leftovers_head(status) + panel_leftovers.render_leftovers_foot(
        status
    )


def panel_callbacks(ip):
    return [
        cb
        for cb in ip.events.callbacks["post_run_cell"]
        if isinstance(getattr(cb, "__self__", None), panel_module.GpuPanel)
    ]


# ---------------------------------------------------------------- the widget tree


@pytest.mark.cpu_only
def test_no_gpu_tree_says_why_and_stays_useful(ip, run_cell, show, torch):
    run_cell("import torch\nweights_on_cpu = torch.ones(256, 1024)")
    instance = show(opened=False)
    assert isinstance(instance, ipywidgets.VBox)
    assert "cgg-panel" in instance._dom_classes
    # core widgets only: Colab renders them without a custom widget manager
    for widget in all_widgets(instance):
        assert widget._model_module in CORE_MODULES, type(widget)
        assert widget._view_module in CORE_MODULES, type(widget)
    # the figures' age is the text's and the static copy's; the live panel refreshes after
    # every cell, and a cell that changed nothing changes nothing in it
    assert "after cell [" not in instance.header.value
    assert f"after cell [{ip.execution_count - 1}]," in instance.text().splitlines()[0]
    assert f"after cell [{ip.execution_count - 1}]," in instance.snapshot_html()
    # the normal state of a CPU-only machine: a calm line, no warning, no badge
    assert "cgg-badge" not in instance.header.value and "not initialised" not in html_of(instance)
    # the versions fact leads the header: here why there are none (said once)
    header = instance.header.value
    assert '<b class="cgg-versions">driver and CUDA n/a: no NVIDIA driver on this' in header
    (only,) = instance.devices.children
    assert ">No GPU</b>" in only.value and "no NVIDIA driver" not in only.value
    assert "host RAM" in only.value and "available" in only.value and "of 23" not in header
    # what is held between cells, by name, on its own line
    assert "held between cells:" in instance.now.value
    assert "cgg-code" in instance.now.value and ">weights_on_cpu</span> <b" in instance.now.value
    assert "cgg-now-warn" not in instance.now.value
    # the sections are closed, and drawn only once opened
    view = instance.leftovers
    assert view.head.value == "" and view.rows == () and view.layout.display == "none"
    open_sections(instance)
    assert view.row("weights_on_cpu").toggle.description == "\u25b8 weights_on_cpu"
    assert "Tensor: 1 array on cpu" in view.row("weights_on_cpu").line.value
    open_groups(instance)
    text = leftovers_text(instance)
    assert ">weights_on_cpu</span>" in text
    assert "[256x1024]" in text and "1 MiB" in text
    assert "held by output history / tracebacks" in text
    assert "What each cell kept" in instance.history.value
    details = instance.details.value
    assert "torch" in details and "CPU-only build" in details and "Colab: no" in details
    # a CPU-only torch never uses CUDA: not "CUDA not used yet"
    assert "CUDA not used yet" not in details and ">Colab: no</div>" in details
    assert "host RAM" in details
    labels = [w.description for w in instance.actions.children]
    assert labels[:2] == ["Refresh", "Free memory"]
    assert labels[2] == "\u25be Leftovers · 1 holder"
    assert labels[3:] == ["\u25be Processes", "\u25be History", "\u25be Details"]
    # the seed's controls are in the Details section
    assert [w.description for w in instance.seed_row.children] == ["seed", "deterministic", "Seed"]
    assert instance.details_box.layout.display is None  # open
    assert isinstance(instance.seed_value, ipywidgets.IntText)
    assert isinstance(instance.deterministic, ipywidgets.Checkbox)


def test_zero_gpus_says_nvml_lists_none(world, show):
    world(fake_pynvml.zero_gpus())
    instance = show()
    (only,) = instance.devices.children
    assert "No GPU: NVML works but lists no GPU" in only.value
    assert "driver 550.54.15 · CUDA 12.4" in instance.header.value
    open_sections(instance, "Details")  # said once: not again in the notes
    assert "NVML works but lists no GPU" not in instance.details.value


def test_one_gpu_tree(world, show):
    world(fake_pynvml.one_gpu())
    instance = show()
    (device,) = instance.devices.children
    text = device.value
    assert 'title="GPU 0: Tesla T4"' in text and "<b>0</b> Tesla T4" in text
    assert "busy 37% · 51 °C · 32 W" in text  # utilisation, temperature, power
    assert "memory bus 12%" in text and "power 32 W of 70 W" in text  # in the tooltip
    # NVML charges 1.25 GiB to this process; torch has no CUDA here: one "this kernel" part
    assert 'cgg-seg-kernel" title="this kernel (as NVML counts it): 1.25 GiB' in text
    assert "this kernel <b>1.25 GiB</b>" in text
    # NVML used (3.66 GiB) less what it charges to this process (1.25 GiB)
    assert "cgg-seg-others" in text and "others <b>2.41 GiB</b>" in text
    assert "reserved by the driver: 256 MiB" in text  # the bar's tooltip
    assert "free <b>11.1 GiB</b>" in text and "3.66 GiB of 15 GiB" in text
    assert "driver 550.54.15 · CUDA 12.4" in instance.header.value
    open_sections(instance, "Processes", "Details")
    processes = instance.processes.value
    assert "PID 5000001 · 2.5 GiB · other_trainer" in processes
    assert "python3 (this kernel)" in processes and "this kernel marked" in processes
    assert instance.toggles["Processes"].description == "\u25be Processes · 1 other"


def test_two_gpus_tree(world, show):
    world(fake_pynvml.two_gpus())
    instance = show()
    first, second = instance.devices.children
    assert "GPU 0: NVIDIA A100-SXM4-40GB" in first.value
    # MIG instances under their GPU, each with its own memory
    assert first.value.count('class="cgg-mig"') == 2
    assert "MIG 3g.20gb: 8 GiB of 20 GiB" in first.value
    assert "MIG 2g.10gb: 4 GiB of 10 GiB" in first.value
    assert "GPU 1: NVIDIA H100 80GB HBM3" in second.value
    assert "this kernel <b>6 GiB</b>" in second.value
    assert "others" not in second.value.split("cgg-bar")[1]  # no zero legend segments
    open_sections(instance, "Processes")
    assert "mig_job_a" in instance.processes.value and "mig_job_b" in instance.processes.value


def test_same_model_twice_is_counted_once(world, show):
    machine = fake_pynvml.two_gpus()
    machine.gpus[0] = dataclasses.replace(machine.gpus[1], uuid="GPU-cccc", bus_id="0:1:0.0")
    world(machine)
    instance = show()
    first, second = instance.devices.children
    assert "NVIDIA H100 80GB HBM3" in first.value and "NVIDIA H100 80GB HBM3" in second.value


def test_device_bar_splits_allocator_context_others_driver_free(world, show):
    world(fake_pynvml.one_gpu())
    instance = show()
    base = instance.last_status
    mine = DeviceMemory(
        device=0,
        allocated=512 * MiB,
        reserved=768 * MiB,
        peak_allocated=700 * MiB,
        num_ooms=0,
        nvml_index=0,
        matched_by="uuid",
        nvml_used_by_this_process=1_280 * MiB,
        context_and_other=512 * MiB,
    )
    status = dataclasses.replace(base, memory=(mine,))
    device = status.nvml.devices[0]
    segments = panel_html.device_segments(status, device)
    assert segments == [
        ("tensors", 512 * MiB),
        ("cache", 256 * MiB),
        ("context", 512 * MiB),
        ("others", 3_750 * MiB - 1_280 * MiB),
        ("driver", 256 * MiB),
        ("free", 15_360 * MiB - 3_750 * MiB - 256 * MiB),
    ]
    assert sum(size for _, size in segments) == device.memory_total
    instance.refresh(status)
    text = instance.devices.children[0].value
    assert "GPU 0: Tesla T4 (cuda:0)" in text
    for key in ("tensors", "cache", "context", "others", "driver", "free"):
        assert f"cgg-seg-{key}" in text
    assert "this kernel&#x27;s tensors (allocated): 512 MiB (3.3%)" in text
    # this kernel = tensors + cache + context; others; free
    assert "this kernel <b>1.25 GiB</b>" in text and "others <b>2.41 GiB</b>" in text


def test_device_bar_when_nvml_cannot_see_this_pid(world, show):
    world(fake_pynvml.one_gpu(this_pid=4_999_999))  # a container: NVML reports host PIDs
    instance = show()
    status = instance.last_status
    mine = DeviceMemory(
        0,
        allocated=GiB,
        reserved=2 * GiB,
        peak_allocated=GiB,
        num_ooms=0,
        nvml_index=0,
        matched_by="uuid",
    )
    status = dataclasses.replace(status, memory=(mine,))
    segments = dict(panel_html.device_segments(status, status.nvml.devices[0]))
    assert segments["tensors"] == GiB and segments["cache"] == GiB
    assert "context" not in segments
    assert segments["others+context"] == 3_750 * MiB - 2 * GiB


def test_device_parts_are_reused_and_follow_the_device_count(world, show):
    world(fake_pynvml.two_gpus())
    instance = show()
    parts = instance.devices.children
    assert len(parts) == 2
    instance.refresh()
    assert instance.devices.children == parts  # same widgets, updated in place
    world(fake_pynvml.one_gpu())
    instance.refresh()
    assert len(instance.devices.children) == 1
    assert instance.devices.children[0] is parts[0]
    assert parts[1].comm is None  # the dropped part was closed
    world(fake_pynvml.no_library())
    instance.refresh()
    assert "No GPU" in instance.devices.children[0].value


def test_broken_context_badge_says_restart(world, show):
    world(fake_pynvml.one_gpu())
    cuda_health.mark_broken("CUDA error: device-side assert triggered")
    instance = show()
    assert "cgg-health-broken" in instance.header.value
    assert "CUDA context broken: restart the runtime" in instance.header.value
    assert "device-side assert triggered" in instance.header.value  # tooltip
    assert "cgg-now-error" in instance.now.value and "restart the runtime" in instance.now.value
    open_sections(instance, "Details")
    assert "restart the runtime" in instance.details.value  # the notes


def test_colab_is_detected_in_the_header(monkeypatch, show):
    monkeypatch.setenv("COLAB_RELEASE_TAG", "release-colab-20240101")
    instance = show()
    open_sections(instance, "Details")
    assert "Colab: yes" in instance.details.value
    # what to do, once, where the GPU line would be; not again in the notes
    assert "Runtime &gt; Change runtime type &gt; a GPU" in instance.devices.children[0].value
    assert "Change runtime type" not in instance.details.value


# ---------------------------------------------------------------- refresh cost and updates


def test_refresh_writes_only_what_changed(show):
    instance = show()
    status = instance.last_status
    before = instance.updates
    assert instance.refresh(status) == 0  # the same snapshot: nothing written
    assert instance.updates == before
    later = dataclasses.replace(status, taken_at=status.taken_at + 3600)
    assert instance.refresh(later) == 1  # only the open Details' time: no time in the header
    assert instance.updates == before + 1
    instance.toggles["Details"].value = False
    assert instance.refresh(dataclasses.replace(later, taken_at=later.taken_at + 1)) == 0


def test_refresh_takes_exactly_one_snapshot(ip, show, monkeypatch):
    instance = show()
    calls = []
    real = panel_refresh._take_status

    def counting(shell):
        calls.append(shell)
        return real(shell)

    monkeypatch.setattr(instance.refresher, "snapshot", counting)
    instance.refresh_button.click()
    assert calls == [ip]


def test_showing_again_reuses_the_panel_and_cost_does_not_grow(ip, run_cell, show):
    first = show()
    for _ in range(5):
        assert show() is first
    assert len(panel_callbacks(ip)) == 1
    before = first.refreshes
    run_cell("a_value = 1")
    assert first.refreshes == before + 1


def test_api_returns_the_same_widget(ip, show):
    widget = panel_module.panel()
    assert isinstance(widget, panel_module.GpuPanel)
    import colab_gpu_guard

    assert colab_gpu_guard.panel() is widget  # the public function, not a module
    with pytest.raises(ModuleNotFoundError):  # no module of that name can shadow it
        importlib.import_module("colab_gpu_guard.panel")
    assert colab_gpu_guard.panel() is widget
    assert show() is widget
    assert len(panel_callbacks(ip)) == 1


# ---------------------------------------------------------------- refreshing after cells


def test_refreshes_after_each_cell(ip, run_cell, show, torch):
    instance = show()
    before = instance.refreshes
    run_cell("import torch\nnew_tensor_after_panel = torch.zeros(64, 64)")
    assert instance.refreshes == before + 1
    assert "new_tensor_after_panel" in leftovers_text(instance)
    run_cell("del new_tensor_after_panel")
    assert instance.refreshes == before + 2
    assert "new_tensor_after_panel" not in leftovers_text(instance)


def test_slow_leftovers_scan_is_not_repeated_after_every_cell(
    ip, run_cell, show, monkeypatch, torch, real_throttle
):
    """A snapshot that took 0.8 s (10^5 arrays) is taken again after a cell only once it
    costs at most 10% of the time since the last; meanwhile the rest of the panel is new
    and the leftovers say how old they are. Refresh always scans."""
    now = [1000.0]
    monkeypatch.setattr(panel_refresh, "_clock", lambda: now[0])
    real = panel_refresh._take_status
    full_scans = []

    def slow(shell, leftovers=True):
        taken = real(shell, leftovers=leftovers)
        if leftovers:
            full_scans.append(1)
            return taken._replace(status=dataclasses.replace(taken.status, duration_ms=800.0))
        return taken

    monkeypatch.setattr(panel_refresh, "_take_status", slow)
    instance = show()
    monkeypatch.setattr(instance.refresher, "snapshot", slow)
    instance.refresh_button.click()  # a full scan, timed at 0.8 s
    scans = len(full_scans)
    before = instance.refreshes

    run_cell("import torch\nmade_after_slow_scan = torch.zeros(64, 64)")
    assert instance.refreshes == before + 1  # the panel still refreshed...
    assert len(full_scans) == scans  # ...without scanning for leftovers
    assert "made_after_slow_scan" not in leftovers_text(instance)
    assert "finding them took 800 ms" in leftovers_text(instance)
    assert "at most every 8 s; Refresh finds them now" in leftovers_text(instance)
    assert instance.last_status.history  # the per-cell history is current
    assert instance.last_status.history[-1].cell == ip.execution_count - 1

    now[0] += 8.5  # 0.8 s is now under 10% of the time since the scan
    run_cell("pass")
    assert len(full_scans) == scans + 1
    assert "made_after_slow_scan" in leftovers_text(instance)
    assert "finding them took" not in leftovers_text(instance)

    run_cell("del made_after_slow_scan")  # right after a slow scan: not repeated
    assert len(full_scans) == scans + 1 and "made_after_slow_scan" in leftovers_text(instance)
    instance.refresh_button.click()
    assert len(full_scans) == scans + 2
    assert "made_after_slow_scan" not in leftovers_text(instance)


def test_a_reused_slow_scan_keeps_what_it_said_of_its_leftovers(
    ip, run_cell, show, monkeypatch, torch, real_throttle
):
    """The leftovers a slow scan found are shown again after the next cell: so is what
    that scan said of them (here: graph values it could not measure), known as the scan's
    by the record the snapshot keeps (not by its words); other notes are new."""
    now = [1000.0]
    monkeypatch.setattr(panel_refresh, "_clock", lambda: now[0])
    real = panel_refresh._take_status
    said = "autograd graphs: 2 saved values packed by a pack hook were not measured"

    def slow(shell, leftovers=True):
        taken = real(shell, leftovers=leftovers)
        if leftovers:
            notes = (*taken.status.notes, said, "leftovers: an old note of the snapshot's")
            status = dataclasses.replace(taken.status, duration_ms=800.0, notes=notes)
            return panel_refresh.Taken(status, (*taken.scan_notes, said))
        return taken

    monkeypatch.setattr(panel_refresh, "_take_status", slow)
    instance = show()
    monkeypatch.setattr(instance.refresher, "snapshot", slow)
    instance.refresh_button.click()
    run_cell("pass")
    assert "finding them took 800 ms" in leftovers_text(instance)  # the scan was reused
    assert said in instance.last_status.notes
    assert "leftovers: an old note of the snapshot's" not in instance.last_status.notes


def test_fast_leftovers_scan_runs_after_every_cell(ip, run_cell, show, monkeypatch, torch):
    now = [1000.0]
    monkeypatch.setattr(panel_refresh, "_clock", lambda: now[0])  # time stands still
    instance = show()
    for index in range(3):
        run_cell(f"import torch\nquick_{index} = torch.zeros(8)")
        assert f"quick_{index}" in leftovers_text(instance)
        assert "finding them took" not in leftovers_text(instance)
    run_cell("del quick_0, quick_1, quick_2")


def test_close_stops_refreshes(ip, run_cell, show):
    instance = show()
    assert instance.live
    instance.close()
    assert instance.closed and not instance.live
    assert panel_callbacks(ip) == []
    before = instance.refreshes
    run_cell("b_value = 2")
    assert instance.refreshes == before
    assert all(w.comm is None for w in all_widgets(instance))
    assert panel_module.current_panel(ip) is None
    assert show() is not instance  # a fresh one after closing


def test_close_leaves_no_widget_model_open(ip, run_cell, show, world):
    """Every model the panel made is closed with it, its Layouts and Styles too (ipywidgets'
    own close leaves those open, in the kernel and in the front end): a panel reopened all
    day leaves nothing behind, and a GPU line dropped when GPUs go away is closed too."""
    world(fake_pynvml.two_gpus())
    before = open_models()
    instance = show()
    made = {key: model for key, model in open_models().items() if key not in before}
    assert len(made) > 50 and any(isinstance(m, ipywidgets.Layout) for m in made.values())
    lines = list(instance.devices.children)
    assert len(lines) == 2
    dropped = lines[1].layout.model_id
    world(fake_pynvml.one_gpu())
    instance.refresh()
    assert lines[1].comm is None and lines[1].layout.comm is None
    assert dropped not in open_models()
    instance.close()
    assert [type(m).__name__ for k, m in open_models().items() if k in made] == []
    show()  # a new panel after it makes its own models
    ip.run_cell("%gpu_panel --close", store_history=True)
    assert set(open_models()) <= set(before)


def test_close_all_stops_refreshes(ip, run_cell, show):
    instance = show()
    ipywidgets.Widget.close_all()
    assert instance.closed
    assert panel_callbacks(ip) == []
    before = instance.refreshes
    run_cell("c_value = 3")
    assert instance.refreshes == before


def test_close_magic_and_new(ip, show):
    first = show()
    second = show("--new")
    assert second is not first and first.closed
    assert len(panel_callbacks(ip)) == 1
    ip.run_cell("%gpu_panel --close", store_history=True)
    assert second.closed
    assert panel_module.current_panel(ip) is None
    assert panel_callbacks(ip) == []


def test_unload_stops_and_reload_has_no_duplicate_callbacks(ip, run_cell, show):
    old = show()
    ip.run_line_magic("reload_ext", "colab_gpu_guard")
    assert not old.live
    assert old.refresh_button.disabled and old.free_button.disabled and old.seed_button.disabled
    assert "no longer refreshes" in old.message.value
    assert panel_callbacks(ip) == []
    new = show()
    assert new is not old
    show()
    ip.run_line_magic("reload_ext", "colab_gpu_guard")
    ip.run_line_magic("reload_ext", "colab_gpu_guard")
    newest = show()
    assert len(panel_callbacks(ip)) == 1
    counts = (old.refreshes, new.refreshes, newest.refreshes)
    run_cell("d_value = 4")
    assert (old.refreshes, new.refreshes, newest.refreshes) == (
        counts[0],
        counts[1],
        counts[2] + 1,
    )
    ip.run_line_magic("unload_ext", "colab_gpu_guard")
    assert panel_callbacks(ip) == []
    run_cell("e_value = 5")
    assert newest.refreshes == counts[2] + 1
    ip.run_line_magic("load_ext", "colab_gpu_guard")  # the fixture unloads it


def test_api_panel_without_the_extension_hooks_the_shell_then_moves_under_it(ip, run_cell):
    ip.run_line_magic("unload_ext", "colab_gpu_guard")
    try:
        widget = panel_module.panel(ip)
        assert widget.live and widget.registration is None
        assert len(panel_callbacks(ip)) == 1
        before = widget.refreshes
        run_cell("f_value = 6")
        assert widget.refreshes == before + 1
    finally:
        ip.run_line_magic("load_ext", "colab_gpu_guard")
    ip.run_cell("%gpu_panel", store_history=True)
    assert panel_module.current_panel(ip) is widget
    assert widget.registration is not None  # now %unload_ext stops it
    assert len(panel_callbacks(ip)) == 1


def test_snapshot_failure_is_shown_not_raised(ip, run_cell, show, monkeypatch):
    instance = show()
    tracebacks = []
    monkeypatch.setattr(ip, "showtraceback", lambda *a, **k: tracebacks.append(a))

    def broken(shell):
        raise RuntimeError("NVML exploded " + HOSTILE)

    monkeypatch.setattr(instance.refresher, "snapshot", broken)
    result = run_cell("g_value = 7")
    assert result.success
    instance.refresh_button.click()
    assert tracebacks == []
    assert "snapshot failed: RuntimeError: NVML exploded" in instance.message.value
    assert_escaped(instance.message.value)


# ---------------------------------------------------------------- the buttons


def test_seed_button_seeds_every_rng(ip, show, torch):
    import random

    instance = show()
    instance.seed_value.value = 1234
    instance.deterministic.value = False
    instance.seed_button.click()
    drawn = (random.random(), torch.rand(3).tolist())
    random.seed(1234)
    torch.manual_seed(1234)
    assert drawn == (random.random(), torch.rand(3).tolist())
    assert "seed_all: seed 1234: random, numpy, torch (cpu" in instance.message.value
    assert "cgg-msg-ok" in instance.message.value
    assert not torch.are_deterministic_algorithms_enabled()


def test_seed_button_takes_over_the_per_cell_base(ip, show, torch):
    cell = "cell_draw = torch.rand(2).tolist()"

    def draw() -> list:
        assert ip.run_cell(cell).success
        return ip.user_ns["cell_draw"]

    ip.run_cell("import torch")
    ip.run_line_magic("seed_all", "5 --every-cell")
    from_5 = draw()
    ip.run_line_magic("seed_all", "42 --every-cell")
    assert draw() != from_5
    instance = show()
    instance.seed_value.value = 5
    instance.deterministic.value = False
    try:
        instance.seed_button.click()
        assert "every cell reseeded from 5" in instance.message.value
        ip.run_cell("between = torch.rand(9)")  # draws in between change nothing
        assert draw() == from_5  # the button's seed is the per-cell base now, as the magic's
    finally:
        ip.run_line_magic("seed_all", "--no-every-cell")


def test_seed_button_leaves_per_cell_reseeding_off(ip, show, torch):
    instance = show()
    instance.seed_value.value = 5
    instance.seed_button.click()
    assert "every cell" not in instance.message.value
    registry = ip.magics_manager.registry
    assert registry["SeedMagics"].reseeder is None


def test_seed_button_deterministic_checkbox(ip, show, torch):
    instance = show()
    instance.seed_value.value = 5
    instance.deterministic.value = True
    try:
        instance.seed_button.click()
        assert torch.are_deterministic_algorithms_enabled()
        assert "deterministic on" in instance.message.value
    finally:
        from colab_gpu_guard import seeding

        seeding.seed_all(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_seed_button_keeps_deterministic_mode_and_shows_it(ip, show, torch):
    from colab_gpu_guard import seeding

    ip.run_line_magic("seed_all", "42 --warn-only")
    try:
        instance = show()
        assert instance.deterministic.value is True  # the box shows the mode in force
        instance.deterministic.value = False  # unticking it does not switch the mode off
        instance.seed_value.value = 5
        instance.seed_button.click()
        assert torch.are_deterministic_algorithms_enabled()
        assert torch.is_deterministic_algorithms_warn_only_enabled()
        assert "deterministic on (warn-only, kept)" in instance.message.value
        assert instance.deterministic.value is True
        # switched off elsewhere: the box, still ticked, does not switch it back on
        ip.run_line_magic("seed_all", "6 --no-deterministic")
        instance.seed_button.click()
        assert not torch.are_deterministic_algorithms_enabled()
        assert instance.deterministic.value is False
    finally:
        seeding.seed_all(0, deterministic=False)


def test_seed_button_keeps_a_mode_switched_on_by_hand(ip, show, torch):
    from colab_gpu_guard import seeding

    torch.use_deterministic_algorithms(True)
    try:
        instance = show()
        assert instance.deterministic.value is True
        instance.seed_button.click()
        assert torch.are_deterministic_algorithms_enabled()
        assert "deterministic on (kept)" in instance.message.value
    finally:
        seeding.seed_all(0, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()


def test_failing_seed_shows_the_error_in_the_panel(ip, show, monkeypatch):
    instance = show()
    tracebacks = []
    monkeypatch.setattr(ip, "showtraceback", lambda *a, **k: tracebacks.append(a))
    instance.seed_value.value = -1
    instance.seed_button.click()
    assert tracebacks == []
    assert "cgg-msg-error" in instance.message.value
    assert "Seed failed: ValueError: seed must be" in instance.message.value


def test_refresh_button_takes_a_new_snapshot(ip, show):
    instance = show()
    before = instance.refreshes
    ip.user_ns["late_name"] = None
    instance.refresh_button.click()
    assert instance.refreshes == before + 1


def test_free_memory_button_releases_output_history(ip, run_cell, show, torch):
    pytest.importorskip("colab_gpu_guard.reset.apply")
    run_cell("import torch, weakref")
    result = run_cell("torch.ones(512, 1024) * 3")  # the result lands in Out / _ / _N
    probe = weakref.ref(result.result)
    del result
    run_cell("pass")
    instance = show()
    assert probe() is not None
    assert "output history" in leftovers_text(instance)
    assert "2 MiB" in leftovers_text(instance).split("held by output history")[1]
    instance.free_button.click()
    gc.collect()
    assert probe() is None, "the tensor held by Out[] survived Free memory"
    assert "cgg-msg-ok" in instance.message.value
    assert "gpu_reset: dropped " in instance.message.value
    assert "freed 2 MiB" in instance.message.value
    assert not any(row.group.released_by_reset for row in instance.leftovers.rows)
    assert "Free releases it" not in leftovers_text(instance)


def test_free_memory_never_deletes_user_variables(ip, run_cell, show, torch):
    pytest.importorskip("colab_gpu_guard.reset.apply")
    run_cell("import torch\nkept_by_user = torch.ones(128)")
    instance = show()
    instance.free_button.click()
    assert "kept_by_user" in ip.user_ns
    assert "kept_by_user" in leftovers_text(instance)


def test_failing_free_shows_the_error_in_the_panel(ip, show, monkeypatch):
    instance = show()
    tracebacks = []
    monkeypatch.setattr(ip, "showtraceback", lambda *a, **k: tracebacks.append(a))
    fake_reset = types.ModuleType("colab_gpu_guard.reset.apply")

    def gpu_reset(*names, **kwargs):
        raise RuntimeError("CUDA error: " + HOSTILE)

    fake_reset.gpu_reset = gpu_reset
    monkeypatch.setitem(sys.modules, "colab_gpu_guard.reset.apply", fake_reset)
    instance.free_button.click()
    assert tracebacks == []
    assert "Free memory failed: RuntimeError: CUDA error:" in instance.message.value
    assert_escaped(instance.message.value)


def test_free_passes_no_all_and_shows_the_summary(ip, show, monkeypatch):
    instance = show()
    seen = {}

    class Report:
        def __str__(self):
            return "gpu_reset: freed 3.00 MiB\n  Out[3] cleared"

    fake_reset = types.ModuleType("colab_gpu_guard.reset.apply")

    def gpu_reset(*names, **kwargs):
        seen["names"], seen["kwargs"] = names, kwargs
        return Report()

    fake_reset.gpu_reset = gpu_reset
    monkeypatch.setitem(sys.modules, "colab_gpu_guard.reset.apply", fake_reset)
    instance.free_button.click()
    assert seen == {"names": (), "kwargs": {"shell": ip}}
    assert "gpu_reset: freed 3.00 MiB" in instance.message.value
    assert "Out[3] cleared" in instance.message.value  # in the details


# ---------------------------------------------------------------- escaping


def test_hostile_names_are_escaped_everywhere(ip, run_cell, world, show, torch):
    machine = fake_pynvml.one_gpu()
    machine.gpus[0].name = HOSTILE
    machine.gpus[0].processes[0].name = HOSTILE
    world(machine)
    cuda_health.mark_broken(HOSTILE)
    ip.user_ns["hostile_holder"] = {HOSTILE: torch.ones(8)}
    instance = open_groups(show())
    text = html_of(instance)
    assert "hostile_holder[" in leftovers_text(instance)
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in instance.header.value
    assert "&lt;script&gt;" in instance.devices.children[0].value
    assert_escaped(text)
    record = cell_memory(
        cell=HOSTILE, allocated_after=GiB, peak=2 * GiB, rerun_leak=True, leak_bytes=MiB
    )
    entry = leftover(
        name=HOSTILE,
        holder=HOSTILE,
        shape=(1,),
        dtype=HOSTILE,
        device=HOSTILE,
        nbytes=4,
        shared_with=(HOSTILE,),
    )
    status = dataclasses.replace(
        instance.last_status,
        history=(record,),
        leftovers=(entry,),
        leftovers_count=1,
        leftover_groups=group_leftovers([entry]).groups,
        notes=(HOSTILE,),
        leftovers_note=HOSTILE,
        history_note=HOSTILE,
    )
    instance.refresh(status)
    assert instance.leftovers.row(HOSTILE) is not None  # an entry with no group: its own
    assert_escaped(html_of(open_groups(instance)))
    assert_escaped(panel_html.render_message("error", HOSTILE, HOSTILE))
    nohost = dataclasses.replace(status, leftovers=None, history=None)
    assert_escaped(render_leftovers(nohost) + chart.render_history(nohost))
    del ip.user_ns["hostile_holder"]


# ---------------------------------------------------------------- leftovers and history


def test_leftovers_show_the_top_ten_and_the_freeable_total(show):
    instance = show()
    entries = tuple(
        leftover(
            name=f"t{index}",
            holder="output history" if index % 2 else "user variable",
            shape=(index + 1, 4) if index else (20000,),
            dtype="float32",
            device="cuda:0",
            nbytes=(index + 1) * MiB,
            storage_id=index,
        )
        for index in range(12)
    )
    status = dataclasses.replace(
        instance.last_status,
        leftovers=tuple(sorted(entries, key=lambda e: -e.nbytes)),
        leftovers_count=12,
        leftovers_bytes=78 * MiB,
        leftovers_freeable_bytes=None,  # a snapshot without the total: from the entries
        leftover_groups=None,  # nor groups: the arrays themselves are listed
    )
    text = render_leftovers(status)
    assert "12 arrays, 78 MiB in all (the 10 biggest shown)" in text
    assert text.count('class="cgg-entry"') == 10  # ten arrays
    assert ">t11</span>" in text and ">t1</span>" not in text
    # odd indexes are output history: 2+4+...+12 MiB = 42 MiB, including the two not shown
    assert "held by output history / tracebacks: <b>42 MiB</b>" in text
    assert "[12x4]" in text and "cuda:0" in text and "float32" in text
    # a long name wraps, whole; no row is cut (narrow, a row wraps into a list)
    assert "text-overflow:ellipsis" not in text and "flex-wrap:wrap" in text
    status = dataclasses.replace(
        status, leftovers=(dataclasses.replace(entries[0], name="w" * 300),)
    )
    assert f">{'w' * 300}</span>" in render_leftovers(status)
    assert "[20000]" in render_leftovers(status)  # a 1-D shape as the text reports write it
    # a live snapshot carries the total over everything found, shown or not
    status = dataclasses.replace(
        status, leftovers=status.leftovers[:10], leftovers_freeable_bytes=0
    )
    assert "held by output history / tracebacks: <b>0 B</b>" in render_leftovers(status)
    status = dataclasses.replace(status, leftovers_freeable_bytes=42 * MiB)
    text = render_leftovers(status)
    assert "held by output history / tracebacks: <b>42 MiB</b>" in text


def test_history_chart_shows_what_each_cell_kept_on_a_labelled_scale(show):
    instance = show()
    records = tuple(
        cell_memory(
            cell=number,
            devices=1,
            allocated_before=(number - 1) * 100 * MiB,
            allocated_after=number * 100 * MiB,
            peak=(number - 1) * 100 * MiB + 150 * MiB,
            reserved_after=number * 128 * MiB,
            rerun_leak=number == 7,
            leak_bytes=100 * MiB if number == 7 else 0,
            leak_kind="cuda:0" if number == 7 else "",
            rerun_of=5 if number == 7 else None,
        )
        for number in range(3, 9)
    )
    status = dataclasses.replace(instance.last_status, history=records, history_note=None)
    text = chart.render_history(status)
    assert "What each cell kept</b> (CUDA allocated, the last 6 cells)" in text
    assert text.count('class="cgg-cell"') == 6 and text.count('class="cgg-cell-bar"') == 6
    # each cell kept 100 MiB; its peak rose 150 MiB above its start: the scale ends at 200 MiB
    assert ">+200 MiB</div>" in text and ">0 B</div>" in text
    assert text.count(f"height:{chart.PLOT_H / 2:.1f}px;background") == 6  # 100 of 200 MiB
    assert text.count('class="cgg-cell-peak"') == 6
    assert (
        'title="cell [7]: CUDA allocated +100 MiB, allocated after 700 MiB, peak 750 MiB; '
        "rerun leak: cell [7] (a rerun of [5]) kept +100 MiB on cuda:0 again"
    ) in text
    assert text.count("rerun leak</span> cell [7] (a rerun of [5]) kept +100 MiB") == 1
    for number in range(3, 9):
        assert f">{number}</span>" in text
    assert "last [8] +100 MiB" in text
    instance.refresh(status)
    assert instance.history.value == text


def test_history_chart_on_cpu_draws_host_memory_changes(show):
    instance = show()
    records = tuple(
        cell_memory(cell=number, rss_after=rss * MiB)
        for number, rss in ((1, 100), (2, 150), (3, 130))
    )
    status = dataclasses.replace(instance.last_status, history=records, history_note=None)
    text = chart.render_history(status)
    assert "(host resident memory, the last 3 cells)" in text and "last [3] -20 MiB" in text
    assert text.count('class="cgg-cell-bar"') == 2  # the first cell has no reading before it
    assert ">+50 MiB</div>" in text and ">-20 MiB</div>" in text  # the scale's ends
    assert "cell [2]: host resident memory +50 MiB, resident after 150 MiB" in text
    assert "cell [1]: host resident memory change not known (first reading)" in text
    assert "most &#9650; [2] +50 MiB" in text
    # 31 records for 30 cells: the one before gives the first cell's reading before it
    records = tuple(cell_memory(cell=n, rss_after=(100 + n) * MiB) for n in range(1, 32))
    status = dataclasses.replace(status, history=records)
    text = chart.render_history(status, cells=30)
    assert text.count('class="cgg-cell"') == 30 and text.count('class="cgg-cell-bar"') == 30


def test_history_from_the_real_tracker(ip, run_cell, show, torch):
    pytest.importorskip("colab_gpu_guard.cells.tracker")
    instance = show()
    # as in a fresh kernel: freed heap goes back to the system, so a keep grows the RSS
    run_cell(
        "import ctypes\ntry:\n    ctypes.CDLL(None).malloc_trim(0)\nexcept Exception:\n    pass"
    )
    run_cell("h_value = 8")
    run_cell("import torch\nkept_by_the_cell = torch.ones(24 * 2**20, dtype=torch.uint8) + 1")
    nbytes = ip.user_ns["kept_by_the_cell"].untyped_storage().nbytes()
    run_cell("h_value += 1")
    for name in ("kept_by_the_cell", "h_value"):  # later tests share this namespace
        ip.user_ns.pop(name, None)
    text = instance.history.value
    assert "What each cell kept</b> (host resident memory" in text
    cell = ip.execution_count - 2
    match = re.search(rf"cell \[{cell}\]: host resident memory \+([0-9.]+) MiB", text)
    assert match is not None, text
    assert float(match.group(1)) * MiB >= nbytes * 0.95  # the tensor it kept (24 MiB)


# ---------------------------------------------------------------- import cost


def test_load_ext_does_not_import_the_panel_or_ipywidgets():
    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_line_magic('load_ext', 'colab_gpu_guard')\n"
        "print('colab_gpu_guard.ipython.panel' in sys.modules, 'ipywidgets' in sys.modules)\n"
    )
    root = str(Path(__file__).resolve().parents[3])
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=root, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[-2:] == ["False", "False"]


# ---------------------------------------------------------------- real CUDA (lent GPU machines)


@pytest.mark.gpu
def test_real_gpu_bar_and_free_memory(ip, run_cell, show, torch):
    """On a real GPU: the bar's tensor segment covers this kernel's CUDA tensors, the badge
    says the context is ok, and Free memory releases a CUDA tensor held only by Out[]."""
    nvml.set_pynvml(None)
    run_cell("import torch\ngpu_kept = torch.ones(64, 1024, 1024, device='cuda')")  # 256 MiB
    run_cell("torch.ones(32, 1024, 1024, device='cuda') * 2")  # 128 MiB, only in Out[]
    run_cell("pass")
    instance = show()
    status = instance.last_status
    assert status.has_gpu, status.nvml.error
    assert f"after cell [{ip.execution_count - 1}]" in instance.text()
    assert "cgg-badge" not in instance.header.value  # a healthy context: no badge
    assert "cgg-now-error" not in instance.now.value
    index = status.memory[0].nvml_index
    assert index is not None, status.memory
    device = status.nvml.devices[index]
    segments = dict(compact.device_segments(status, device))
    assert segments["tensors"] >= 384 * MiB
    assert segments["free"] == device.memory_free
    assert "cgg-seg-tensors" in instance.devices.children[index].value
    assert instance.leftovers.row("gpu_kept") is not None
    before = torch.cuda.memory_allocated()
    instance.free_button.click()
    assert "cgg-msg-ok" in instance.message.value, instance.message.value
    assert torch.cuda.memory_allocated() <= before - 128 * MiB
    assert "gpu_kept" in ip.user_ns
    del ip.user_ns["gpu_kept"]
    ip.run_line_magic("gpu_reset", "")


@pytest.mark.skipif(host_memory.RssReader().read() is None, reason="needs /proc/self/statm")
def test_what_the_panels_refresh_allocates_is_charged_to_no_cell(ip, run_cell, show, monkeypatch):
    """The refresh after a cell runs between two cells; what it keeps (here 32 MB,
    written so it is resident) must not appear as the next cell's growth in the chart
    (it did: the next cell started from the last cell's reading)."""
    from colab_gpu_guard.cells import tracker
    from colab_gpu_guard.status import chart

    instance = show()
    kept: list = []
    real = instance.refresher.cell_snapshot

    def allocating():
        kept.append(bytearray(b"\x01") * (32 * 2**20))
        return real()

    monkeypatch.setattr(instance.refresher, "cell_snapshot", allocating)
    run_cell("quiet_a = 1")  # its refresh allocates 32 MB after the tracker's reading
    record = run_cell("quiet_b = 2").execution_count
    (mine,) = [r for r in tracker.memory_history() if r.cell == record]
    assert mine.rss_before is not None and mine.rss_after - mine.rss_before < 8 * MiB
    _measure, changes = chart.cell_changes(tracker.memory_history(), None)
    (change,) = [c for c in changes if c.cell == record]
    assert change.change is not None and change.change < 8 * MiB
    ip.user_ns.pop("quiet_a", None)
    ip.user_ns.pop("quiet_b", None)
