"""Every notebook in notebooks/ runs top to bottom in a real kernel (nbclient)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from colab_gpu_guard.units import jargon_in
from tools.demo import DEFAULT_NOTEBOOK, REPO_NOTEBOOKS, main
from tools.make_notebooks import INSTALL_CELL

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
def test_notebook_runs_in_a_real_kernel(notebook: Path, tmp_path, capsys):
    """Each notebook through the demo's command line (`make demo`: the quickstart, named by
    no --notebook), its summary line and HTML copy."""
    pytest.importorskip("torch", reason="the notebooks train small torch models")
    html = tmp_path / f"{notebook.stem}.html"
    chosen = [] if notebook == DEFAULT_NOTEBOOK else ["--notebook", str(notebook)]
    status = main([*chosen, "--output", str(html), "--timeout", "300"])
    said = capsys.readouterr().out
    assert status == 0, said
    code_cells = [c for c in json.loads(notebook.read_text())["cells"] if c["cell_type"] == "code"]
    assert f"demo ok: ran {len(code_cells)} cells of {notebook.resolve()} in " in said, said
    assert f"HTML copy: {html}" in said
    page = html.read_text()
    # Only cells tagged "raises-exception" may fail (nbclient stops at any other error).
    expected_failures = [
        c
        for c in json.loads(notebook.read_text())["cells"]
        if "raises-exception" in c.get("metadata", {}).get("tags", [])
    ]
    assert page.count("Traceback (most recent call last)") == len(expected_failures)
    # the install cell found the package installed here (the kernel runs in this venv)
    assert "colab_gpu_guard 0.1.0 is installed" in page or "is importable" in page
    if notebook.stem == "quickstart":
        assert "CUDA advisor: GPU out of memory" in page
        # its OOM is raised at the cell's top level: no function frame, nothing released
        assert "Released the" not in page
        # its second `%seed_all 42` reruns a cell after torch was imported in between: what
        # the import allocated is not that cell's, so nothing there is a rerun leak
        assert "LEAK" not in page
        # %gpu_status runs after a tensor exists, and lists it by name
        assert "weights" in output_after(page, "%gpu_status")
        # %gpu_panel shows the panel's static copy, not the widget's repr
        assert '<div class="cgg-panel cgg-static"' in page and "GpuPanel(" not in page
    if notebook.stem == "memory_leaks":
        # the rerun of `val_losses.append(val_loss)` is flagged and its holder named; the
        # list's entries carry their autograd graphs, with the fix
        history = output_after(page, "%gpu_history")
        assert "LEAK" in history and "`val_losses`" in history and "`Out[" in history
        status = output_after(page, "%gpu_status")
        assert "autograd graph" in status and ".item()" in status
        # the list of what is held is printed once (by %gpu_status), not once per command
        assert page.count("val_losses[0]") == status.count("val_losses[0]") > 0
        # the fixed cell, rerun three times: nothing flagged, and the panel shows it
        clean = output_after(page, "%gpu_history --limit 3")
        assert "rerun of" in clean and "LEAK" not in clean
        assert '<div class="cgg-panel cgg-static"' in output_after(page, "%gpu_panel")
    if notebook.stem == "reproducibility":
        assert "two runs with two workers each, spawned or not, same batches: True" in page
        assert "the ranks share no draw: True" in page
        assert "identical initial weights, disjoint samples, and no augmentation draw" in page
        assert "resumed epochs 2-3 draw exactly what the uninterrupted run drew" in page
        assert "example, not measured: this run on an A100" in page
        assert "cuDNN convolutions now use TF32 (allow_tf32=True)" in page


def output_after(page: str, source: str) -> str:
    """The HTML of what the code cell whose whole source is `source` printed."""
    after = page.split(f"]: {source}</pre>", 1)[1]
    return after.split("<pre>In [", 1)[0]


def code_sources(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_opens_with_the_install_cell(notebook: Path):
    assert code_sources(notebook)[0] == INSTALL_CELL.strip()


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_prose_has_no_jargon(notebook: Path):
    cells = json.loads(notebook.read_text())["cells"]
    prose = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert not jargon_in(prose)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_links_to_no_guessed_address(notebook: Path):
    """The repository states no public address: no badge, download or link built on one."""
    text = notebook.read_text()
    for guessed in ("colab-gpu-guard/", "colab.research.google.com", "mybinder.org", "github"):
        assert guessed not in text, guessed


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_defines_no_dataset_in_a_cell(notebook: Path):
    """A Dataset class defined in a cell fails in spawn/forkserver DataLoader workers
    (macOS, Windows, Python 3.14 on Linux): datasets live in a module file a cell writes."""
    from IPython.core.inputtransformer2 import TransformerManager

    for source in code_sources(notebook):
        tree = ast.parse(TransformerManager().transform_cell(source))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(base) for base in node.bases]
                assert not any(base.endswith("Dataset") for base in bases), node.name


def test_quickstart_lets_ipython_keep_underscore():
    """Assigning `_` in a cell stops IPython updating it, which made the quickstart's claim
    that a result "lives on in Out and _" false; and the advisor needs no switching on."""
    sources = code_sources(REPO_NOTEBOOKS / "quickstart.ipynb")
    assert not any(re.search(r"^_\s*=", source, re.M) for source in sources)
    assert not any("%gpu_advice on" in source for source in sources)
    first_tensor = next(i for i, s in enumerate(sources) if "weights = torch" in s)
    for magic in ("%gpu_status", "%gpu_panel", "%gpu_reset"):
        assert sources.index(magic) > first_tensor, magic


def test_memory_leaks_shows_each_fix():
    sources = code_sources(REPO_NOTEBOOKS / "memory_leaks.ipynb")
    assert any("del val_loss" in source for source in sources)
    fixed = [s for s in sources if "val_losses.append(val_loss.item())" in s]
    assert len(fixed) == 3 and all(
        s.splitlines()[-1].split("#")[0].rstrip().endswith(";") for s in fixed
    )


@pytest.mark.parametrize(
    "files, clone, expected, pip",
    [
        (["colab_gpu_guard-0.1.0-py3-none-any.whl"], True, "installed colab_gpu_guard from", True),
        ([], True, "installed colab_gpu_guard from", True),
        ([], False, "colab_gpu_guard is not installed: run `make wheel`", False),
    ],
    ids=["uploaded wheel", "clone", "neither"],
)
def test_install_cell(tmp_path, monkeypatch, capsys, files, clone, expected, pip):
    """The install cell in a runtime without the package: it installs an uploaded wheel
    first, else from the clone, else says in one line what to do; never a traceback."""
    import importlib.util
    import subprocess

    work = tmp_path / "notebooks"
    work.mkdir()
    for name in files:
        (work / name).write_bytes(b"")
    if clone:
        (tmp_path / "colab_gpu_guard").mkdir()
        (tmp_path / "colab_gpu_guard" / "__init__.py").write_text("")
    calls = []
    monkeypatch.chdir(work)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(subprocess, "run", lambda command, **_: calls.append(command) or _Done(0))
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    exec(INSTALL_CELL, {})
    out = capsys.readouterr().out
    assert out.startswith(expected) and out.count("\n") == 1, out
    assert bool(calls) == pip
    if files:
        assert calls[0][-1] == files[0]
    elif clone:
        assert calls[0][-2:] == ["-e", str(tmp_path)]


def test_install_cell_says_why_pip_failed(tmp_path, monkeypatch, capsys):
    import importlib.util
    import subprocess

    monkeypatch.chdir(tmp_path)
    (tmp_path / "colab_gpu_guard-0.1.0-py3-none-any.whl").write_bytes(b"")
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    monkeypatch.setattr(
        subprocess, "run", lambda command, **_: _Done(1, "ERROR: not a valid wheel\n")
    )
    exec(INSTALL_CELL, {})
    out = capsys.readouterr().out
    assert out == (
        "pip could not install colab_gpu_guard from colab_gpu_guard-0.1.0-py3-none-any.whl: "
        "ERROR: not a valid wheel\n"
    )


class _Done:
    def __init__(self, returncode: int, stderr: str = "") -> None:
        self.returncode, self.stderr = returncode, stderr


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
