"""Write the notebooks in notebooks/ from the cell lists below (no outputs are ever
committed).

Each notebook tells one story: the problem, the command, what you see, the fix, the clean
result. Each opens with the same install cell (INSTALL), which works in a fresh Colab
runtime (from an uploaded wheel) and in a clone. Every claim is true on a CPU and on a
GPU; where a GPU changes an output, the text says how. The prose quotes no report line
word for word (the reports' wording has its own tests); tests/kernel/test_notebooks.py
runs every notebook in a real kernel.

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


# The first code cell of every notebook. Plain Python (no magics), so that it runs before
# the extension exists; it never raises: whatever happens, it prints one line.
INSTALL_CELL = '''
def install_colab_gpu_guard():
    """Install colab_gpu_guard unless it is importable: from an uploaded wheel
    (colab_gpu_guard-*.whl here or in /content), else from the clone this notebook is in."""
    import glob, importlib, importlib.metadata, importlib.util, os, subprocess, sys

    if importlib.util.find_spec("colab_gpu_guard") is not None:
        try:
            return f"colab_gpu_guard {importlib.metadata.version('colab_gpu_guard')} is installed"
        except importlib.metadata.PackageNotFoundError:
            return "colab_gpu_guard is importable"
    wheels = glob.glob("colab_gpu_guard-*.whl") + glob.glob("/content/colab_gpu_guard-*.whl")
    clones = [os.path.abspath(folder) for folder in (".", "..")
              if os.path.isfile(os.path.join(folder, "colab_gpu_guard", "__init__.py"))]
    if wheels:
        source = max(wheels, key=os.path.getmtime)  # the newest upload
        command = [source]
    elif clones:
        source = clones[0]
        command = ["-e", source]
    else:
        return ("colab_gpu_guard is not installed: run `make wheel` in a clone of its "
                "repository, upload dist/colab_gpu_guard-*.whl here (in Colab: the Files "
                "panel, into /content), then run this cell again")
    run = subprocess.run([sys.executable, "-m", "pip", "install", "-q", *command],
                         capture_output=True, text=True)
    if run.returncode != 0:
        why = (run.stderr.strip().splitlines() or ["no message"])[-1]
        return f"pip could not install colab_gpu_guard from {source}: {why}"
    if not wheels:  # an editable install is seen by new processes; this one needs the path
        sys.path.insert(0, source)
    importlib.invalidate_caches()
    return f"installed colab_gpu_guard from {source}"


print(install_colab_gpu_guard())
'''

INSTALL_NOTE = """
Run the next cell first. In a clone of the repository it finds the package installed
(`pip install .`), or installs it from the clone. In Colab, build the wheel first: in a
clone, `make wheel` writes `dist/colab_gpu_guard-*.whl`; upload that file to the runtime
(the Files panel on the left, into `/content`) and run the cell. Besides the package it
installs only those of its few dependencies that are missing (IPython, ipywidgets,
nvidia-ml-py, psutil); it never installs or upgrades torch.
"""


QUICKSTART = [
    md("""
# colab_gpu_guard quickstart

You train a PyTorch model in a notebook and rerun its cells. Three things go wrong: the
numbers change from run to run, memory fills up with things you can no longer see, and a
CUDA error says little about what to do. This notebook takes each in turn: the command,
what it shows, and the fix. Every cell also runs without a GPU; where a GPU changes an
output, the text says how.
"""),
    md(INSTALL_NOTE),
    code(INSTALL_CELL),
    md("""
Load the extension. Loading it is cheap: it does not import torch or ipywidgets, it looks
at what you import.
"""),
    code("%load_ext colab_gpu_guard"),
    md("""
## 1. The same numbers on every run: `%seed_all`

