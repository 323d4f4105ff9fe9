"""A notebook page in a real front end, driven by Playwright: run its cells, show the
panel and read it, open its sections and groups; where screenshots go; skipping a
front end that cannot run here (failing when $CGG_BROWSER_FRONTEND names it)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser import frontends

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


def leftovers_after_cell(page, panel, *needles: str) -> str:
    """The leftovers section's text once it lists every needle after a cell. After a cell
    the panel reuses a slow, recent scan (refresh.py: a loaded machine makes any scan slow)
    and says so with "Refresh finds them now": then this clicks Refresh, as a person would,
    and the needles must come."""
    stale = "Refresh finds them now"
    # one read of the page returns what was seen: a full scan arriving a moment later
    # replaces the stale line, and widget updates arrive one message at a time
    seen = page.wait_for_function(
        "([needles, stale]) => { const e = document.querySelector('.cgg-panel .cgg-leftovers');"
        " if (!e) return false; if (needles.every(n => e.innerText.includes(n))) return 'fresh';"
        " const s = e.querySelector('.cgg-stale');"
        " return !!s && s.innerText.includes(stale) && 'stale'; }",
        arg=[list(needles), stale],
    ).json_value()
    if seen == "stale":
        print(f"leftovers kept from a slow scan after the cell; clicking Refresh for {needles}")
        panel.locator("button", has_text="Refresh").first.click()
    return panel_text(page, "leftovers", *needles)


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
