"""Write the demo notebooks from the cell lists below (no outputs are ever committed).

Run `python tools/make_notebooks.py` after editing; CI checks the committed notebooks
carry no outputs.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def md(text: str):
    return new_markdown_cell(text.strip())


def code(text: str):
    return new_code_cell(text.strip())


QUICKSTART = [
    md("""
# colab_gpu_guard quickstart

Load the extension first. It is cheap: it imports neither torch nor NumPy nor ipywidgets.
"""),
    code("%load_ext colab_gpu_guard"),
    md("""
## Reproducible runs: `%seed_all`

`%seed_all 42` seeds Python `random`, NumPy's global RNG and PyTorch. `torch.manual_seed`
already seeds **every CUDA device** (and does so lazily, so seeding before CUDA starts is
fine): the report says exactly that, and lists what it could not seed.
"""),
    code("%seed_all 42"),
    code("""
import random

import numpy as np
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
first = (random.random(), float(np.random.rand()), torch.rand(3, device=device).tolist())
first
"""),
    code("""
%seed_all 42
again = (random.random(), float(np.random.rand()), torch.rand(3, device=device).tolist())
assert again == first, (again, first)
print("same seed, same draws:", again == first)
"""),
    md("""
`--deterministic` also switches on deterministic algorithms (and says whether this torch
still needs `CUBLAS_WORKSPACE_CONFIG`). Seeding again without it restores the flags.
"""),
    code("%seed_all 42 --deterministic"),
    code("%seed_all 42"),
    md("""
### Cells that draw the same numbers whatever ran before

Notebook cells get rerun out of order. With `--every-cell`, each cell is reseeded from
(seed, its source) before it runs.
"""),
    code("%seed_all 7 --every-cell"),
    code("draw = torch.rand(2).tolist(); draw"),
    code("_ = [random.random() for _ in range(10)]  # anything in between"),
    code("draw = torch.rand(2).tolist(); draw"),
    code("%seed_all --no-every-cell"),
]


def write(name: str, cells) -> Path:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    path = NOTEBOOKS / name
    path.parent.mkdir(exist_ok=True)
    nbformat.write(nb, str(path))
    return path


if __name__ == "__main__":
    print(write("quickstart.ipynb", QUICKSTART))
