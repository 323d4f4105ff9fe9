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


REPRODUCIBILITY = [
    md("""
# Reproducibility in notebooks, answered correctly

Popular advice on seeding PyTorch is often wrong or out of date. Each claim below is
checked against the installed PyTorch, and every cell runs on a CPU-only machine as well
as on a GPU.
"""),
    code("""
%load_ext colab_gpu_guard
import inspect
import random

import numpy as np
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
print(torch.__version__, device)
"""),
    md("""
## What `torch.manual_seed` really seeds

Claim often repeated: "you must also call `torch.cuda.manual_seed_all`". Not so: look at
the installed `torch.manual_seed`. It seeds the CPU generator and calls
`torch.cuda.manual_seed_all` itself (and MPS/XPU where present). CUDA seeding is queued
until CUDA starts, so seeding before the first CUDA use is fine.
"""),
    code("""
source = inspect.getsource(torch.random.manual_seed)
if hasattr(torch.random, "_manual_seed_impl"):  # newer torch delegates to this helper
    source += inspect.getsource(torch.random._manual_seed_impl)
print("\\n".join(line for line in source.splitlines() if "manual_seed" in line))
assert "torch.cuda.manual_seed_all" in source
"""),
    code("%seed_all 42"),
    md("""
## Deterministic algorithms, and what they cost

`--deterministic` switches on `torch.use_deterministic_algorithms(True)`, cuDNN's
deterministic mode, turns off `cudnn.benchmark`, and sets `CUBLAS_WORKSPACE_CONFIG` only if
the installed torch still checks for it (torch builds after pytorch/pytorch#161749 do not).
On a GPU, deterministic kernels can be slower; measure on your model:
"""),
    code("""
import time

model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3), torch.nn.ReLU(), torch.nn.Conv2d(16, 16, 3))
model = model.to(device)
batch = torch.randn(8, 3, 64, 64, device=device)


def step_time(repeats=10):
    timings = []
    for _ in range(repeats):
        start = time.perf_counter()
        model(batch).sum().backward()
        if device == "cuda":
            torch.cuda.synchronize()
        timings.append(time.perf_counter() - start)
    return sorted(timings)[len(timings) // 2]


fast = step_time()
%seed_all 42 --deterministic
deterministic = step_time()
%seed_all 42
print(f"deterministic / default step time on {device}: {deterministic / fast:.2f}x")
"""),
    md("""
## DataLoader workers

Each worker process gets its own torch seed from the DataLoader, but Python `random` and
NumPy are *copied* into every worker, so workers repeat each other's augmentations unless
seeded. `seed_worker` seeds them from (torch's worker seed, rank, worker id);
`dataloader_generator()` gives the loader a generator seeded from (seed, rank).
"""),
    code("""
from torch.utils.data import DataLoader, Dataset

from colab_gpu_guard import dataloader_generator, seed_worker


class Augmented(Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.tensor([index, random.random(), float(np.random.rand())])


def epoch():
    loader = DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2,
                        worker_init_fn=seed_worker, generator=dataloader_generator(42))
    return [batch.tolist() for batch in loader]


first, second = epoch(), epoch()
assert first == second
print("two runs, two workers, same batches:", first == second)
"""),
    md("""
## Cells you rerun out of order: `--every-cell`

The RNG stream depends on everything that ran before. `--every-cell` reseeds before each
cell from (seed, the cell's source), so a cell draws the same numbers every time.
"""),
    code("%seed_all 42 --every-cell"),
    code("augment = torch.rand(3).tolist(); augment"),
    code("noise = torch.rand(100)  # an unrelated cell in between"),
    code("augment = torch.rand(3).tolist(); augment"),
    code("%seed_all --no-every-cell"),
    md("""
## Several GPUs / processes (DDP)

With `DistributedDataParallel` every rank must build **identical initial weights** (same
seed on every rank) but draw **different data** (a `DistributedSampler` per rank, with
`set_epoch` each epoch, and rank-aware worker seeds). Below, two processes on the CPU with
the gloo backend show both. The worker code lives in a module file because spawned
processes cannot import functions defined in a notebook.
"""),
    code('''
import json
import os
import socket
import sys
import tempfile

workdir = tempfile.mkdtemp()
with open(os.path.join(workdir, "ddp_demo.py"), "w") as handle:
    handle.write("""
import json, os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
from colab_gpu_guard import dataloader_generator, seed_all, seed_worker

def run(rank, world_size, port, outdir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    seed_all(1234)                       # the same seed on every rank...
    model = torch.nn.Linear(4, 2)        # ...so identical initial weights
    data = TensorDataset(torch.arange(16.0))
    sampler = DistributedSampler(data, shuffle=True, seed=1234)
    sampler.set_epoch(0)                 # call every epoch, or every epoch repeats
    loader = DataLoader(data, batch_size=4, sampler=sampler, worker_init_fn=seed_worker,
                        generator=dataloader_generator(1234))
    indices = [int(x) for (batch,) in loader for x in batch]
    augment = torch.rand(3, generator=dataloader_generator(1234)).tolist()
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as out:
        json.dump({"weights": model.weight.sum().item(), "indices": indices,
                   "augment": augment}, out)
    dist.destroy_process_group()
""")
sys.path.insert(0, workdir)
import ddp_demo  # noqa: E402
import torch.multiprocessing as mp

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
mp.spawn(ddp_demo.run, args=(2, port, workdir), nprocs=2, join=True)
ranks = [json.load(open(os.path.join(workdir, f"rank{r}.json"))) for r in range(2)]
for rank, result in enumerate(ranks):
    print("rank", rank, result)
assert ranks[0]["weights"] == ranks[1]["weights"], "initial weights differ"
assert not set(ranks[0]["indices"]) & set(ranks[1]["indices"]), "ranks share samples"
assert ranks[0]["augment"] != ranks[1]["augment"], "ranks share an augmentation stream"
print("identical initial weights, disjoint samples, per-rank augmentation streams")
'''),
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
    print(write("reproducibility.ipynb", REPRODUCIBILITY))
