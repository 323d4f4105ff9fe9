"""%gpu_panel in real front ends, in headless Chromium driven by Playwright:

- ``lab``: JupyterLab 4 + ipywidgets 8;
- ``notebook6``: classic Notebook 6.5 + ipywidgets 7.7.1 + widgetsnbextension 3.6 (the
  closest to Colab's front end).

A notebook loads the extension, creates tensors (one only in the output history) and shows
``%gpu_panel``; the test checks that every section renders, clicks "Free memory" and sees the
report (the output-history tensor is freed), sets a seed and clicks "Seed", checks that the
panel refreshes after another cell (and, where its scan is slow, says how old its leftovers
are until Refresh is clicked), and saves screenshots under the output directory
(``$CGG_BROWSER_OUTPUT``, default ``test-output/browser``).

Each front end needs its own environment (see ``.ci/browser.sh``); a test whose front end,
Playwright or Chromium is missing is skipped, unless ``$CGG_BROWSER_FRONTEND`` names it:
then it fails, so CI cannot pass by skipping.
"""

from __future__ import annotations

import pytest

from tests.browser import frontends
from tests.browser.notebook_page import (
    TIMEOUT_MS,
    group_body,
    group_toggle,
    leftovers_after_cell,
    open_leftover_groups,
    output_dir,
    panel_text,
    require,
    run_all_cells,
    run_cell_code,
    show_panel,
    wait_open,
)

NOTEBOOK_CELLS = [
    "%load_ext colab_gpu_guard\nimport torch",
    "browser_weights = torch.ones(256, 1024)\n"
    "torch.ones(512, 1024) * 2  # only the output history holds this one",
    "%gpu_panel",
]


def open_sections(panel) -> None:
    """Press every section toggle (Leftovers, Processes, History, Details)."""
    for name in ("leftovers", "processes", "history", "details"):
        panel.locator(f".cgg-toggle-{name}").click()
        panel.locator(f".cgg-{name}").first.wait_for(state="visible")


@pytest.mark.slow
@pytest.mark.parametrize("frontend", frontends.FRONTENDS)
def test_panel_renders_and_its_buttons_work(frontend, tmp_path):
    require(frontend)
    out = output_dir()
    failure = out / f"failure-{frontend}.png"
    with frontends.notebook_page(
        frontend, NOTEBOOK_CELLS, tmp_path, "gpu_panel_browser", failure, TIMEOUT_MS
    ) as page:
        run_all_cells(page, frontend)
        panel = show_panel(page, frontend)
        # the live widget, not the static copy displayed beside it for static renderers
        assert page.locator(".cgg-static").count() == 0
        # every section rendered from the snapshot
        panel_text(page, "header", "driver and CUDA n/a: no NVIDIA driver")
        panel_text(page, "devices", "No GPU", "host RAM")
        panel_text(page, "now", "held between cells:", "browser_weights", "2 MiB hidden")
        buttons = panel.locator("button")
        labels = [text.strip() for text in buttons.all_inner_texts()]
        assert labels[:2] == ["Refresh", "Free memory"], labels
        open_sections(panel)
        details = panel_text(page, "details", "Colab: no")
        assert "torch 2." in details
        leftovers = panel_text(page, "leftovers", "browser_weights", "Out[")
        assert "output history" in leftovers
        assert "held by output history / tracebacks: 2 MiB" in leftovers
        # a holder opens to its arrays by a click, and stays open after the next cell,
        # which changes it and lists a new, bigger holder before it; that one is closed
        group_toggle(panel, "browser_weights").click()
        wait_open(page, panel, "browser_weights", "[256x1024]")
        assert not group_body(panel, "Out[").is_visible()
        run_cell_code(
            page,
            frontend,
            "browser_weights = torch.ones(128, 1024)\nbrowser_bigger = torch.ones(1024, 1024)",
        )
        leftovers_after_cell(page, panel, "browser_bigger")
        assert "[128x1024]" in wait_open(page, panel, "browser_weights", "[128x1024]")
        names = panel.locator(".cgg-leftovers .cgg-group-toggle").all_inner_texts()
        assert [name.split(" ", 1)[1] for name in names[1:3]] == [
            "browser_bigger",
            "browser_weights",
        ], names
        for closed in ("browser_bigger", "Out["):
            assert "mod-active" not in (group_toggle(panel, closed).get_attribute("class"))
            assert not group_body(panel, closed).is_visible(), closed
        # every holder opens to its arrays
        assert "[1024x1024]" in open_leftover_groups(page, "[1024x1024]")
        panel_text(page, "history", "What each cell kept")
        page.screenshot(path=str(out / f"page-{frontend}.png"), full_page=True)

        # Free memory: gpu_reset() releases the output-history tensor and reports it
        panel.locator("button", has_text="Free memory").click()
        message = panel.locator(".cgg-message")
        message.locator(".cgg-msg-ok", has_text="gpu_reset: dropped").wait_for()
        text = message.inner_text()
        assert "freed 2 MiB" in text, text
        panel_text(page, "details", "last action:", "gpu_reset: dropped")
        # the full report, one click away; the line of what is held stays
        panel.locator(".cgg-report-toggle").click()
        panel_text(page, "report", "gpu_reset")
        panel_text(page, "now", "held between cells:")
        # the output-history tensor is gone from the table; the user's variable stays
        leftovers = panel_text(page, "leftovers", "tracebacks: 0 B")
        assert "browser_weights" in leftovers and "Out[" not in leftovers

        # Seed with a chosen seed and deterministic mode
        seed_box = panel.locator(".cgg-seed-row input[type=number]").first
        seed_box.fill("20240607")
        seed_box.press("Tab")
        panel.locator(".cgg-seed-row input[type=checkbox]").first.check()
        page.wait_for_timeout(300)  # let the values reach the kernel
        panel.locator("button", has_text="Seed").click()
        ok = message.locator(".cgg-msg-ok", has_text="seed_all: seed 20240607: random")
        ok.wait_for()
        assert "deterministic on" in ok.inner_text()
        details = panel_text(page, "details", "last action: seed_all")
        assert details.count("last action") == 1 and "gpu_reset" not in details
        panel.screenshot(path=str(out / f"panel-{frontend}.png"))

        # a later cell refreshes the panel (post_run_cell), without any click
        run_cell_code(page, frontend, "late_tensor_for_panel = torch.zeros(128, 128)")
        leftovers_after_cell(page, panel, "late_tensor_for_panel")

        # a slow scan is not repeated after every cell: the leftovers say how old they are,
        # and Refresh finds what a later cell made (any scan made slow here, in the kernel)
        run_cell_code(
            page,
            frontend,
            "from colab_gpu_guard.ipython.panel import refresh as panel_refresh\n"
            "panel_refresh.ALWAYS_SCAN_S, panel_refresh.SCAN_SHARE = 0.0, 1e-9",
        )
        run_cell_code(page, frontend, "later_still_for_panel = torch.zeros(64, 64)")
        stale = panel.locator(".cgg-leftovers .cgg-stale", has_text="Refresh finds them now")
        stale.wait_for()
        assert "as of " in stale.inner_text()
        assert "later_still_for_panel" not in panel_text(page, "leftovers")
        panel.locator("button", has_text="Refresh").first.click()
        panel_text(page, "leftovers", "later_still_for_panel")
        assert panel.locator(".cgg-leftovers .cgg-stale").count() == 0
        body = page.locator("body").inner_text()
        for bad in ("Error displaying widget", "Failed to load model class", "Traceback"):
            assert bad not in body, f"{bad!r} on the page"
