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


def code(text: str, tags=()):
    cell = new_code_cell(text.strip())
    if tags:  # "raises-exception": the cell fails on purpose; nbclient goes on
        cell.metadata["tags"] = list(tags)
    return cell


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
fine). The line it prints says what it seeded (on a GPU, `torch (cpu, cuda (N))`) and
what it could not; `%seed_all 42 -v` says how each was seeded, the queued CUDA seeding
included.
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
`--deterministic` also switches on deterministic algorithms, and sets
`CUBLAS_WORKSPACE_CONFIG` where this torch still needs it (`-v` prints the whole report,
which says whether it does). Seeding again without it restores the flags.
It leaves TF32 alone: on an A100, L4 or H100, cuDNN convolutions and RNNs use TF32 by
default (`torch.backends.cudnn.allow_tf32` is `True`), so float32 results differ from a
T4's or a CPU's, and the line it prints says so. `%seed_all 42 --strict` also switches
matmuls, convolutions and RNNs to full fp32.
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
    md("""
### What decides the numbers: `%repro`

`%repro` sums up what decides this kernel's numbers: the seed, torch's deterministic and
TF32 settings, the versions and the GPUs (`-v`: every field, the environment variables
libraries read included). `%repro --save FILE` and `%repro --diff FILE` compare two runs.
"""),
    code("%repro"),
    md("""
## See the GPU: `%gpu_status` and the panel

Driver and CUDA versions, each GPU's memory as NVML sees it beside what this kernel's
allocator holds, other processes on the GPU, and tensors left over, by name. Without a GPU
it says why, and still shows host memory and CPU tensors.
"""),
    code("%gpu_status"),
    code("%gpu_panel"),
    md("""
## Memory between runs: `%gpu_history` and `%gpu_reset`

Each cell's memory effect is recorded. `%gpu_reset` releases what the notebook keeps
without you knowing (output history, the last traceback's frames, allocator caches) and
says what was freed and what is still held, by name.
"""),
    code("""
weights = torch.randn(1024, 1024, device=device)
weights * 2  # this result now lives on in Out and _
"""),
    code("%gpu_history"),
    code("%gpu_reset --dry-run"),
    code("%gpu_reset"),
    md("""
## CUDA errors explained: `%gpu_advice`

When a cell dies with a CUDA error, the usual traceback is followed by the real cause and
the fix. Here, a simulated out-of-memory error of the kind a too-large batch raises (for an
OOM, the frames of the functions the failed cell called are released automatically, so their
local tensors do not stay alive):
"""),
    code("%gpu_advice on"),
    code(
        """
raise torch.OutOfMemoryError(
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
    "14.75 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has "
    "13.69 GiB memory in use. Of the allocated memory 13.50 GiB is allocated by PyTorch, "
    "and 12.00 MiB is reserved by PyTorch but unallocated."
)
""",
        tags=["raises-exception"],
    ),
]


