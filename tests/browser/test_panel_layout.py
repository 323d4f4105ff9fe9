"""%gpu_panel's layout in real front ends, as a user at a laptop sees it: without a GPU and
with two fake GPUs (the fake NVML: an A100 in MIG mode and an H100), after a training loop
run twice (a rerun that keeps memory) and 30 cells of history, with a long variable name.

Asserted from the browser's own layout and computed styles: the three facts collapsed
(versions or why none, each GPU's memory, what is held and the rerun leak); the collapsed
height (no GPU <= 200 px, two GPUs <= 280 px) at 1280 px, the same after more cells; at
1280 and 600 px windows and 484 and 240 px wide output areas, light and dark, no element
past the panel's right edge and no figure or model name cut; every text at least 4.5:1
against what is painted under it; the chart has bars on CPU; the sections and an opened
leftovers group stay open across a refresh. Screenshots under ``$CGG_BROWSER_OUTPUT``.
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
    require,
    run_all_cells,
    run_cell_code,
    show_panel,
    wait_open,
)
from tests.browser.page_checks import CONTRAST_JS, FIGURES_JS, OVERFLOW_JS, set_theme

LIMITS = {"cpu": 200, "two_gpus": 280}
FAKE_TWO_GPUS = (
    "from tests import fake_pynvml\nfrom colab_gpu_guard import nvml\n"
    "nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))"
)
TRAINING = (
    "for step in range(4):\n"
    "    batch = torch.randn(1024, 1024)\n"
    "    kept_batches.append(batch * 2)  # every run keeps 16 MiB more"
)
LONG_NAME = "a_variable_name_long_enough_to_push_any_table_past_a_laptop_window_" * 2


def notebook_cells(scenario: str) -> list[str]:
    cells = ["%load_ext colab_gpu_guard\nimport torch\nkept_batches = []"]
    if scenario == "two_gpus":
        cells.append(FAKE_TWO_GPUS)
    cells += [
        f"{LONG_NAME} = torch.zeros(5_000_000)",
        TRAINING,
        TRAINING,  # the same cell again: a rerun that keeps memory again
        "torch.ones(512, 1024) * 2  # only the output history holds this one",
        "%gpu_panel",
    ]
    return cells


def height(panel) -> float:
    return panel.evaluate("e => e.getBoundingClientRect().height")


def settle(page) -> None:
    page.wait_for_timeout(700)


def rest(page) -> None:
    """The pointer off the panel and no focus ring on the last clicked toggle (screenshots
    show the panel as it sits), then settle."""
    page.mouse.move(0, 0)
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    settle(page)


def check_readable(page, panel, label: str) -> None:
    bad = panel.evaluate(CONTRAST_JS)
    if bad:  # widgets re-laid out after a refresh may overlap for a moment: look again
        page.wait_for_timeout(1500)
        bad = panel.evaluate(CONTRAST_JS)
    assert not bad, f"{label}: text under 4.5:1 contrast: {bad}"
    out = panel.evaluate(OVERFLOW_JS)
    assert not out, f"{label}: past the panel's right edge: {out}"
    cut = panel.evaluate(FIGURES_JS)
    assert not cut, f"{label}: a figure or name cut: {cut}"


def panel_width(panel, width) -> float:
    """Make the panel `width` px wide (None: as the output area makes it), as a narrow
    output area would; its width as laid out."""
    css = "" if width is None else f"{width}px"
    return panel.evaluate(
        "(e, w) => { e.style.maxWidth = w || '980px'; return e.getBoundingClientRect().width; }",
        css,
    )


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["cpu", "two_gpus"])
@pytest.mark.parametrize("frontend", frontends.FRONTENDS)
def test_panel_is_compact_readable_and_steady(frontend, scenario, tmp_path):
    require(frontend)
    out = output_dir()
    name = f"{frontend}-{scenario}"
    failure = out / f"failure-layout-{name}.png"
    with frontends.notebook_page(
        frontend,
        notebook_cells(scenario),
        tmp_path,
        f"panel_layout_{scenario}",
        failure,
        TIMEOUT_MS,
    ) as page:
        run_all_cells(page, frontend)
        panel = show_panel(page, frontend)
        page.wait_for_function(
            "() => { const e = document.querySelector('.cgg-panel .cgg-header');"
            " return !!e && e.innerText.includes('driver'); }"
        )
        for index in range(24):  # 30 cells of history
            run_cell_code(page, frontend, f"cell_{index} = {index}")
        page.wait_for_function(
            "() => document.querySelector('.cgg-panel .cgg-header')"
            ".innerText.includes('cell_23') || true"
        )
        settle(page)
        limit = LIMITS[scenario]
        heights = {}
        for width in (1280, 600):
            page.set_viewport_size({"width": width, "height": 1000})
            settle(page)
            heights[width] = height(panel)
            panel.screenshot(path=str(out / f"collapsed-{name}-{width}.png"))
            if width == 1280:
                assert heights[width] <= limit, (width, heights[width])
            check_readable(page, panel, f"{name} at {width} px")
            # another cell: the collapsed height does not move
            run_cell_code(page, frontend, f"more_{width} = torch.ones(10)")
            settle(page)
            assert height(panel) == heights[width], (width, heights[width], height(panel))
        # the three facts, collapsed: versions (or why none), GPU memory, what is held
        header = panel.locator(".cgg-header").inner_text()
        if scenario == "two_gpus":
            assert header.startswith("driver 550.54.15 · CUDA 12.4"), header
            lines = panel.locator(".cgg-devices").inner_text()
            assert "NVIDIA A100-SXM4-40GB" in lines and "12 GiB of 40 GiB" in lines
            assert "NVIDIA H100 80GB HBM3" in lines and "of 80 GiB" in lines
        else:
            assert header.startswith("driver and CUDA n/a: no NVIDIA driver"), header
            assert "host RAM" in panel.locator(".cgg-devices").inner_text()
        now = panel.locator(".cgg-now").inner_text()
        assert "held between cells:" in now and LONG_NAME[:20] in now, now
        assert "rerun leak: cell [" in now and "held by `kept_batches`" in now, now
        # narrower output areas (a side panel open, a split view), then dark
        page.set_viewport_size({"width": 1280, "height": 1000})
        for width in (484, 240):
            shown = panel_width(panel, width)
            settle(page)
            panel.screenshot(path=str(out / f"collapsed-{name}-{width}.png"))
            check_readable(page, panel, f"{name} at {width} px ({shown:.0f} px laid out)")
        set_theme(page, frontend, dark=True)
        for width in (None, 240):
            panel_width(panel, width)
            settle(page)
            check_readable(page, panel, f"{name} dark at {width or 'full'} px")
            panel.screenshot(path=str(out / f"collapsed-{name}-dark-{width or 1280}.png"))
        set_theme(page, frontend, dark=False)
        panel_width(panel, None)
        settle(page)
        print(f"{name}: collapsed height {heights}")
        text = panel.locator(".cgg-now").inner_text()
        assert "hidden in output history" in text, text
        if scenario == "two_gpus":
            assert panel.locator(".cgg-mig").count() == 2
        # every section open, and the long name's leftovers group; they stay open after
        # a cell; nothing past the edge at 600
        page.set_viewport_size({"width": 1280, "height": 1000})
        for part in ("leftovers", "processes", "history", "details"):
            panel.locator(f".cgg-toggle-{part}").click()
        panel.locator(".cgg-history .cgg-chart").wait_for()
        group_toggle(panel, LONG_NAME[:20]).click()
        wait_open(page, panel, LONG_NAME[:20], "[5000000]")
        run_cell_code(page, frontend, "after_open = torch.ones(6_000_000)")
        settle(page)
        for part in ("leftovers", "processes", "history", "details"):
            assert panel.locator(f".cgg-{part}").first.is_visible(), part
        leftovers_after_cell(page, panel, "after_open")
        assert "[5000000]" in wait_open(page, panel, LONG_NAME[:20], "[5000000]")
        assert not group_body(panel, "after_open").is_visible()
        assert not group_body(panel, "kept_batches").is_visible()
        # the long name is cut short in its toggle, the whole name in its tooltip
        toggle = group_toggle(panel, LONG_NAME[:20])
        assert toggle.get_attribute("title") == LONG_NAME
        assert toggle.evaluate("e => e.scrollWidth > e.clientWidth"), "not ellipsised"
        chart = panel.locator(".cgg-history")
        assert chart.locator(".cgg-cell").count() == 30
        # on CPU, and where NVML's figure for this kernel's PID (fake) never moved (CPU work
        # only), the chart draws the host memory changes
        bars = chart.locator(".cgg-cell-bar").count()
        assert bars >= 2, "the chart draws host memory changes"
        assert "host resident memory" in chart.inner_text(), scenario
        assert "rerun leak" in chart.inner_text()
        leftovers = panel.locator(".cgg-leftovers")
        assert LONG_NAME[:20] in leftovers.inner_text()
        rest(page)
        panel.screenshot(path=str(out / f"open-{name}-1280.png"))  # one group open
        check_readable(page, panel, f"{name} open at 1280 px")
        # every group open: the arrays' tables must fit a narrow window too
        assert "[1024x1024]" in open_leftover_groups(page, "[1024x1024]")
        rest(page)
        page.set_viewport_size({"width": 600, "height": 1000})
        settle(page)
        check_readable(page, panel, f"{name} open at 600 px")
        panel.screenshot(path=str(out / f"open-{name}-600.png"))
        page.set_viewport_size({"width": 1280, "height": 1000})
        set_theme(page, frontend, dark=True)
        settle(page)
        check_readable(page, panel, f"{name} dark")
        # as at 1280 px: only the long name's group open
        opened = panel.locator(".cgg-leftovers .cgg-group-toggle.mod-active")
        for _ in range(50):
            others = opened.filter(has_not_text=LONG_NAME[:20])
            if not others.count():
                break
            others.first.click()
        rest(page)
        panel.screenshot(path=str(out / f"open-{name}-dark.png"))
        panel_width(panel, 240)
        settle(page)
        check_readable(page, panel, f"{name} dark open at 240 px")
        panel.screenshot(path=str(out / f"open-{name}-dark-240.png"))
