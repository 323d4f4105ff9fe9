"""Cells run in a real kernel (nbclient), each cell's outputs back: the kernel tests' one
way to run a notebook made in the test."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")


def run_cells(sources: list[str], where: Path) -> list[list]:
    """Run `sources` as the cells of a new notebook in a `python3` kernel started in
    `where`, errors allowed; each cell's outputs, in order."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    client = nbclient.NotebookClient(
        notebook,
        timeout=120,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(where)}},
    )
    client.execute()
    return [cell.outputs for cell in notebook.cells]
