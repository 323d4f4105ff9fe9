"""The panel tests' fixtures: a clean NVML and Colab state (autouse; a module may
override it), a scan after every cell (autouse; `real_throttle` puts the panel's own
back), `torch`, and `show` (%gpu_panel in the shell, every section open)."""

from __future__ import annotations

import sys

import pytest

from colab_gpu_guard import cuda_health, nvml
from colab_gpu_guard.ipython import panel as panel_module
from colab_gpu_guard.ipython.panel import refresh as panel_refresh
from tests import fake_pynvml
from tests.panel_widgets import open_sections
from tests.shared_shell import global_shell

THROTTLED_ABOVE_S = panel_refresh.ALWAYS_SCAN_S  # the panel's own: a slower scan is not redone


@pytest.fixture(autouse=True)
def scan_after_every_cell(monkeypatch):
    """Most panel tests are about what a scan shows, not about its throttle: a snapshot
    slower than ALWAYS_SCAN_S (a loaded machine, a test process after two thousand tests)
    would keep the last scan's leftovers after a cell, as the panel says it does."""
    monkeypatch.setattr(panel_refresh, "ALWAYS_SCAN_S", 3600.0)


@pytest.fixture
def real_throttle(monkeypatch):
    """The panel's own throttle, for the tests of it."""
    monkeypatch.setattr(panel_refresh, "ALWAYS_SCAN_S", THROTTLED_ABOVE_S)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    for key in ("COLAB_RELEASE_TAG", "COLAB_GPU", "COLAB_BACKEND_VERSION", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    shell = global_shell()
    before = set(shell.user_ns)
    yield
    for name in [name for name in shell.user_ns if name not in before]:
        if not name.startswith("_"):  # IPython's own names for inputs and outputs
            shell.user_ns.pop(name)
    for instance in list(panel_module._panels.values()):
        instance.close()
    panel_module._panels.clear()
    nvml.set_pynvml(None)
    cuda_health.clear()


@pytest.fixture
def torch():
    return pytest.importorskip("torch")


@pytest.fixture
def show(ip):
    """Run `%gpu_panel [args]` in the shell and return the panel it shows."""

    def run(args: str = "", opened: bool = True):
        result = ip.run_cell(f"%gpu_panel {args}".strip(), store_history=True)
        assert result.error_in_exec is None, result.error_in_exec
        instance = panel_module.current_panel(ip)
        assert instance is not None
        if opened:  # every section open (they stay open across refreshes), as a user would
            open_sections(instance)
        return instance

    return run
