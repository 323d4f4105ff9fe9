"""DataLoader workers and ranks: reproducible, and different where they must differ."""

from __future__ import annotations

import random

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset

from colab_gpu_guard import (
    advisor,
    current_rank,
    dataloader_generator,
    seed_all,
    seed_worker,
)
from tests.workers import worker_context


class Augmented(Dataset):
    """Each item draws its 'augmentation' from Python random, NumPy and torch."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, index: int):
        return torch.tensor(
            [index, random.random(), float(np.random.rand()), float(torch.rand(()))]
        )


def worker_loader(worker_init_fn=None, start: object = None, workers: int = 2) -> DataLoader:
    """`workers` workers over `Augmented`, from the tests' fork server (`tests.workers`),
    or started by ``start`` ("spawn")."""
    return DataLoader(
        Augmented(),
        batch_size=4,
        num_workers=workers,
        worker_init_fn=worker_init_fn,
        multiprocessing_context=start or worker_context(),
    )


def batches(rank: int, monkeypatch, seed: int = 7) -> list[list[float]]:
    monkeypatch.setenv("RANK", str(rank))
    loader = DataLoader(
        Augmented(),
        batch_size=4,
        shuffle=True,
        num_workers=2,
        worker_init_fn=seed_worker,
        generator=dataloader_generator(seed),
        multiprocessing_context=worker_context(),
    )
    return [batch.tolist() for batch in loader]


def test_two_runs_with_two_workers_give_identical_batches(monkeypatch):
    assert batches(0, monkeypatch) == batches(0, monkeypatch)


def test_workers_do_not_repeat_each_others_augmentations(monkeypatch):
    rows = [row for batch in batches(0, monkeypatch) for row in batch]
    python_draws = [row[1] for row in rows]
    numpy_draws = [row[2] for row in rows]
    assert len(set(python_draws)) == len(python_draws)
    assert len(set(numpy_draws)) == len(numpy_draws)


def draws_as_rank(rank: int, monkeypatch, worker_init_fn=None) -> list[tuple]:
    """One epoch's Python and NumPy draws, made the way rank `rank` of a DDP job would:
    the same torch seed on every rank, no generator given."""
    monkeypatch.setenv("RANK", str(rank))
    torch.manual_seed(42)
    loader = worker_loader(worker_init_fn)
    return [(row[1], row[2]) for batch in loader for row in batch.tolist()]


def test_torch_itself_seeds_random_and_numpy_per_worker(monkeypatch):
    """What the seed_worker docstring and the notebook say: workers do not repeat each
    other without our help (torch >= 1.9 seeds both per worker)..."""
    draws = draws_as_rank(0, monkeypatch)
    worker0, worker1 = draws[:4], draws[4:8]  # batch_size 4: batch n comes from worker n % 2
    assert not {d[0] for d in worker0} & {d[0] for d in worker1}
    assert not {d[1] for d in worker0} & {d[1] for d in worker1}


def test_ranks_repeat_each_other_without_rank_aware_seeding(monkeypatch):
    """...but ranks seeded alike draw the same augmentations, and seed_worker separates them."""
    assert draws_as_rank(0, monkeypatch) == draws_as_rank(1, monkeypatch)
    ours0 = draws_as_rank(0, monkeypatch, seed_worker)
    ours1 = draws_as_rank(1, monkeypatch, seed_worker)
    assert not set(ours0) & set(ours1)
    assert draws_as_rank(0, monkeypatch, seed_worker) == ours0


def test_two_ranks_get_different_streams(monkeypatch):
    rank0, rank1 = batches(0, monkeypatch), batches(1, monkeypatch)
    flat0 = [row[1:] for batch in rank0 for row in batch]
    flat1 = [row[1:] for batch in rank1 for row in batch]
    assert not set(map(tuple, flat0)) & set(map(tuple, flat1))
    assert batches(1, monkeypatch) == rank1  # and each rank is reproducible


def test_generator_defaults_to_last_seed_all_seed(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    seed_all(11)
    a = torch.randint(0, 10**6, (4,), generator=dataloader_generator()).tolist()
    b = torch.randint(0, 10**6, (4,), generator=dataloader_generator(11)).tolist()
    assert a == b


def test_generator_on_a_device_draws_there_from_the_same_seed(monkeypatch):
    """`device=` makes the generator where the loader draws (a GPU default device needs
    `device='cuda'`: tests/gpu); on the CPU it is the default generator's stream."""
    monkeypatch.setenv("RANK", "0")
    on_cpu = dataloader_generator(11, device="cpu")
    assert on_cpu.device.type == "cpu"
    a = torch.randint(0, 10**6, (4,), generator=on_cpu).tolist()
    assert a == torch.randint(0, 10**6, (4,), generator=dataloader_generator(11)).tolist()
    mps = advisor.classify(
        RuntimeError("Expected a 'mps' device type for generator but found 'cpu'")
    )
    assert "`colab_gpu_guard.dataloader_generator(device='mps')`" in mps.fixes[0]