REPRODUCIBILITY = [
    md("""
# Reproducibility in notebooks, answered correctly

Popular advice on seeding PyTorch is often wrong or out of date. Each claim below is
checked against the installed PyTorch. Every cell runs on a CPU-only machine, and uses the
GPU where there is one.
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
## DataLoader workers, and ranks

Claim often repeated: "DataLoader workers copy Python `random` and NumPy state, so they
repeat each other's augmentations". Not since torch 1.9: each worker seeds `random`, NumPy
and torch from the loader's base seed and its worker id
(`torch/utils/data/_utils/worker.py`). What *is* true: the base seed comes from the
loader's generator or torch's global RNG, which a DDP script usually seeds alike on every
rank, so without rank-aware seeding **every rank draws the same augmentations**.
`seed_worker` reseeds `random` and NumPy from (torch's worker seed, rank, worker id);
`dataloader_generator()` gives the loader a generator seeded from (seed, rank), for
torch's draws and the shuffle order. The cell below checks both with a real DataLoader and
2 workers, simulating rank 0 and rank 1 of a DDP job with the `RANK` environment variable.
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
    code("""
import os

source = inspect.getsource(torch.utils.data._utils.worker._worker_loop)
assert "random.seed(seed)" in source and "np.random.seed(np_seed)" in source


def draws_as_rank(rank, worker_init_fn=None):
    \"\"\"One epoch's (random, NumPy) draws as rank `rank` of a DDP job makes them.\"\"\"
    os.environ["RANK"] = str(rank)
    torch.manual_seed(42)  # every rank seeds alike, as DDP scripts usually do
    loader = DataLoader(Augmented(), batch_size=4, num_workers=2, worker_init_fn=worker_init_fn)
    return [tuple(row[1:]) for batch in loader for row in batch.tolist()]


plain0, plain1 = draws_as_rank(0), draws_as_rank(1)
ours0, ours1 = draws_as_rank(0, seed_worker), draws_as_rank(1, seed_worker)

# Batch n comes from worker n % 2: without any help, the two workers draw differently...
assert not set(plain0[:4]) & set(plain0[4:8]), "workers repeat each other"
print("workers differ without seed_worker:", plain0[0], "vs", plain0[4])
# ...but rank 1 draws exactly what rank 0 draws,
assert plain0 == plain1
print("rank 0 and rank 1 without rank-aware seeding draw the same:", plain0 == plain1)
# and seed_worker gives each rank its own draws, reproducibly.
assert not set(ours0) & set(ours1) and draws_as_rank(0, seed_worker) == ours0
os.environ.pop("RANK", None)
print("with seed_worker the ranks share no draw:", not set(ours0) & set(ours1))
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

With `DistributedDataParallel` every rank trains from **identical initial weights** (DDP
copies rank 0's parameters and buffers to the other ranks when it wraps the model; the
same seed on every rank makes them equal before that too) but must draw **different data**
(a `DistributedSampler` per rank, with `set_epoch` each epoch, and rank-aware worker
seeds). Below, two processes on the CPU with the gloo backend show both. The worker code
lives in a module file because spawned processes cannot import functions defined in a
notebook.
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
] + [
    md("""
## Save and restore every RNG stream exactly

Resuming a run from a checkpoint reproduces it only if every random stream resumes too:
Python `random`, NumPy's global RNG, torch's CPU (and each CUDA device's) generator, and
the DataLoader's own `generator=` (its shuffle order and its workers' seeds come from it).
`rng_state()` captures them all in one picklable object; `restore_rng_state()` puts them
back. Below, epoch 1 runs, the state goes to a file, epochs 2 and 3 run; then a "new
session" with other seeds loads the file and runs epochs 2 and 3 again.
"""),
    code("""
import pickle
import tempfile
from pathlib import Path

from torch.utils.data import DataLoader, Dataset

from colab_gpu_guard import isolated_rng, restore_rng_state, rng_state, seed_all

%seed_all --no-every-cell


class Augmented(Dataset):  # each item draws in its worker: torch, random and NumPy
    def __len__(self):
        return 8

    def __getitem__(self, index):
        draws = [torch.rand(()).item(), random.random(), float(np.random.rand())]
        return torch.tensor([float(index), *draws])


def epoch(loader):
    rows = [row.tolist() for batch in loader for row in batch]
    return rows + [torch.randn(2).tolist()]  # and the training loop's own draws


scratch = Path(tempfile.mkdtemp())  # the checkpoint and the saved record go here
seed_all(7)
loader_generator = torch.Generator().manual_seed(7)
loader = DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2,
                    generator=loader_generator)
epoch(loader)  # epoch 1
with open(scratch / "rng_checkpoint.pkl", "wb") as file:
    pickle.dump(rng_state(generators={"loader": loader_generator}), file)
uninterrupted = [epoch(loader) for _ in range(2)]  # epochs 2 and 3
"""),
    code("""
seed_all(999)  # a new session: another seed, other draws, a fresh generator
torch.rand(100)
loader_generator = torch.Generator()
with open(scratch / "rng_checkpoint.pkl", "rb") as file:
    state = pickle.load(file)
print(state)
restore_rng_state(state, generators={"loader": loader_generator})
loader = DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2,
                    generator=loader_generator)
resumed = [epoch(loader) for _ in range(2)]
assert resumed == uninterrupted
print("resumed epochs 2-3 draw exactly what the uninterrupted run drew")
"""),
    md("""
A plotting or validation cell that draws random numbers shifts every training draw after
it. `with isolated_rng():` runs the block and then puts every stream back:
"""),
    code("""
seed_all(3)
expected = torch.randn(3)

seed_all(3)
with isolated_rng():
    sample = torch.rand(1000)  # e.g. points for a plot
    print(f"plotted {len(sample)} random points, mean {sample.mean():.3f}")
assert torch.equal(torch.randn(3), expected)
print("the next training draws are unchanged:", expected.tolist())
"""),
    md("""
## Why do two runs differ? The reproducibility record

`%repro` shows what decides this kernel's numbers (`-v` for every field); `%repro --save
FILE` writes it as JSON, and `%repro --diff FILE` explains what differs from a saved run,
most important first. `python -m colab_gpu_guard repro --diff FILE` does the same from a
terminal or a DDP worker.
"""),
    code("""
%repro
%repro --save {scratch}/this_machine.json
"""),
    md("""
`example_repro_a100.json` beside this notebook is an **example record, written by hand,
not measured**: an A100 runtime with `torch.set_float32_matmul_precision("high")` (its
`label` field says so). Compared with this machine:
"""),
    code("""
import urllib.request

EXAMPLE = Path("example_repro_a100.json")
if not EXAMPLE.exists():  # on Colab the notebook runs without the repository beside it
    urllib.request.urlretrieve(
        "https://raw.githubusercontent.com/colab-gpu-guard/colab_gpu_guard/main/"
        "notebooks/example_repro_a100.json",
        EXAMPLE,
    )
%repro --diff example_repro_a100.json
"""),
    md("""
And the same example run moved from a T4 (sm_75, no TF32) to the A100 (sm_80): the
difference that matters is TF32, which Ampere and newer GPUs use by default for cuDNN
convolutions.
"""),
    code("""
import dataclasses

from colab_gpu_guard import repro_diff
from colab_gpu_guard.seeding import read_record
from colab_gpu_guard.seeding.repro import Gpu

a100 = read_record("example_repro_a100.json")
t4 = dataclasses.replace(a100, gpus=(Gpu(0, "Tesla T4", "7.5"),), label="example, T4")
repro_diff(t4, a100, "T4 example", "A100 example")
"""),
]


# One training cell, run three times in memory_leaks.ipynb: reruns are what leak.
TRAIN_CELL = """
batch = torch.randn(2048, 1024, device=device)
val_loss = model(batch).pow(2).mean()  # no torch.no_grad(): the graph is built
val_losses.append(val_loss)  # keeps this run's autograd graph and what it saved
model(batch)
"""

MEMORY_LEAKS = [
    md("""
# The "second run" problem: CUDA out of memory when you rerun a cell

You train in a cell, rerun it, and memory climbs until "CUDA out of memory" — though
every variable was reassigned. The notebook keeps the old tensors alive where you cannot
see them: the output history (`Out`, `_`, `__`, `___`, `_N`), the last exception's
traceback frames, and your own containers. `torch.cuda.empty_cache()` frees none of that;
it only returns *unused* cached blocks. This notebook shows the problem and the cure. It
runs on a CPU too (the figures are then host memory).
"""),
    code("""
%load_ext colab_gpu_guard
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(1024, 1024).to(device)
val_losses = []
print(device)
"""),
    md("""
## A validation cell, run three times

`val_losses.append(val_loss)` looks like it keeps one number per run. It keeps a tensor
with a `grad_fn`, and through it the autograd graph with every activation the forward pass
saved for a backward that never comes: the first cause PyTorch's FAQ lists for running
out of memory ("Don't accumulate history across your training loop").
The last line's value lands in `Out` (and `_`) with its own graph.
"""),
    *[code(TRAIN_CELL) for _ in range(3)],  # the same cell, rerun
    md("""
Every cell's memory effect is recorded (allocated before/after and peak on a GPU, host
memory on a CPU). A rerun is flagged `LEAK` when it keeps memory again, that is, the
previous run's objects are still alive, and the flag names what holds them where it can
tell:
"""),
    code("%gpu_history"),
    md("""
## A failed cell keeps its frames

When a cell raises, Python keeps the traceback, and the traceback keeps every frame's
locals: here `activations` inside `train_step`, 8 million float32 values: 30.5 MiB.
"""),
    code(
        """
def train_step():
    activations = torch.randn(8_000_000, device=device)
    raise RuntimeError("something went wrong after allocating")


train_step()
""",
        tags=["raises-exception"],
    ),
    md("""
## What is held, by name

`%gpu_status` shows the leftovers grouped by the variable that holds them, the ones you
did not knowingly keep first: output history, the traceback's frames, and `val_losses`,
whose entries carry their autograd graphs ("autograd graph: N saved tensors"), with the
fix. `%gpu_reset --dry-run` says what a reset would drop and free, changing nothing.
"""),
    code("%gpu_status"),
    code("%gpu_reset --dry-run"),
    md("""
## The cure

`%gpu_reset` drops output history entries that hold tensors (plain outputs survive), the
last exception and its frames, then collects garbage and empties the CUDA caches, and
reports what was freed and what is *still* held. It deletes no variable you did not name
(unless you pass `--all`).
"""),
    code("%gpu_reset"),
    md("""
`val_losses` is still held: it is your variable, and `%gpu_reset` deletes no variable you
did not name. The fix is to keep numbers, not graphs: `val_losses.append(val_loss.item())`
(or run validation under `torch.no_grad()`). Here, the list is turned into numbers, which
frees every graph it kept:
"""),
    code("""
from colab_gpu_guard import find_leftovers

held = find_leftovers().groups().named("val_losses")
print("before:", held)
val_losses = [loss.item() for loss in val_losses]
del val_loss
assert find_leftovers().groups().named("val_losses") is None
print("after: val_losses holds", len(val_losses), "plain numbers and no tensor")
"""),
]


def write(name: str, cells) -> Path:
    nb = new_notebook(cells=cells)
    for index, cell in enumerate(nb.cells):  # stable ids: regenerating changes nothing else
        cell["id"] = f"cell-{index:02d}"
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
    print(write("memory_leaks.ipynb", MEMORY_LEAKS))
