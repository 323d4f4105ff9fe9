"""A notebook with the panel, executed and exported to HTML by nbconvert as README and
docs/status.md say, opened offline in Chromium (every request outside the file refused):

- with `--ExecutePreprocessor.store_widget_state=False` (the command the docs give) the
  page shows the panel's static copy with the three facts - the driver and CUDA
  versions, the GPU's memory, what is held between cells by name - readable, no figure
  cut, at 1280 and 240 px;
- with the widget state stored (nbconvert's default) the page chooses the widget view,
  whose script comes from a CDN: offline the panel is blank, as the docs say.

Runs in the JupyterLab environment (nbconvert, nbclient, ipykernel, Playwright).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.browser import frontends
from tests.browser.notebook_page import output_dir, require
from tests.browser.page_checks import CONTRAST_JS, FIGURES_JS

CELLS = [
    f"import sys; sys.path.insert(0, {str(frontends.ROOT)!r})\n"
    "from colab_gpu_guard import nvml\nfrom tests import fake_pynvml\n"
    "nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))",
    "%load_ext colab_gpu_guard\nimport torch\nkeep = torch.ones(1000, 1000)",
    "%gpu_panel",
]


def export(tmp_path, stored: bool):
    """Run the documented nbconvert command (state stored or not); the HTML file."""
    stem = "stored" if stored else "unstored"
    notebook = tmp_path / f"{stem}.ipynb"
    frontends.write_notebook(notebook, CELLS)
    command = [sys.executable, "-m", "nbconvert", "--to", "html", "--execute", str(notebook)]
    if not stored:
        command.append("--ExecutePreprocessor.store_widget_state=False")
    env = frontends._isolated_env(tmp_path / "jupyter")
    done = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return tmp_path / f"{stem}.html"


def offline_page(browser, path, width: int):
    page = browser.new_page()
    page.set_viewport_size({"width": width, "height": 900})
    refused = []

    def route(request_route):
        if request_route.request.url.startswith("file://"):
            request_route.continue_()
        else:
            refused.append(request_route.request.url)
            request_route.abort()

    page.route("**/*", route)
    page.goto(path.as_uri(), wait_until="load")
    page.wait_for_timeout(500)
    return page, refused


@pytest.mark.slow
def test_exported_html_shows_the_three_facts_offline_as_documented(tmp_path):
    require("lab")
    pytest.importorskip("nbconvert")
    out = output_dir()
    unstored, stored = export(tmp_path, stored=False), export(tmp_path, stored=True)
    with frontends.chromium() as browser:
        for width in (1280, 240):
            page, _ = offline_page(browser, unstored, width)
            panel = page.locator(".cgg-panel.cgg-static").first
            panel.wait_for(state="visible")
            text = panel.inner_text()
            assert "driver 550.54.15 · CUDA 12.4" in text, text
            assert "Tesla T4" in text and "3.66 GiB of 15 GiB" in text, text
            assert "held between cells:" in text and "keep" in text, text
            assert not panel.evaluate(FIGURES_JS), width
            assert not panel.evaluate(CONTRAST_JS), width
            panel.screenshot(path=str(out / f"export-offline-{width}.png"))
            page.close()
        page, refused = offline_page(browser, stored, 1280)
        html = stored.read_text(encoding="utf-8")
        assert "application/vnd.jupyter.widget-view+json" in html  # the widget view chosen
        assert 'class="cgg-panel cgg-static"' not in html  # the static copy never reaches it
        assert any("unpkg.com" in url or "cdn" in url for url in refused), refused
        assert page.locator(".cgg-panel").count() == 0  # blank offline
        assert "held between cells" not in page.inner_text("body")
        page.screenshot(path=str(out / "export-stored-offline.png"))
        page.close()
