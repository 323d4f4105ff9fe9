"""%gpu_panel's conflicting flags are a usage error that changes nothing, and without
ipywidgets the magic says what is missing and shows the status as text (no traceback)."""

from __future__ import annotations

import sys

import pytest
from IPython.core.error import UsageError

from colab_gpu_guard.ipython import panel as panel_module
from colab_gpu_guard.units import jargon_in


@pytest.mark.parametrize("flags", ["--close --new", "--new --close", "--close --live 2"])
def test_close_with_another_flag_is_a_usage_error_that_changes_nothing(ip, show, flags):
    opened = show()
    with pytest.raises(UsageError) as error:
        ip.run_line_magic("gpu_panel", flags)
    message = str(error.value)
    assert "contradict each other: give one" in message
    assert message.splitlines()[-1].startswith("Usage: %gpu_panel")
    assert panel_module.current_panel(ip) is opened and not opened.closed


def test_without_ipywidgets_it_says_so_and_shows_the_text_status(ip, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if installed without it
    result = ip.run_cell("%gpu_panel", store_history=True)
    assert result.error_in_exec is None
    out = capsys.readouterr().out
    first, rest = out.split("\n", 1)
    assert first == (
        "gpu_panel: the panel needs ipywidgets, which is not installed here "
        "(pip install ipywidgets); the status as text instead:"
    )
    assert rest.startswith("GPU status |") and "Traceback" not in out
    assert jargon_in(out) == []
    assert panel_module.current_panel(ip) is None  # no widget was made
    ip.run_cell("%gpu_panel --close", store_history=True)
    assert capsys.readouterr().out.startswith("gpu_panel: the panel needs ipywidgets")
