"""%gpu_panel in real front ends, in headless Chromium driven by Playwright:

- ``lab``: JupyterLab 4 + ipywidgets 8;
- ``notebook6``: classic Notebook 6.5 + ipywidgets 7.7.1 + widgetsnbextension 3.6 (the
  closest to Colab's front end).

A notebook loads the extension, creates tensors (one only in the output history) and shows
``%gpu_panel``; the test checks that every section renders, clicks "Free memory" and sees the
report (the output-history tensor is freed), sets a seed and clicks "Seed", checks that the
panel refreshes after another cell, and saves screenshots under the output directory
(``$CGG_BROWSER_OUTPUT``, default ``test-output/browser``).

Each front end needs its own environment (see ``.ci/browser.sh``); a test whose front end,
Playwright or Chromium is missing is skipped, unless ``$CGG_BROWSER_FRONTEND`` names it:
then it fails, so CI cannot pass by skipping.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser import frontends

NOTEBOOK_CELLS = [
    "%load_ext colab_gpu_guard\nimport torch",
    "browser_weights = torch.ones(256, 1024)\n"
    "torch.ones(512, 1024) * 2  # only the output history holds this one",
    "%gpu_panel",
]
TIMEOUT_MS = 60_000


def output_dir() -> Path:
    path = Path(os.environ.get("CGG_BROWSER_OUTPUT", frontends.ROOT / "test-output" / "browser"))
    path.mkdir(parents=True, exist_ok=True)
    return path


def require(frontend: str) -> None:
    why = frontends.missing(frontend)
    if why is None:
        return
    wanted = os.environ.get("CGG_BROWSER_FRONTEND", "")
    if frontend in wanted.split(","):
        pytest.fail(f"CGG_BROWSER_FRONTEND={wanted} but {frontend} cannot run here: {why}")
    pytest.skip(f"{frontend}: {why}")


def run_all_cells(page, frontend: str) -> None:
    if frontend == "lab":
        page.wait_for_function(
            "() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
            " const k = w && w.sessionContext && w.sessionContext.session"
            " && w.sessionContext.session.kernel;"
            " return !!k && k.status === 'idle'; }",
            timeout=TIMEOUT_MS,
        )
        page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    else:
        # the widget manager must own the comm target before the kernel opens widgets
        page.wait_for_function(
            "() => window.Jupyter && Jupyter.notebook && Jupyter.notebook.kernel"
            " && Jupyter.notebook.kernel.is_connected()"
            " && !!Jupyter.notebook.kernel.comm_manager.targets['jupyter.widget']",
            timeout=TIMEOUT_MS,
        )
        # ipywidgets 7's manager first asks the kernel for existing widgets (and re-renders
        # widget outputs when that finishes); cells run in the same instant as the page
        # loads can lose their view in that race. A person never clicks that fast.
        page.wait_for_timeout(2000)
        page.evaluate("() => Jupyter.notebook.execute_all_cells()")


def show_panel(page, frontend: str):
    """Wait for the panel of the last cell; in Notebook 6, if the page-load race above
    swallowed its view, show a fresh panel once more (reported on stdout)."""
    panel = page.locator(".cgg-panel").first
    try:
        panel.wait_for(state="visible", timeout=30_000 if frontend == "notebook6" else TIMEOUT_MS)
    except Exception:
        if frontend != "notebook6":
            raise
        print("notebook6: panel view lost at page load; running %gpu_panel --new once more")
        page.evaluate(
            "() => { const c = Jupyter.notebook.get_cell(-1);"
            " c.set_text('%gpu_panel --new'); c.execute(); }"
        )
        panel.wait_for(state="visible")
    return panel


def run_cell_code(page, frontend: str, code: str) -> None:
    """Run one more cell through the front end's kernel connection, as a cell would."""
    if frontend == "lab":
        page.evaluate(
            "code => window.jupyterapp.shell.currentWidget.sessionContext.session.kernel"
            ".requestExecute({code, store_history: true}).done",
            code,
        )
    else:
        page.evaluate(
            "code => new Promise(resolve => Jupyter.notebook.kernel.execute(code,"
            " {shell: {reply: resolve}}, {silent: false, store_history: true}))",
            code,
        )


def open_sections(panel) -> None:
    """Press every section toggle (Leftovers, Processes, History, Details)."""
    for name in ("leftovers", "processes", "history", "details"):
        panel.locator(f".cgg-toggle-{name}").click()
        panel.locator(f".cgg-{name}").first.wait_for(state="visible")