Python's `random`, NumPy and torch each have their own random number generator.
`%seed_all 42` seeds them all and prints one line saying what it seeded (on a GPU it also
names the CUDA devices: `torch.manual_seed` seeds every CUDA device itself, lazily, so
seeding before CUDA starts is fine). `%seed_all 42 -v` says how each one was seeded.
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
    md("Seed again, draw again: the same numbers (on a GPU, the same GPU numbers)."),
    code("""
%seed_all 42
again = (random.random(), float(np.random.rand()), torch.rand(3, device=device).tolist())
assert again == first, (again, first)
print("same seed, same draws:", again == first)
"""),
    md("""
Seeding fixes the draws, not every result: some GPU kernels are nondeterministic.
`%seed_all 42 --deterministic` also switches on torch's deterministic algorithms (and sets
`CUBLAS_WORKSPACE_CONFIG` where the installed torch needs it; `-v` says whether it does).
On a GPU its line also mentions TF32: on an A100, L4 or H100, cuDNN convolutions use TF32
by default, so float32 results differ from a T4's or a CPU's (on a T4 it says what would
change on those; without a GPU `-v` says it).
`--strict` switches them to full fp32 too. Seeding again keeps the modes in force (its
line says "kept"); `--no-deterministic` switches deterministic mode off.
"""),
    code("%seed_all 42 --deterministic"),
    code("%seed_all 42"),
    code("%seed_all 42 --no-deterministic"),
    md("""
### Cells that draw the same numbers whatever ran before

You rerun cells out of order, so what a cell draws depends on what ran before it. With
`--every-cell`, each cell is reseeded from (the seed, its source) before it runs: the two
identical cells below draw the same numbers, though another cell drew in between.
"""),
    code("%seed_all 7 --every-cell"),
    code("draw = torch.rand(2).tolist(); draw"),
    code("noise = [random.random() for i in range(10)]  # anything in between"),
    code("draw = torch.rand(2).tolist(); draw"),
    code("%seed_all --no-every-cell"),
    md("""
### What decides the numbers: `%repro`

When two runs still differ, `%repro` sums up what decides this kernel's numbers: the
seed, torch's deterministic and TF32 settings, the versions and the GPUs (none listed
here without a GPU). `%repro --save FILE` writes it down and `%repro --diff FILE` says
what changed since; reproducibility.ipynb shows both.
"""),
    code("%repro"),
    md("""
## 2. What holds memory: `%gpu_status` and the panel

Memory you cannot see: a cell whose last line is an expression shows its value, and
IPython keeps that value in the output history (`Out[N]`, and `_` for the last one) for
as long as the kernel runs. Here `weights * 2` is a second 4 MiB tensor (GPU memory, on a
GPU) that no variable of yours names:
"""),
    code("""
weights = torch.randn(1024, 1024, device=device)
weights * 2  # shown below, and kept alive in Out and _
"""),
    md("""
`%gpu_status` lists the tensors still held, by the name you would type: `weights`, and
the result above under its output history name. On a GPU it starts with the driver and
CUDA versions, each GPU's memory as the driver sees it beside what this kernel holds, and
other processes on the GPU; without a GPU it says why, and shows the machine's RAM and
the tensors on the CPU.
"""),
    code("%gpu_status"),
    md("""
`%gpu_panel` shows the same at a glance and stays up to date after every cell, with
buttons to free memory. On a GPU, each GPU gets a bar: this kernel's share, other
processes', and what is free. (A notebook rendered as a page, like GitHub's view, shows a
static copy of the panel as it was.)
"""),
    code("%gpu_panel"),
    md("""
## 3. Each cell's memory: `%gpu_history`

Every cell's memory effect is recorded from `%load_ext` on; `--limit 4` shows the last
four. On a GPU, the table has torch's CUDA memory for each cell: allocated before and
after, the change, the peak during the cell, and what the allocator reserved. Its *host
RSS* column is the resident memory of the whole kernel process after the cell (Python,
torch's libraries and every object), not what the cell itself allocated; without a GPU
it is the only figure. A rerun that keeps memory again is flagged there: see
memory_leaks.ipynb.
"""),
    code("%gpu_history --limit 4"),
    md("""
## 4. Free it: `%gpu_reset`

`%gpu_reset` drops what the notebook keeps behind your back (output history entries that
hold tensors, the last error's traceback), collects garbage, empties torch's CUDA cache,
and says what it freed and what is still held. It deletes no variable you did not name:
`weights` stays (`%gpu_reset weights` would delete it too). `%gpu_reset --dry-run` says
what it would do and changes nothing.
"""),
    code("%gpu_reset"),
    md("""
## 5. CUDA errors explained

When a cell dies with a CUDA error (out of memory, a device-side assert, CUDA used in a
forked process, a cuBLAS determinism error), the usual traceback is followed by the
cause and the fix. This is on as soon as the extension is loaded: `%gpu_advice` alone
says whether it is on, and `%gpu_advice off` turns it off.
"""),
    code("%gpu_advice"),
    md("""
Here, a simulated out-of-memory error with a T4's figures, as a too-large batch raises
it: on a real GPU the advice reads the same, with that GPU's figures.
"""),
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
    md("""
## 6. Which line filled the GPU: `%gpu_trace`

`%gpu_trace on` traces every following cell until `%gpu_trace off` (`%%gpu_trace` as a
cell's first line traces that cell alone): under each one, its peak, what was alive at it
by the line that allocated it, and what it kept. It reads torch's record of CUDA
allocations, so on a machine without a GPU it says so in one line and the cells run as
usual. `memory_leaks.ipynb` uses it on a batch too large for the GPU.
"""),
    code("%gpu_trace on"),
    code("traced = torch.ones(1024, 1024, device='cuda' if torch.cuda.is_available() else 'cpu')"),
    code("%gpu_trace off"),
    md("""
Next: `memory_leaks.ipynb` follows the "out of memory on the second run" problem from
start to fix, and `reproducibility.ipynb` checks what seeding really does, DataLoader
workers and several processes (DDP) included.
"""),
]


