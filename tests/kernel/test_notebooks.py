"""Every notebook in notebooks/ runs top to bottom in a real kernel (nbclient)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.demo import REPO_NOTEBOOKS, main, run_demo

NOTEBOOKS = sorted(REPO_NOTEBOOKS.glob("*.ipynb"))


def test_there_are_notebooks():
    assert {p.name for p in NOTEBOOKS} >= {
        "quickstart.ipynb",
        "reproducibility.ipynb",
        "memory_leaks.ipynb",
    }


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(notebook: Path):
    cells = json.loads(notebook.read_text())["cells"]
    for cell in cells:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and not cell.get("execution_count"), notebook


@pytest.mark.slow
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_in_a_real_kernel(notebook: Path, tmp_path):
    pytest.importorskip("torch", reason="the notebooks train small torch models")
    result = run_demo(notebook, html_path=tmp_path / f"{notebook.stem}.html", timeout=300)
    assert result.ok, str(result)
    code_cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    assert result.cells_run == len(code_cells)
    page = result.html_path.read_text()
    # Only cells tagged "raises-exception" may fail (nbclient stops at any other error).
    expected_failures = [
        c
        for c in json.loads(notebook.read_text())["cells"]
        if "raises-exception" in c.get("metadata", {}).get("tags", [])
    ]
    assert page.count("Traceback (most recent call last)") == len(expected_failures)
    if notebook.stem == "quickstart":
        assert "CUDA advisor: GPU out of memory" in page
        # its OOM is raised at the cell's top level: no function frame, nothing released
        assert "Released the" not in page
        # its second `%seed_all 42` reruns a cell after torch was imported in between: what
        # the import allocated is not that cell's, so nothing there is a rerun leak
        assert "LEAK" not in page
        # %gpu_panel shows the panel's static copy, not the widget's repr
        assert '<div class="cgg-panel cgg-static"' in page and "GpuPanel(" not in page
    if notebook.stem == "memory_leaks":
        # the rerun of `val_losses.append(val_loss)` is flagged and its holder named; the
        # list's entries carry their autograd graphs, with the fix
        assert "LEAK: kept" in page and "held by `val_losses`" in page
        assert "autograd graph" in page and ".item()" in page
        assert "after: val_losses holds 3 plain numbers and no tensor" in page
    if notebook.stem == "reproducibility":
        assert "resumed epochs 2-3 draw exactly what the uninterrupted run drew" in page
        assert "repro diff: example_repro_a100.json (EXAMPLE, not measured" in page
        assert "cuDNN convolutions now use TF32 (allow_tf32=True)" in page


def test_demo_reports_a_missing_notebook(capsys):
    assert main(["--notebook", "/no/such.ipynb"]) == 1
    assert "no notebook at /no/such.ipynb" in capsys.readouterr().err


def test_demo_refuses_a_bad_timeout(capsys):
    assert main(["--timeout", "0"]) == 2
    assert "must be a whole number of seconds > 0, got '0'" in capsys.readouterr().err


def test_the_package_cli_has_no_demo_command(capsys):
    """The demo runs the repository's notebooks, so it lives in tools/, not the package."""
    from colab_gpu_guard.__main__ import main as package_main

    assert package_main(["demo"]) == 2


@pytest.mark.slow
def test_demo_runs_the_quickstart(tmp_path, capsys):
    pytest.importorskip("torch", reason="the quickstart uses torch")
    html = tmp_path / "quickstart.html"
    assert main(["--output", str(html)]) == 0
    assert "demo ok" in capsys.readouterr().out
    assert html.is_file() and "seed_all" in html.read_text()
