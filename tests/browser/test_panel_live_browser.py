"""%gpu_panel --live in real front ends (JupyterLab 4 + ipywidgets 8, classic Notebook 6.5 +
ipywidgets 7.7.1), in headless Chromium: while a long cell runs, the page shows the header
say "GPU lines live" and the GPU line follow the memory the cell takes; after the cell the
header says only the versions again.

NVML answers from the fake Tesla T4 of tests/fake_pynvml.py in the kernel; the cell grows
its used memory. Environments and skipping as in test_panel_browser.py (.ci/browser.sh).
"""

from __future__ import annotations

import pytest

from tests.browser import frontends
from tests.browser.notebook_page import (
    TIMEOUT_MS,
    output_dir,
    require,
    run_all_cells,
    show_panel,
)

CELLS = [
    "%load_ext colab_gpu_guard\n"
    "import time\n"
    "from colab_gpu_guard import nvml\n"
    "from tests import fake_pynvml\n"
    "machine = fake_pynvml.one_gpu()\n"
    "nvml.set_pynvml(fake_pynvml.install(machine))",
    "%gpu_panel --live 0.5",
]
# 8 steps of 0.5 s, each taking 1 GiB more: NVML used goes from 3.66 GiB to 11.7 GiB
LONG_CELL = "for step in range(8):\n    machine.gpus[0].used += 1 << 30\n    time.sleep(0.5)"


def start_cell(page, frontend: str, code: str) -> None:
    """Send one cell to the kernel through the front end, without waiting for it."""
    if frontend == "lab":
        page.evaluate(
            "code => { window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
            ".requestExecute({code, store_history: true}); }",
            code,
        )
    else:
        page.evaluate(
            "code => { Jupyter.notebook.kernel.execute(code, {},"
            " {silent: false, store_history: true}); }",
            code,
        )


def busy_expression(frontend: str) -> str:
    if frontend == "lab":
        return (
            "window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'busy'"
        )
    return "Jupyter.notebook.kernel_busy === true"


@pytest.mark.slow
@pytest.mark.parametrize("frontend", frontends.FRONTENDS)
def test_live_gpu_line_follows_a_running_cell(frontend, tmp_path):
    require(frontend)
    out = output_dir()
    failure = out / f"live-failure-{frontend}.png"
    with frontends.notebook_page(
        frontend, CELLS, tmp_path, "gpu_panel_live", failure, TIMEOUT_MS
    ) as page:
        run_all_cells(page, frontend)
        show_panel(page, frontend)
        body = page.locator("body")
        body.get_by_text("the GPU lines update every 0.5 s while a cell runs").wait_for()
        page.wait_for_function(
            "() => { const e = document.querySelector('.cgg-panel .cgg-header');"
            " return !!e && e.innerText.includes('driver 550'); }"
        )
        if frontend == "notebook6":  # kernel_busy follows the kernel's status messages
            page.evaluate(
                "() => { Jupyter.notebook.events.on('kernel_busy.Kernel',"
                " () => { Jupyter.notebook.kernel_busy = true; });"
                " Jupyter.notebook.events.on('kernel_idle.Kernel',"
                " () => { Jupyter.notebook.kernel_busy = false; }); }"
            )
        start_cell(page, frontend, LONG_CELL)
        # while the kernel is still busy with the cell, the page shows the live header
        # and the GPU line with memory the cell took after it started
        busy = busy_expression(frontend)
        page.wait_for_function(
            "(busy) => { const h = document.querySelector('.cgg-panel .cgg-header');"
            " const d = document.querySelector('.cgg-panel .cgg-devices');"
            " if (!h || !d || !eval(busy)) return false;"
            " return h.innerText.includes('GPU lines live, ')"
            " && /(6\\.66|7\\.66|8\\.66|9\\.66|10\\.7) GiB of 15 GiB/.test(d.innerText); }",
            arg=busy,
            timeout=15_000,
        )
        header = page.locator(".cgg-panel .cgg-header").first.inner_text()
        assert "running since" in header and "a click now is queued" in header, header
        page.screenshot(path=str(out / f"live-{frontend}.png"), full_page=True)
        # after the cell: the header without 'running since', and the final figure
        page.wait_for_function(
            "(busy) => { const h = document.querySelector('.cgg-panel .cgg-header');"
            " const d = document.querySelector('.cgg-panel .cgg-devices');"
            " return !eval(busy) && !h.innerText.includes('running since')"
            " && d.innerText.includes('11.7 GiB of 15 GiB'); }",
            arg=busy,
            timeout=30_000,
        )
        text = page.locator("body").inner_text()
        for bad in ("Error displaying widget", "Failed to load model class", "Traceback"):
            assert bad not in text, f"{bad!r} on the page"