def panel_text(page, part: str, *needles: str) -> str:
    """The text of a panel section, once it contains every needle (widget updates arrive
    one message at a time)."""
    if needles:
        page.wait_for_function(
            "([part, needles]) => { const e = document.querySelector('.cgg-panel .cgg-' + part);"
            " return !!e && needles.every(n => e.innerText.includes(n)); }",
            arg=[part, list(needles)],
        )
    return page.locator(f".cgg-panel .cgg-{part}").first.inner_text()


def group_toggle(panel, name: str):
    """The toggle of the leftovers group `name` (its label is the triangle and the name)."""
    return panel.locator(".cgg-leftovers .cgg-group-toggle", has_text=name).first


def group_body(panel, name: str):
    """The arrays under the leftovers group `name` (shown while it is open)."""
    toggle = panel.page.locator(".cgg-group-toggle", has_text=name)  # inside the row
    row = panel.locator(".cgg-leftovers .cgg-group-row").filter(has=toggle)
    return row.locator(".cgg-group-body").first


def wait_open(page, panel, name: str, *needles: str) -> str:
    """Wait until the group `name` is open (its toggle pressed, its arrays shown with every
    needle in them) and return their text."""
    page.wait_for_function(  # found again on each poll: a refresh may re-render the rows
        "name => [...document.querySelectorAll('.cgg-panel .cgg-leftovers .cgg-group-toggle')]"
        ".some(b => b.textContent.includes(name) && b.classList.contains('mod-active'))",
        arg=name,
    )
    body = group_body(panel, name)
    body.wait_for(state="visible")
    for needle in needles:
        body.get_by_text(needle).first.wait_for()
    return body.inner_text()


def open_leftover_groups(page, needle: str) -> str:
    """The leftovers section's text with every holder's group opened by a click on its
    toggle (the kernel keeps it open), once it shows `needle`."""
    closed = page.locator(".cgg-panel .cgg-leftovers .cgg-group-toggle:not(.mod-active)")
    for _ in range(50):  # a pressed toggle is mod-active at once, leaving this list
        if not closed.count():
            break
        closed.first.click()
    page.wait_for_function(
        "(needle) => { const e = document.querySelector('.cgg-panel .cgg-leftovers');"
        " return !!e && e.innerText.includes(needle); }",
        arg=needle,
    )
    return page.locator(".cgg-panel .cgg-leftovers").first.inner_text()


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
        panel_text(page, "header", "after cell [")
        panel_text(page, "devices", "No GPU:", "host RAM")
        panel_text(page, "now", "2 MiB hidden in output history")
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
        wait_open(page, panel, "browser_weights", "(256, 1024)")
        assert not group_body(panel, "Out[").is_visible()
        run_cell_code(
            page,
            frontend,
            "browser_weights = torch.ones(128, 1024)\nbrowser_bigger = torch.ones(1024, 1024)",
        )
        panel_text(page, "leftovers", "browser_bigger")
        assert "(128, 1024)" in wait_open(page, panel, "browser_weights", "(128, 1024)")
        names = panel.locator(".cgg-leftovers .cgg-group-toggle").all_inner_texts()
        assert [name.split(" ", 1)[1] for name in names[1:3]] == [
            "browser_bigger",
            "browser_weights",
        ], names
        for closed in ("browser_bigger", "Out["):
            assert "mod-active" not in (group_toggle(panel, closed).get_attribute("class"))
            assert not group_body(panel, closed).is_visible(), closed
        # every holder opens to its arrays
        assert "(1024, 1024)" in open_leftover_groups(page, "(1024, 1024)")
        panel_text(page, "history", "What each cell kept")
        page.screenshot(path=str(out / f"page-{frontend}.png"), full_page=True)

        # Free memory: gpu_reset() releases the output-history tensor and reports it
        panel.locator("button", has_text="Free memory").click()
        message = panel.locator(".cgg-message")
        message.locator(".cgg-msg-ok", has_text="gpu_reset: dropped").wait_for()
        text = message.inner_text()
        assert "freed 2 MiB" in text, text
        panel_text(page, "details", "last action", "gpu_reset")
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
        panel.screenshot(path=str(out / f"panel-{frontend}.png"))

        # a later cell refreshes the panel (post_run_cell), without any click
        run_cell_code(page, frontend, "late_tensor_for_panel = torch.zeros(128, 128)")
        panel_text(page, "leftovers", "late_tensor_for_panel")
        body = page.locator("body").inner_text()
        for bad in ("Error displaying widget", "Failed to load model class", "Traceback"):
            assert bad not in body, f"{bad!r} on the page"
