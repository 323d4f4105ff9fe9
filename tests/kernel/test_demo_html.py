"""`make demo`'s HTML (tools/demo.py) and nbconvert's show the panel where a notebook shows
`%gpu_panel`: its static copy (the `text/html` the panel displays beside its widget), never
a widget repr. Notebooks run in a real kernel (nbclient), with ipywidgets 8 (.venv) and
7.7.1 (.venvs/colab); NVML is the fake one (tests/fake_pynvml.py) inside the kernel."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fake_pynvml import GiB, MiB
from tools.demo import notebook_html, run_demo

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")
pytest.importorskip("ipywidgets")

ROOT = Path(__file__).resolve().parents[2]
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
ONE_GPU = (
    f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
    "from colab_gpu_guard import nvml\n"
    "from tests import fake_pynvml\n"
    "nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))"
)


def write_notebook(path: Path, cells: list[str]) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in cells]
    nbformat.write(nb, str(path))
    return path


def panel_outputs(nb) -> list[dict]:
    return [
        output
        for cell in nb.cells
        for output in cell.get("outputs", [])
        if WIDGET_VIEW in output.get("data", {})
    ]


def executed(tmp_path: Path, cells: list[str], store_widget_state: bool = True):
    from nbclient import NotebookClient

    nb = nbformat.read(str(write_notebook(tmp_path / "panel.ipynb", cells)), as_version=4)
    NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        store_widget_state=store_widget_state,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()
    return nb


@pytest.mark.slow
def test_the_panel_displays_its_widget_its_text_and_a_static_copy(tmp_path):
    """What a front end receives: the widget view, the whole compact status as text (not
    ipywidgets' repr cut at 110 characters) and the static copy; the same for `%gpu_panel`,
    `display(panel())` and the panel as a cell's value."""
    nb = executed(
        tmp_path,
        [
            ONE_GPU,
            "%load_ext colab_gpu_guard",
            "%gpu_panel",
            "import colab_gpu_guard\ncolab_gpu_guard.panel()",
            "from IPython.display import display\ndisplay(colab_gpu_guard.panel())",
        ],
    )
    outputs = panel_outputs(nb)
    assert len(outputs) == 3, [cell.get("outputs") for cell in nb.cells]
    model_ids = {output["data"][WIDGET_VIEW]["model_id"] for output in outputs}
    assert len(model_ids) == 1  # one live panel per kernel, shown three times
    for output in outputs:
        data = output["data"]
        assert data[WIDGET_VIEW]["version_major"] == 2
        text = data["text/plain"]
        # the three facts: versions first, the GPU's memory, what is held between cells
        assert text.startswith("GPU guard · driver 550.54.15 · CUDA 12.4 · after cell [")
        assert "\nheld between cells: " in text
        assert "Tesla T4" in text and "this kernel 1.25 GiB" in text and "…" not in text
        assert "GpuPanel(" not in text and "children=" not in text
        html = data["text/html"]
        assert html.startswith('<div class="cgg-panel cgg-static"')
        assert "Tesla T4" in html and "this kernel <b>1.25 GiB</b>" in html
        assert "<b>GPU guard</b> · a static copy of the panel as displayed" in html
    # the widget state nbclient saved is the live panel's, untouched
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert model_ids <= set(state)


@pytest.mark.slow
def test_demo_html_shows_the_panel_not_a_widget_repr(tmp_path):
    notebook = write_notebook(
        tmp_path / "demo_panel.ipynb",
        [ONE_GPU, "%load_ext colab_gpu_guard", "%gpu_panel"],
    )
    result = run_demo(notebook, html_path=tmp_path / "demo_panel.html", timeout=120)
    assert result.ok, str(result)
    page = result.html_path.read_text(encoding="utf-8")
    assert "GpuPanel(children=" not in page and "HTML(value=" not in page
    panel = page.split("%gpu_panel</pre>", 1)[1].split("</div>\n", 1)[0]
    assert '<div class="cgg-panel cgg-static"' in panel
    assert 'class="cgg-versions">driver 550.54.15 · CUDA 12.4</b>' in panel  # the header
    assert 'class="cgg-fresh" style="opacity:.8">after cell [' in panel
    assert 'class="cgg-held"' in panel
    # the GPU line, the bar and this kernel's share, as NVML reports them
    assert "<b>0</b> Tesla T4</span>" in panel
    assert 'cgg-seg-kernel" title="this kernel (as NVML counts it): 1.25 GiB' in panel
    assert (
        "this kernel <b>1.25 GiB</b>" in panel and "others <b>2.41 GiB</b>" in panel
    )  # used - this kernel
    assert 'class="cgg-now-html"' in panel


@pytest.mark.slow
def test_demo_html_on_a_machine_without_a_gpu(tmp_path):
    notebook = write_notebook(
        tmp_path / "no_gpu.ipynb",
        [
            f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from colab_gpu_guard import nvml\nfrom tests import fake_pynvml\n"
            "nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))",
            "%load_ext colab_gpu_guard",
            "%gpu_panel",
        ],
    )
    result = run_demo(notebook, html_path=tmp_path / "no_gpu.html", timeout=120)
    assert result.ok, str(result)
    page = result.html_path.read_text(encoding="utf-8")
    assert "GpuPanel(children=" not in page
    assert '<div class="cgg-no-gpu"' in page
    assert "driver and CUDA n/a: no NVIDIA driver on this machine" in page


def test_demo_prefers_the_static_copy_and_escapes_plain_text():
    """The demo's page shows an output's text/html before its text/plain; an output with
    only a widget view and text (another library's widget) shows the text, escaped."""
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("%gpu_panel", execution_count=3)
    cell.outputs = [
        nbformat.v4.new_output(
            "display_data",
            data={
                WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": "a"},
                "text/plain": "GPU guard · after cell [2]",
                "text/html": '<div class="cgg-panel cgg-static">copy</div>',
            },
        ),
        nbformat.v4.new_output(
            "display_data",
            data={
                WIDGET_VIEW: {"version_major": 2, "version_minor": 0, "model_id": "b"},
                "text/plain": "IntSlider(value=<3>)",
            },
        ),
    ]
    nb.cells = [cell]
    page = notebook_html(nb, title="t")
    assert "<div class='out'><div class=\"cgg-panel cgg-static\">copy</div></div>" in page
    assert "IntSlider(value=&lt;3&gt;)" in page and "GPU guard · after cell [2]" not in page


@pytest.mark.slow
def test_nbconvert_html_without_widget_state_shows_the_static_copy(tmp_path):
    """A notebook saved without widget state (Colab, JupyterLab's default) converts to HTML
    with the panel's static copy; with the state saved, nbconvert renders the widget itself
    (its HTML manager comes from a CDN), so the copy is for the former."""
    nbconvert = pytest.importorskip("nbconvert")
    nb = executed(tmp_path, [ONE_GPU, "%load_ext colab_gpu_guard", "%gpu_panel"], False)
    assert "widgets" not in nb.metadata
    body, _ = nbconvert.HTMLExporter().from_notebook_node(nb)
    assert '<div class="cgg-panel cgg-static"' in body
    assert "this kernel <b>1.25 GiB</b>" in body
    assert "GpuPanel(" not in body
    assert json.dumps(WIDGET_VIEW)[1:-1] not in body  # no widget script without state


def test_static_copy_sizes_come_from_the_snapshot():
    """The copy is drawn from the panel's snapshot: its device line is `render_device`'s."""
    from colab_gpu_guard import nvml
    from colab_gpu_guard.status import gpu_status, panel_html
    from colab_gpu_guard.status.panel_static import render_static_panel
    from tests import fake_pynvml

    world = fake_pynvml.one_gpu()
    world.gpus[0].processes[1].used = 3 * GiB + 512 * MiB
    nvml.set_pynvml(fake_pynvml.install(world))
    try:
        status = gpu_status(leftovers=False)
    finally:
        nvml.set_pynvml(None)
    html = render_static_panel(status, 7)
    assert panel_html.render_device(status, status.nvml.devices[0]) in html
    assert panel_html.render_header(status, 7) in html
    assert panel_html.render_now(status) in html
    assert "this kernel <b>3.5 GiB</b>" in html
    message = panel_html.render_message("ok", "gpu_reset: dropped 1 output")
    shown = render_static_panel(status, 7, message)
    assert message in shown and panel_html.render_now(status) in shown  # the facts stay
    assert "no snapshot yet" in render_static_panel(None)


def test_demo_renders_markdown_cells_escaped():
    """Markdown cells show as HTML (headings, lists, code, emphasis, links), never raw in a
    <pre>; every piece of text is escaped, and a link to a script is not followed."""
    from tools.demo import markdown_html

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell(
            "## Memory `Out[N]` & <b>\n\nText with **bold**, *one* word and a\n"
            "[notebook](memory_leaks.ipynb).\n\n- `%gpu_status`\n  continued\n- two\n\n"
            "1. first\n2. second\n\n```\nx = 1 < 2\n```\n\n[bad](javascript:alert)"
        )
    ]
    page = notebook_html(nb, title="t")
    assert "<div class='md'><pre>" not in page and "##" not in page and "`" not in page
    assert "<h2>Memory <code>Out[N]</code> &amp; &lt;b&gt;</h2>" in page
    assert "<p>Text with <b>bold</b>, <i>one</i> word and a " in page
    assert '<a href="memory_leaks.ipynb">notebook</a>.</p>' in page
    assert "<ul><li><code>%gpu_status</code> continued</li><li>two</li>" in page
    assert "<ol><li>first</li><li>second</li>" in page
    assert "<pre>x = 1 &lt; 2</pre>" in page
    assert 'href="#"' in page and "javascript" not in page.split("<a href")[-1].split(">")[0]
    assert markdown_html("2 * 3 * 4 and a*b") == "<p>2 * 3 * 4 and a*b</p>"


def test_demo_page_shows_every_figure_of_the_static_panel():
    """The static panel cuts a line wider than its box with an ellipsis (the live widget's
    tooltips show the rest); the demo's page, with no tooltips, lets those lines wrap."""
    page = notebook_html(nbformat.v4.new_notebook(), title="t")
    assert (
        ".cgg-static [style*=ellipsis]{white-space:normal!important;overflow:visible!important}"
        in page
    )