REPRODUCIBILITY = [
    md("""
# Reproducibility in notebooks, answered correctly

You seeded everything, and two runs still differ; or two processes of one DDP job train on
the same augmentations. Popular advice on seeding PyTorch is often wrong or out of date.
This notebook checks each claim against the installed PyTorch, then shows the fix:
seeding every generator, DataLoader workers and ranks, saving and restoring every random
stream, and finding what differs between two runs. Every cell runs without a GPU and
uses the GPU where there is one.
"""),
    md(INSTALL_NOTE),
    code(INSTALL_CELL),
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
    md("""
`%seed_all 42` seeds Python `random`, NumPy's global generator and torch in one line (on a
GPU its line also names the CUDA devices):
"""),
    code("%seed_all 42"),
    md("""
## Deterministic algorithms, and what they cost

`--deterministic` switches on `torch.use_deterministic_algorithms(True)` and cuDNN's
deterministic mode, turns off `cudnn.benchmark`, and sets `CUBLAS_WORKSPACE_CONFIG` only if
the installed torch still checks for it (recent torch builds do not).
On a GPU, deterministic kernels can be slower; this model's CPU kernels are the same
either way, so on a CPU the ratio below is about 1, up to timing noise. Measure on your
model:
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


step_time(repeats=2)  # warm up
fast = step_time()
%seed_all 42 --deterministic
deterministic = step_time()
%seed_all 42 --no-deterministic
print(f"deterministic / default step time on {device}: {deterministic / fast:.2f}x")
"""),
    md("""
## DataLoader workers, and ranks

A `DataLoader` with `num_workers > 0` runs the dataset in worker processes. Where those
processes are started with *spawn* or *forkserver* (macOS, Windows, and Linux from Python
3.14 on), each worker imports the dataset's class by name, so a class defined in a
notebook cell fails there. Put it in a module file; the cell below writes one, with a
dataset whose items draw from torch, `random` and NumPy as an augmentation would.
"""),
    code('''
import sys
import tempfile
from pathlib import Path

workdir = Path(tempfile.mkdtemp())  # the module files and saved records of this notebook
(workdir / "augmented.py").write_text("""
import random

import numpy as np
import torch
from torch.utils.data import Dataset


class Augmented(Dataset):
    \\"\\"\\"8 items; each draws from torch, random and NumPy, in its worker.\\"\\"\\"

    def __len__(self):
        return 8

    def __getitem__(self, index):
        draws = [torch.rand(()).item(), random.random(), float(np.random.rand())]
        return torch.tensor([float(index), *draws])
""")
sys.path.insert(0, str(workdir))  # spawned processes get this path too
from augmented import Augmented  # noqa: E402
'''),
    md("""
Claim often repeated: "DataLoader workers copy Python `random` and NumPy state, so they
repeat each other's augmentations". Not since torch 1.9: each worker seeds `random`, NumPy
and torch from the loader's base seed and its worker id
(`torch/utils/data/_utils/worker.py`). For the same batches on every run, give the loader
a seeded generator; `dataloader_generator(42)` is one, seeded from (seed, rank). Below,
the first run starts its two workers with *spawn*, as macOS and Windows do, the second
with this platform's default:
"""),
    code("""
from torch.utils.data import DataLoader

from colab_gpu_guard import dataloader_generator, seed_worker


def epoch(start_method=None):
    loader = DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2,
                        multiprocessing_context=start_method,
                        worker_init_fn=seed_worker, generator=dataloader_generator(42))
    return [batch.tolist() for batch in loader]


first, second = epoch("spawn"), epoch()
assert first == second
print("two runs with two workers each, spawned or not, same batches:", first == second)
"""),
    md("""
What *is* true: the base seed comes from the loader's generator or torch's global
generator, which a DDP script usually seeds alike on every rank, so without rank-aware
seeding **every rank draws the same augmentations**. `seed_worker` reseeds `random` and
NumPy in each worker from (torch's worker seed, rank, worker id), and
`dataloader_generator()` seeds torch's draws and the shuffle order from (seed, rank). The
cell below simulates rank 0 and rank 1 of a DDP job with the `RANK` environment variable.
"""),
    code("""
import os

source = inspect.getsource(torch.utils.data._utils.worker._worker_loop)
assert "random.seed(seed)" in source and "np.random.seed(np_seed)" in source


def draws_as_rank(rank, rank_aware):
    \"\"\"One epoch's (torch, random, NumPy) draws as rank `rank` of a DDP job makes them.\"\"\"
    os.environ["RANK"] = str(rank)
    torch.manual_seed(42)  # every rank seeds alike, as DDP scripts usually do
    seeding = dict(worker_init_fn=seed_worker, generator=dataloader_generator(42))
    loader = DataLoader(Augmented(), batch_size=4, num_workers=2, **(seeding if rank_aware else {}))
    return [tuple(row[1:]) for batch in loader for row in batch.tolist()]


plain0, plain1 = draws_as_rank(0, False), draws_as_rank(1, False)
ours0, ours1 = draws_as_rank(0, True), draws_as_rank(1, True)
os.environ.pop("RANK", None)

# Batch n comes from worker n % 2: without any help, the two workers draw differently...
assert not set(plain0[:4]) & set(plain0[4:8]), "workers repeat each other"
print("the two workers differ without help:", plain0[0] != plain0[4])
# ...but rank 1 draws exactly what rank 0 draws,
assert plain0 == plain1
print("rank 0 and rank 1 without rank-aware seeding draw the same:", plain0 == plain1)
# and rank-aware seeding gives each rank its own draws, reproducibly.
values0, values1 = {v for row in ours0 for v in row}, {v for row in ours1 for v in row}
assert not values0 & values1
print("with seed_worker and dataloader_generator the ranks share no draw:", not values0 & values1)
"""),
    md("""
## Cells you rerun out of order: `--every-cell`

The random stream depends on everything that ran before. `--every-cell` reseeds before
each cell from (seed, the cell's source), so a cell draws the same numbers every time.
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
same seed on every rank makes them equal before that too) but must draw **different
data**: a `DistributedSampler` per rank (with `set_epoch` each epoch) for the samples, and
rank-aware seeds for the workers' augmentations. Below, two processes on the CPU with the
gloo backend show all three, each rank's DataLoader with two workers. The code each
process runs lives in a module file, for the same reason as the dataset.
"""),
    code('''
import json
import socket

(workdir / "ddp_demo.py").write_text("""
import json, os
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler
from augmented import Augmented
from colab_gpu_guard import dataloader_generator, seed_all, seed_worker

def run(rank, world_size, port, outdir):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    seed_all(1234)                       # the same seed on every rank...
    model = torch.nn.Linear(4, 2)        # ...so identical initial weights
    data = Augmented()
    sampler = DistributedSampler(data, shuffle=True, seed=1234)
    sampler.set_epoch(0)                 # call every epoch, or every epoch repeats
    loader = DataLoader(data, batch_size=2, sampler=sampler, num_workers=2,
                        worker_init_fn=seed_worker, generator=dataloader_generator(1234))
    rows = [row for batch in loader for row in batch.tolist()]
    with open(os.path.join(outdir, f"rank{rank}.json"), "w") as out:
        json.dump({"weights": model.weight.sum().item(),
                   "indices": [int(row[0]) for row in rows],
                   "draws": [draw for row in rows for draw in row[1:]]}, out)
    dist.destroy_process_group()
""")
import ddp_demo  # noqa: E402
import torch.multiprocessing as mp

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
mp.spawn(ddp_demo.run, args=(2, port, str(workdir)), nprocs=2, join=True)
ranks = [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(2)]
for rank, result in enumerate(ranks):
    print(f"rank {rank}: weights sum {result['weights']:.4f}, samples {result['indices']}")
assert ranks[0]["weights"] == ranks[1]["weights"], "initial weights differ"
assert not set(ranks[0]["indices"]) & set(ranks[1]["indices"]), "ranks share samples"
assert not set(ranks[0]["draws"]) & set(ranks[1]["draws"]), "ranks share augmentations"
print("identical initial weights, disjoint samples, and no augmentation draw in common")
'''),
    md("""
## Save and restore every random stream exactly

Resuming a run from a checkpoint reproduces it only if every random stream resumes too:
Python `random`, NumPy's global generator, torch's CPU (and each CUDA device's) generator,
and the DataLoader's own `generator=` (its shuffle order and its workers' seeds come from
it). `rng_state()` captures them all in one picklable object; `restore_rng_state()` puts
them back. Below, epoch 1 runs, the state goes to a file, epochs 2 and 3 run; then a "new
session" with other seeds loads the file and runs epochs 2 and 3 again.
"""),
    code("""
import pickle

from colab_gpu_guard import isolated_rng, restore_rng_state, rng_state, seed_all


def epoch(loader):
    rows = [row.tolist() for batch in loader for row in batch]
    return rows + [torch.randn(2).tolist()]  # and the training loop's own draws


seed_all(7)
loader_generator = torch.Generator().manual_seed(7)
loader = DataLoader(Augmented(), batch_size=4, shuffle=True, num_workers=2,
                    generator=loader_generator)
epoch(loader)  # epoch 1
with open(workdir / "rng_checkpoint.pkl", "wb") as file:
    pickle.dump(rng_state(generators={"loader": loader_generator}), file)
uninterrupted = [epoch(loader) for _ in range(2)]  # epochs 2 and 3
"""),
    code("""
seed_all(999)  # a new session: another seed, other draws, a fresh generator
torch.rand(100)
loader_generator = torch.Generator()
with open(workdir / "rng_checkpoint.pkl", "rb") as file:
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
## Resume in the middle of an epoch

The runtime disconnected after batch 2 of epoch 2. Restoring a state saved there and
iterating the DataLoader again does not go on with batch 3: a new iterator draws a new
shuffle order (and new worker seeds) from the loader's generator, so it starts another
epoch. `ResumableEpoch` keeps what an exact resume needs: the random state at the epoch's
start (the loader's own `generator=` included), the batches done, and the state at the
checkpoint. Resuming makes the iterator from the first, loads and drops the batches already
done (the workers' augmentation streams move on as before; this costs their loading time),
then restores the second; the epochs after it go on as in the uninterrupted run.
"""),
    code("""
from colab_gpu_guard import ResumableEpoch


def make_loader():
    generator = torch.Generator().manual_seed(5)
    return DataLoader(Augmented(), batch_size=2, shuffle=True, num_workers=2,
                      worker_init_fn=seed_worker, generator=generator)


def train_step(batch):
    return batch.tolist() + [torch.randn(2).tolist()]  # and the step's own draws (dropout...)


seed_all(5)
loader = make_loader()
uninterrupted = [[train_step(b) for b in ResumableEpoch(loader)] for _ in range(3)]

seed_all(5)
loader = make_loader()
[train_step(b) for b in ResumableEpoch(loader)]  # epoch 1
epoch_run = ResumableEpoch(loader)  # epoch 2
for batch in epoch_run:
    train_step(batch)
    if epoch_run.batches_done == 2:  # the runtime disconnects here
        with open(workdir / "epoch_checkpoint.pkl", "wb") as file:
            pickle.dump(epoch_run.checkpoint(), file)
        break
"""),
    code("""
seed_all(999)  # a new session: another seed, other draws, a fresh loader
torch.rand(100)
loader = make_loader()
with open(workdir / "epoch_checkpoint.pkl", "rb") as file:
    checkpoint = pickle.load(file)
print(checkpoint)
rest_of_epoch_2 = [train_step(b) for b in ResumableEpoch(loader, resume=checkpoint)]
epoch_3 = [train_step(b) for b in ResumableEpoch(loader)]
assert rest_of_epoch_2 == uninterrupted[1][2:]
assert epoch_3 == uninterrupted[2]
print("the rest of epoch 2, and epoch 3: the same samples, augmentations and training draws")
"""),
    md("""
A plotting or validation cell that draws random numbers shifts every training draw after
it. `with isolated_rng():` runs the code inside it and then puts every stream back:
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
FILE` also writes it to a JSON file, as below, and `%repro --diff FILE` explains what
differs from a saved run, most important first. `python -m colab_gpu_guard repro --diff
FILE` does the same from a terminal or a DDP worker.
"""),
    code("%repro --save {workdir}/this_run.json"),
    md("""
Say a colleague ran this notebook on an A100 with `torch.set_float32_matmul_precision("high")`
and saved the record. The cell below makes such a record from this machine's own, as an
**example, not measured** (its label says so): the GPU and the TF32 settings changed,
nothing else. `%repro --diff` reads it and says what that changes. (On a GPU, the
difference names your GPU.)
"""),
    code("""
import dataclasses
import json

from colab_gpu_guard import repro_diff, repro_record
from colab_gpu_guard.seeding.repro_parts import Gpu

here = repro_record()
a100 = dataclasses.replace(
    here,
    gpus=(Gpu(0, "NVIDIA A100-SXM4-40GB", "8.0"),),
    gpu_note=None,
    torch_flags=dataclasses.replace(
        here.torch_flags,
        matmul_allow_tf32=True,
        cudnn_allow_tf32=True,
        float32_matmul_precision="high",
    ),
    label="example, not measured: this run on an A100 with matmul precision 'high'",
)
(workdir / "a100_example.json").write_text(json.dumps(a100.to_dict()))
%repro --diff {workdir}/a100_example.json
"""),
    md("""
And the same example moved from a T4 (sm_75, no TF32) to the A100 (sm_80): the
difference that matters is TF32, which Ampere and newer GPUs use by default for cuDNN
convolutions.
"""),
    code("""
t4 = dataclasses.replace(a100, gpus=(Gpu(0, "Tesla T4", "7.5"),), label="example, T4")
repro_diff(t4, a100, "T4 example", "A100 example")
"""),
]


