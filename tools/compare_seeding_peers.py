# ruff: noqa: E402, B007
"""Measure what the seed magic's REFERENCE says of Lightning, accelerate and
torch.random.fork_rng (docs/reference.md): run it where those are installed, e.g.
``python -m venv --system-site-packages /tmp/peers && /tmp/peers/bin/pip install lightning
accelerate && PYTHONPATH=. /tmp/peers/bin/python tools/compare_seeding_peers.py``.
DataLoader workers need the dataset in a module: it is written to a temporary folder."""

import os
import random
import sys
import tempfile
import warnings

import numpy as np
import torch

_folder = tempfile.mkdtemp()
with open(os.path.join(_folder, "augmented35.py"), "w") as _file:
    _file.write(
        "import random, numpy as np, torch\n"
        "from torch.utils.data import Dataset\n"
        "class Augmented(Dataset):\n"
        "    def __len__(self): return 8\n"
        "    def __getitem__(self, i):\n"
        "        return torch.tensor([float(i), torch.rand(()).item(), random.random(),"
        " float(np.random.rand())])\n"
        "def accelerate_rank(rank, port, folder):\n"
        "    # one of two gloo ranks: accelerate's device_specific seed against per_rank\n"
        "    import json, os, random\n"
        "    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE='2',\n"
        "                      MASTER_ADDR='127.0.0.1', MASTER_PORT=str(port))\n"
        "    from accelerate import Accelerator\n"
        "    from accelerate.utils import set_seed\n"
        "    from colab_gpu_guard import seed_all\n"
        "    state = Accelerator(cpu=True).state\n"
        "    draw = lambda: [torch.rand(2).tolist(), random.random(), float(np.random.rand())]\n"
        "    set_seed(42, device_specific=True)\n"
        "    theirs = draw()\n"
        "    report = seed_all(42, per_rank=True)\n"
        "    ours = draw()\n"
        "    with open(os.path.join(folder, f'rank{rank}.json'), 'w') as f:\n"
        "        json.dump([state.process_index, theirs == ours, report.seed], f)\n"
    )
sys.path.insert(0, _folder)
import accelerate
import lightning
from accelerate.utils import set_seed
from augmented35 import Augmented  # noqa: E402
from lightning.fabric.utilities.seed import pl_worker_init_function
from lightning.pytorch import seed_everything
from lightning.pytorch.utilities.seed import isolate_rng
from torch.utils.data import DataLoader

from colab_gpu_guard import (
    ResumableEpoch,
    isolated_rng,
    restore_rng_state,
    rng_state,
    seed_all,
    seed_worker,
)

print("versions", lightning.__version__, accelerate.__version__, torch.__version__, np.__version__)


def draws():
    return (torch.rand(2).tolist(), random.random(), float(np.random.rand()))


seed_all(42)
a = draws()
seed_everything(42, verbose=False)
b = draws()
set_seed(42)
c = draws()
print("1. draws equal seed_all/seed_everything/set_seed:", a == b == c)
print("   PL_GLOBAL_SEED after seed_everything:", os.environ.get("PL_GLOBAL_SEED"))


def worker_draws(rank, init):
    os.environ["RANK"] = str(rank)
    torch.manual_seed(42)
    fn = (
        (lambda w: pl_worker_init_function(w, rank=rank))
        if init == "pl"
        else (seed_worker if init == "ours" else None)
    )
    loader = DataLoader(
        Augmented(), batch_size=2, num_workers=2, worker_init_fn=fn, multiprocessing_context="fork"
    )
    rows = [r for b in loader for r in b.tolist()]
    return [[r[k] for r in rows] for k in (1, 2, 3)]  # torch, random, numpy


for init in (None, "ours", "pl"):
    r0, r1 = worker_draws(0, init), worker_draws(1, init)
    print(
        f"2. worker_init {init}: ranks share draws (torch, random, numpy):",
        [bool(set(x) & set(y)) for x, y in zip(r0, r1)],
    )