def test_rank_comes_from_env(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    assert current_rank() == 3
    monkeypatch.setenv("RANK", "junk")
    assert current_rank() == 0
    monkeypatch.delenv("RANK")
    assert current_rank() == 0


def test_generator_rejects_bad_seed():
    with pytest.raises(ValueError, match="0 to 4294967295"):
        dataloader_generator(-1)


def all_draws_as_rank(rank: int, monkeypatch, seed: int = 42) -> list[tuple]:
    """One epoch's torch, Python and NumPy draws on rank `rank` of a DDP job seeded the
    default way: seed_all(seed) on every rank, worker_init_fn=seed_worker, no generator."""
    monkeypatch.setenv("RANK", str(rank))
    seed_all(seed)
    loader = worker_loader(seed_worker)
    return [(row[1], row[2], row[3]) for batch in loader for row in batch.tolist()]


def test_default_path_differs_per_rank_for_all_three_streams(monkeypatch):
    rank0, rank1 = all_draws_as_rank(0, monkeypatch), all_draws_as_rank(1, monkeypatch)
    for stream in range(3):  # random, NumPy, torch (torch-based transforms too)
        assert not {row[stream] for row in rank0} & {row[stream] for row in rank1}, stream
    assert all_draws_as_rank(1, monkeypatch) == rank1  # and reproducible
    # without seed_worker the workers' torch draws repeat across ranks (what it fixes)
    monkeypatch.setenv("RANK", "1")
    assert [row[2] for row in draws_with_torch(monkeypatch)] == [
        row[2] for row in draws_with_torch(monkeypatch, rank=0)
    ]


def draws_with_torch(monkeypatch, rank: int = 1) -> list[tuple]:
    monkeypatch.setenv("RANK", str(rank))
    seed_all(42)
    loader = worker_loader()
    return [(row[1], row[2], row[3]) for batch in loader for row in batch.tolist()]


def test_workers_draw_anew_each_epoch(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    seed_all(42)
    loader = worker_loader(seed_worker)
    first, second = ([row[3] for b in loader for row in b.tolist()] for _ in range(2))
    assert not set(first) & set(second)


def test_main_process_seeds_are_equal_across_ranks_unless_per_rank(monkeypatch):
    def main_draws(rank: int, per_rank: bool = False):
        monkeypatch.setenv("RANK", str(rank))
        report = seed_all(42, per_rank=per_rank)
        return report, [torch.rand(3).tolist(), random.random(), float(np.random.rand())]

    assert main_draws(0)[1] == main_draws(1)[1]  # as Lightning and accelerate: one model init
    report, rank1 = main_draws(1, per_rank=True)
    assert (report.seed, report.base_seed, report.rank) == (43, 42, 1)
    assert report.summary().startswith("seed 43 (42 + rank 1): ")
    assert report.command() == "%seed_all 43"  # what this process was seeded with
    assert rank1 != main_draws(0, per_rank=True)[1]
    assert rank1 == main_draws(1, per_rank=True)[1]
    assert main_draws(0, per_rank=True)[1] == main_draws(0)[1]  # rank 0: the seed itself


def test_the_seed_is_carried_to_spawned_processes(monkeypatch):
    import os
    import subprocess
    import sys
    from pathlib import Path

    monkeypatch.setenv("RANK", "1")
    seed_all(21)
    assert os.environ["COLAB_GPU_GUARD_SEED"] == "21"
    expected = torch.randint(0, 10**6, (4,), generator=dataloader_generator()).tolist()
    code = (
        "import torch\n"
        "from colab_gpu_guard import dataloader_generator\n"
        "from colab_gpu_guard.seeding import last_seed\n"
        "g = dataloader_generator()\n"  # no seed_all in this process
        "print(last_seed(), torch.randint(0, 10**6, (4,), generator=g).tolist())\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root)),
        capture_output=True,
        text=True,
        check=True,
    )
    # the child was not seeded (last_seed None), but derives the same rank-1 generator
    assert done.stdout.split(None, 1) == ["None", f"{expected}\n"]


def test_workers_that_do_not_inherit_the_environment_differ_per_rank_too(monkeypatch):
    """A worker from a fork server (as a spawned one) does not see RANK as it is set now:
    the rank reaches it with seed_worker."""

    def started_apart(rank: int) -> list:
        monkeypatch.setenv("RANK", str(rank))
        seed_all(42)
        loader = worker_loader(seed_worker)
        return [row[3] for batch in loader for row in batch.tolist()]

    assert not set(started_apart(0)) & set(started_apart(1))


def _gloo_rank(rank: int, port: int, folder: str) -> None:
    """One rank of a two-process gloo job started by torch.multiprocessing.spawn: no RANK
    in the environment, the rank only in the process group (as with mp.spawn and
    init_process_group(rank=...)); its workers are spawned too."""
    import json
    import os

    import torch.distributed as dist

    os.environ.pop("RANK", None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        seed_all(7)
        main = [torch.rand(2).tolist(), random.random(), float(np.random.rand())]
        # one worker a rank (a spawned interpreter imports torch: 3 s): rank 1's repeating
        # rank 0's draws is worker 0's on each
        loader = worker_loader(seed_worker, start="spawn", workers=1)
        rows = [row for batch in loader for row in batch.tolist()]
        with open(os.path.join(folder, f"rank{rank}.json"), "w") as handle:
            json.dump({"main": main, "rows": rows}, handle)
    finally:
        dist.destroy_process_group()


def test_spawned_workers_of_a_process_group_differ_per_rank(monkeypatch, tmp_path):
    """torch.distributed ranks whose DataLoader workers are spawned: a worker has no
    process group, so seed_worker carries its parent's rank there (it read rank 0 in every
    worker, repeating rank 0's draws on rank 1)."""
    import json
    import socket

    import torch.multiprocessing as mp

    if not torch.distributed.is_available():
        pytest.skip("this torch has no torch.distributed")
    monkeypatch.delenv("RANK", raising=False)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    mp.spawn(_gloo_rank, args=(port, str(tmp_path)), nprocs=2)
    rank0, rank1 = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert rank0["main"] == rank1["main"]  # main-process seeds equal across ranks
    for stream in (1, 2, 3):  # random, NumPy, torch in the workers
        assert not {row[stream] for row in rank0["rows"]} & {row[stream] for row in rank1["rows"]}


def test_seed_worker_takes_the_rank_with_it_when_pickled(monkeypatch):
    import pickle

    monkeypatch.setenv("RANK", "3")
    sent = pickle.loads(pickle.dumps(seed_worker))
    monkeypatch.setenv("RANK", "0")  # a spawned worker's own environment says nothing
    assert repr(sent) == "<colab_gpu_guard.seed_worker (rank 3)>"
    seed_all(1)
    sent(0)
    there = torch.rand(3).tolist()
    monkeypatch.setenv("RANK", "3")
    seed_all(1)
    seed_worker(0)
    assert torch.rand(3).tolist() == there