# The validation cell of memory_leaks.ipynb, run three times: reruns are what leak.
LEAKY_CELL = """
batch = torch.randn(2048, 1024, device=device)
val_loss = model(batch).pow(2).mean()  # no torch.no_grad(): the graph is built
val_losses.append(val_loss)  # keeps this run's autograd graph and what it saved
model(batch)  # a look at the outputs
"""

# The same cell, fixed, also run three times: the clean result.
FIXED_CELL = """
batch = torch.randn(2048, 1024, device=device)
with torch.no_grad():  # validation needs no graph
    val_loss = model(batch).pow(2).mean()
val_losses.append(val_loss.item())  # a number: nothing else stays alive
model(batch);  # the `;` shows nothing, so nothing lands in Out and _
"""

# The classic out of memory in memory_leaks.ipynb: a batch too large, found by line with
# %%gpu_trace, fixed. On a CPU the magic says so in one line and the cells run untraced;
# a trace recorded on a GPU (example_oom_trace.json, written by tools/trace_example.py
# from the real snapshot tools/record_cuda_snapshots.py saved) is shown instead, labelled.
TRACE_OOM = [
    md("""
## The classic out of memory: a batch too large, found by line

Not every "CUDA out of memory" is a leak: sometimes one batch is simply too big. The
error says how much was asked for, not which line of yours holds the rest. `%%gpu_trace`
as a cell's first line records what the cell allocates, and shows under its output the
peak, what was alive at it by the line of the cell that allocated it, the line that ran
out of memory, and a timeline. Here the batch takes 60% of the GPU's free memory and the
model's output needs as much again. (The cell catches the error so that the notebook runs
on; the trace is the same without the `try`.)
"""),
    code("""
%%gpu_trace
free = torch.cuda.mem_get_info()[0] if device == "cuda" else 2**20
rows = int(free * 0.6) // (1024 * 4)  # a batch of 60% of the free memory
batch = torch.empty(rows, 1024, device=device)
try:
    logits = model(batch)  # the output needs as much again
except torch.cuda.OutOfMemoryError as error:
    print("CUDA out of memory:", str(error).split(".")[0])
"""),
    md("""
On a machine without a GPU the magic said so in one line and ran the cell. Below is a
trace recorded on a GPU and saved with the notebooks, labelled with where it was
recorded: the batch's line holds most of the memory at the failure, and the trace names
the line that asked for more.
"""),
    code("""
import json, os
from colab_gpu_guard.trace import TraceReport

if os.path.exists("example_oom_trace.json"):
    with open("example_oom_trace.json") as file:
        example = json.load(file)
    print(example["label"])
    display(TraceReport.from_dict(example["report"]))
else:
    print("the saved GPU trace, example_oom_trace.json, is beside this notebook in the repository")
"""),
    md("""
The fix: a smaller batch (or the same data in chunks). Traced again, the cell's peak
fits, and what it keeps at its end is listed by line with the names that hold it.
"""),
    code("""
%%gpu_trace
del batch
batch = torch.empty(rows // 4, 1024, device=device)  # a quarter: it fits
logits = model(batch)
"""),
]

