"""%%gpu_trace's inline view in real front ends (JupyterLab 4, Notebook 6.5): on this
CPU-only machine the magic's one line, then a report of a saved snapshot (a real GPU's where
tests/fixtures/cuda_snapshots/ has one, else a constructed one in torch's format) shown as a
cell's result: its timeline picture and its tables render, nothing leaves the view's right
edge at 600 px, a line's code keeps most of the view's width (a narrow view puts it under
the line's figures), and every text reads at 4.5:1 or better in the light theme and in
JupyterLab's dark theme. No script is loaded for it. Screenshots under $CGG_BROWSER_OUTPUT.
"""

from __future__ import annotations

import pytest

from tests.browser import frontends
from tests.browser.notebook_page import TIMEOUT_MS, output_dir, require, run_all_cells
from tests.browser.page_checks import CONTRAST_JS, OVERFLOW_JS, set_theme

REPORT_CELL = """\
from colab_gpu_guard.trace import SavedCell, saved_report
from tests.trace_allocator import Allocator, frames

source = ("batch = torch.empty(rows, 1024, device='cuda')\\n"
          "logits = model(batch)  # the output needs as much again, a line long enough to wrap")
cell_file = "/tmp/ipykernel_1/2718.py"
a = Allocator(record=False)
a.alloc(300 * 2**20)
a.record = True
held = [a.alloc(64 * 2**20, frames((cell_file, 1, "<module>"))) for _ in range(12)]
for address in held[:6]:
    a.free(address)
a.alloc(2**30, frames(("/tmp/a_module_of_yours_with_a_rather_long_name.py", 7, "forward"),
                      (cell_file, 2, "<module>")))
a.oom(8 * 2**30, 2**30, frames((cell_file, 2, "<module>")))
saved_report(a.snapshot(), {cell_file: SavedCell(7, source)}, cell=7)
"""


def cells() -> list[str]:
    return [
        "%load_ext colab_gpu_guard\nimport torch",
        "%%gpu_trace\nx = torch.ones(10)",
        REPORT_CELL,
    ]


# each line's place and code, against the view's width: as a table in a narrow view the
# code's column was a few letters wide (about 50 of JupyterLab's 212 px at 600 px)
PLACE_WIDTHS_JS = """view => [view.getBoundingClientRect().width,
  Array.from(view.querySelectorAll('.cgg-lines td:nth-child(3)'),
             td => td.getBoundingClientRect().width)]"""


def check(view, label: str) -> None:
    bad = view.evaluate(CONTRAST_JS)
    assert not bad, f"{label}: text under 4.5:1 contrast: {bad}"
    out = view.evaluate(OVERFLOW_JS)
    assert not out, f"{label}: past the view's right edge: {out}"
    width, places = view.evaluate(PLACE_WIDTHS_JS)
    assert places and min(places) >= min(0.6 * width, 300), (
        f"{label}: a line's code gets {min(places):.0f} of the view's {width:.0f} px"
    )


@pytest.mark.slow
@pytest.mark.parametrize("frontend", frontends.FRONTENDS)
def test_the_trace_view_renders_and_reads_at_600_px_light_and_dark(frontend, tmp_path):
    require(frontend)
    out = output_dir()
    failure = out / f"failure-trace-{frontend}.png"
    with frontends.notebook_page(
        frontend, cells(), tmp_path, "trace_view", failure, TIMEOUT_MS
    ) as page:
        run_all_cells(page, frontend)
        view = page.locator(".cgg-trace").first
        view.wait_for(state="visible", timeout=TIMEOUT_MS)
        assert page.get_by_text("the cell ran untraced").count() >= 1
        assert view.locator("svg.cgg-trace-timeline polygon").count() == 1
        text = view.inner_text()
        assert "[7] line 1" in text and "CUDA out of memory at [7] line 2" in text
        assert "a_module_of_yours_with_a_rather_long_name.py line 7" in text
        assert view.locator("script").count() == 0
        for width in (1280, 600):
            page.set_viewport_size({"width": width, "height": 1000})
            page.wait_for_timeout(500)
            check(view, f"{frontend} at {width} px")
            view.screenshot(path=str(out / f"trace-{frontend}-{width}.png"))
        if frontend == "lab":
            set_theme(page, frontend, dark=True)
            page.wait_for_timeout(700)
            check(view, f"{frontend} dark at 600 px")
            view.screenshot(path=str(out / f"trace-{frontend}-dark-600.png"))
