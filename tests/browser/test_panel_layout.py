"""%gpu_panel's layout in real front ends, as a user at a laptop sees it: without a GPU and
with two fake GPUs (the fake NVML: an A100 in MIG mode and an H100), after a training loop
run twice (a rerun that keeps memory) and 30 cells of history, with a long variable name.

Asserted from the browser's own layout and computed styles: the collapsed height (no GPU
<= 200 px, two GPUs <= 280 px) at 1280 px and 600 px wide, the same after more cells; no
element past the panel's right edge; every text at least 4.5:1 against what is behind it
(light theme, and JupyterLab's dark theme); the chart has bars on CPU; the sections and an opened
leftovers group stay open across a refresh. Screenshots under ``$CGG_BROWSER_OUTPUT``.
"""

from __future__ import annotations

import pytest

from tests.browser import frontends
from tests.browser.notebook_page import (
    TIMEOUT_MS,
    group_body,
    group_toggle,
    open_leftover_groups,
    output_dir,
    panel_text,
    require,
    run_all_cells,
    run_cell_code,
    show_panel,
    wait_open,
)

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

CONTRAST_JS = """panel => {
  const parse = c => { const m = c.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
    const p = m[1].split(/[ ,\\/]+/).filter(Boolean).map(Number);
    return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
  const lum = rgb => { const f = v => { v /= 255;
    return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(rgb[0]) + 0.7152 * f(rgb[1]) + 0.0722 * f(rgb[2]); };
  const behind = el => { const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c && c[3] > 0) { layers.push(c); if (c[3] >= 1) break; } }
    let base = [255, 255, 255];
    if (layers.length && layers[layers.length - 1][3] >= 1) base = layers.pop().slice(0, 3);
    for (let i = layers.length - 1; i >= 0; i--) { const c = layers[i];
      base = base.map((v, k) => c[k] * c[3] + v * (1 - c[3])); }
    return base; };
  const opacity = el => { let o = 1;
    for (let e = el; e; e = e.parentElement) o *= Number(getComputedStyle(e).opacity);
    return o; };
  const bad = [], seen = new Set();
  const walker = document.createTreeWalker(panel, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const node = walker.currentNode, el = node.parentElement;
    if (!node.textContent.trim() || seen.has(el) || !el.getClientRects().length) continue;
    seen.add(el);
    const style = getComputedStyle(el), fg = parse(style.color), bg = behind(el);
    const a = fg[3] * opacity(el);
    const seen_fg = fg.slice(0, 3).map((v, k) => v * a + bg[k] * (1 - a));
    const l1 = lum(seen_fg), l2 = lum(bg);
    const ratio = (Math.max(l1, l2) + 0.05) / (Math.min(l1, l2) + 0.05);
    if (ratio < 4.5) bad.push(ratio.toFixed(2) + ' "' + node.textContent.trim().slice(0, 40)
      + '" ' + style.color + ' on rgb(' + bg.map(Math.round) + ')');
  }
  return bad; }"""

OVERFLOW_JS = """panel => {
  const right = panel.getBoundingClientRect().right + 1, out = [];
  for (const el of panel.querySelectorAll('*')) {
    const r = el.getBoundingClientRect();
    let clipped = false;  // cut by an ellipsis box that itself ends inside the panel
    for (let e = el.parentElement; e && e !== panel; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX !== 'visible' && e.getBoundingClientRect().right <= right) {
        clipped = true; break; } }
    if (r.width && r.right > right && !clipped) out.push(el.tagName + '.' + el.className + ' ' +
      Math.round(r.right - right) + ' px: ' + (el.textContent || '').trim().slice(0, 40));
  }
  if (panel.scrollWidth > panel.clientWidth + 1) out.push('panel scrolls sideways');
  return out.slice(0, 10); }"""


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
    assert not bad, f"{label}: text under 4.5:1 contrast: {bad}"
    out = panel.evaluate(OVERFLOW_JS)
    assert not out, f"{label}: past the panel's right edge: {out}"


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
            " return !!e && e.innerText.includes('after cell'); }"
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
            assert heights[width] <= limit, (width, heights[width])
            check_readable(page, panel, f"{name} at {width} px")
            # another cell: the collapsed height does not move
            run_cell_code(page, frontend, f"more_{width} = torch.ones(10)")
            settle(page)
            assert height(panel) == heights[width], (width, heights[width], height(panel))
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
        wait_open(page, panel, LONG_NAME[:20], "(5000000,)")
        run_cell_code(page, frontend, "after_open = torch.ones(6_000_000)")
        settle(page)
        for part in ("leftovers", "processes", "history", "details"):
            assert panel.locator(f".cgg-{part}").first.is_visible(), part
        panel_text(page, "leftovers", "after_open")
        assert "(5000000,)" in wait_open(page, panel, LONG_NAME[:20], "(5000000,)")
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
        assert "(1024, 1024)" in open_leftover_groups(page, "(1024, 1024)")
        rest(page)
        page.set_viewport_size({"width": 600, "height": 1000})
        settle(page)
        check_readable(page, panel, f"{name} open at 600 px")
        panel.screenshot(path=str(out / f"open-{name}-600.png"))
        if frontend == "lab":
            page.set_viewport_size({"width": 1280, "height": 1000})
            page.evaluate(
                "() => window.jupyterapp.commands.execute('apputils:change-theme',"
                " {theme: 'JupyterLab Dark'})"
            )
            page.wait_for_function(
                "() => document.body.dataset.jpThemeLight === 'false'", timeout=TIMEOUT_MS
            )
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