MEMORY_LEAKS = [
    md("""
# The "second run" problem: CUDA out of memory when you rerun a cell

You run a validation cell, run it again, and memory climbs until "CUDA out of memory",
though every variable was reassigned. The notebook keeps the old tensors alive where you
do not look: the output history (`Out`, `_`, `__`, `___`, `_N`), the last error's
traceback, and your own lists. `torch.cuda.empty_cache()` frees none of that: it only
returns cached memory no tensor uses. This notebook shows the problem, finds each holder
by name, fixes it, and reruns the fixed cell to show memory staying flat. It runs without
a GPU too: the tensors are then on the CPU and the figures are host memory.
"""),
    md(INSTALL_NOTE),
    code(INSTALL_CELL),
    code("""
%load_ext colab_gpu_guard
import torch

device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(1024, 1024).to(device)
val_losses = []
print(device)
"""),
    md("""
## The problem: a validation cell, run three times

`val_losses.append(val_loss)` looks like it keeps one number per run. It keeps a tensor
with a `grad_fn`, and through it the autograd graph, with every activation the forward
pass saved for a backward pass that never comes: the first cause PyTorch's FAQ gives for
running out of memory ("Don't accumulate history across your training loop"). The last
line's value is shown, and IPython keeps it in the output history, with a graph of its
own.
"""),
    *[code(LEAKY_CELL) for _ in range(3)],  # the same cell, rerun
    md("""
## What you see: `%gpu_history`

Each cell's memory effect is recorded: on a GPU, torch's CUDA memory before and after
the cell and its peak; without a GPU, host memory. A rerun is flagged `LEAK` when it
keeps memory again, which means the previous run's objects are still alive, and the flag
names what holds them: here `val_losses`, which grew by one autograd graph, and the
previous run's output in `Out`. (The *host RSS* column is the whole kernel process, not
the cell.)
"""),
    code("%gpu_history"),
    md("""
## A failed cell keeps its frames

When a cell raises, Python keeps the traceback, and the traceback keeps every frame's
local variables: here `activations` inside `train_step`, 8 million float32 values, that
is 30.5 MiB, alive after the error.
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
## What is held, by name: `%gpu_status`

`%gpu_status` lists every tensor still held, by the name you would type: the output
history entries, the traceback's `activations`, and
`val_losses`, whose entries carry their autograd graphs, with the fix. (On a GPU it first
shows the GPU and its memory; `%gpu_reset --dry-run` would show what a reset frees,
changing nothing.)
"""),
    code("%gpu_status"),
    md("""
## The fix, in your code

Keep numbers, not graphs: `.item()` turns a one-element tensor into a Python number, and
validation under `torch.no_grad()` builds no graph at all. The list already built is
turned into numbers below. One holder is easy to miss: `val_loss` itself. It is the same
tensor as `val_losses[2]`, so after the list is fixed it still keeps the third run's
graph alive: `del val_loss` lets it go.
"""),
    code("""
val_losses = [loss.item() for loss in val_losses]  # numbers: the graphs can go
del val_loss  # was val_losses[2], and kept the third graph
val_losses
"""),
    md("""
## The fix, in the notebook: `%gpu_reset`

What remains is what the notebook keeps behind your back: the output history and the
last error's traceback. `%gpu_reset` drops both, collects garbage, empties torch's CUDA
cache, and says what it freed and what is still held. It deletes no variable you did not
name, so `model` and `batch` stay.
"""),
    code("%gpu_reset"),
    md("""
## The clean result: the fixed cell, run three times

The fixed cell computes under `torch.no_grad()`, keeps `val_loss.item()`, and ends its
last line with `;`: IPython shows nothing for it and keeps nothing in `Out` or `_`. Run
three times, it keeps no tensor from one run to the next.
"""),
    *[code(FIXED_CELL) for _ in range(3)],  # the fixed cell, rerun
    code("%gpu_history --limit 3"),
    md("""
No rerun is flagged. The panel shows the same state at a glance and stays up to date as
you run cells (on a GPU, with a bar of this kernel's share of the GPU's memory):
"""),
    code("%gpu_panel"),
    *TRACE_OOM,
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