os.environ.pop("RANK")
import json
import socket
import subprocess

with socket.socket() as probe:
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
# two new processes (not mp.spawn: it would import this script again in each)
_path = os.pathsep.join([_folder, os.getcwd(), os.environ.get("PYTHONPATH", "")])
_ranks = [
    subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from augmented35 import accelerate_rank as f; f({r}, {port}, {_folder!r})",
        ],
        env=dict(os.environ, PYTHONPATH=_path),
    )
    for r in (0, 1)
]
assert [p.wait() for p in _ranks] == [0, 0]
for rank in (0, 1):
    with open(os.path.join(_folder, f"rank{rank}.json")) as handle:
        index, equal, seed = json.load(handle)
    print(
        f"2b. gloo rank {rank}: accelerate process_index {index}, set_seed(42, "
        f"device_specific=True) draws equal seed_all(42, per_rank=True)'s (seed {seed}):",
        equal,
    )
# fork_rng
random.seed(1)
np.random.seed(1)
torch.manual_seed(1)
exp = draws()
random.seed(1)
np.random.seed(1)
torch.manual_seed(1)
with torch.random.fork_rng():
    draws()
got = draws()
print(
    "3. fork_rng restores torch / random / numpy:",
    got[0] == exp[0],
    got[1] == exp[1],
    got[2] == exp[2],
)
random.seed(1)
np.random.seed(1)
torch.manual_seed(1)
with isolate_rng():
    draws()
got = draws()
print(
    "4. isolate_rng restores torch / random / numpy:",
    got[0] == exp[0],
    got[1] == exp[1],
    got[2] == exp[2],
)
random.seed(1)
np.random.seed(1)
torch.manual_seed(1)
try:
    with isolate_rng():
        draws()
        raise ZeroDivisionError
except ZeroDivisionError:
    pass
got = draws()
print("   isolate_rng after an exception restores:", got == exp)
np.random.set_bit_generator(np.random.PCG64(5))
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with isolate_rng():
            np.random.rand()
    print("5. isolate_rng on a PCG64 global: ok, warnings:", [str(w.message)[:60] for w in caught])
except Exception as e:
    print("5. isolate_rng on a PCG64 global raises:", type(e).__name__, str(e)[:80])
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    s = np.random.get_state()
    x = np.random.rand()
    try:
        np.random.set_state(s)
        print("   legacy get/set_state on PCG64 round trip equal:", np.random.rand() == x)
    except Exception as e:
        print("   legacy set_state raises", type(e).__name__)
with isolated_rng():
    np.random.rand()
print("   ours on PCG64: ok")
np.random.set_bit_generator(np.random.MT19937(0))
# skip_first_batches vs ResumableEpoch
from accelerate import skip_first_batches


def loader_for(g):
    return DataLoader(
        Augmented(),
        batch_size=2,
        shuffle=True,
        num_workers=2,
        generator=g,
        multiprocessing_context="fork",
    )


torch.manual_seed(3)
g = torch.Generator().manual_seed(5)
start = rng_state({"g": g})
full = [b.tolist() for b in loader_for(g)]
restore_rng_state(start, {"g": g})
skipped = [b.tolist() for b in skip_first_batches(loader_for(g), 2)]
print(
    "6. accelerate skip_first_batches after restoring the epoch start: same samples",
    [[r[0] for r in b] for b in skipped] == [[r[0] for r in b] for b in full[2:]],
    "same augmentations",
    skipped == full[2:],
)
restore_rng_state(start, {"g": g})
e = ResumableEpoch(loader_for(g), {"g": g})
for i, b in enumerate(e):
    if i == 1:
        ck = e.checkpoint()
        break
rest = [b.tolist() for b in ResumableEpoch(loader_for(g), {"g": g}, resume=ck)]
print("   ResumableEpoch: same batches", rest == full[2:])
