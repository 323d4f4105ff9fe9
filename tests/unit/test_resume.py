"""Exact mid-epoch DataLoader resume with real torch and NumPy: an epoch interrupted after
any batch and resumed in a "new session" yields the batches, worker augmentations and
main-process draws the uninterrupted epoch had."""

from __future__ import annotations

import pickle
import random

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

from colab_gpu_guard import ResumableEpoch, seed_all, seed_worker  # noqa: E402
from tests.workers import worker_context  # noqa: E402


class Augmented(Dataset):
    """Each item draws its 'augmentation' from torch, Python random and NumPy."""

    def __len__(self) -> int:
        return 12

    def __getitem__(self, index: int):
        return torch.tensor(
            [float(index), torch.rand(()).item(), random.random(), float(np.random.rand())]
        )


def make_loader(workers: int, with_generator: bool):
    generator = torch.Generator().manual_seed(11) if with_generator else None
    loader = DataLoader(
        Augmented(),
        batch_size=2,
        shuffle=True,
        num_workers=workers,
        worker_init_fn=seed_worker if workers else None,
        generator=generator,
        # forked from the tests' clean server process, never from this one (tests.workers)
        multiprocessing_context=worker_context() if workers else None,
    )
    return loader, ({"loader": generator} if with_generator else None)


def step(batch) -> list:
    """A training step's own draws (dropout, noise) after its batch."""
    return batch.tolist() + [torch.randn(2).tolist(), random.random(), float(np.random.rand())]


@pytest.mark.parametrize("workers, with_generator", [(2, True), (0, True), (2, False)])
def test_an_epoch_resumed_mid_way_goes_on_exactly(workers, with_generator):
    seed_all(3)
    loader, generators = make_loader(workers, with_generator)
    uninterrupted = [step(batch) for batch in ResumableEpoch(loader, generators)]
    after = [torch.rand(2).tolist(), random.random()]  # the next epoch's first draws

    seed_all(3)
    loader, generators = make_loader(workers, with_generator)
    epoch = ResumableEpoch(loader, generators)
    done = []
    for batch in epoch:
        done.append(step(batch))
        if len(done) == 4:
            saved = pickle.dumps(epoch.checkpoint())
            break
    assert done == uninterrupted[:4]

    seed_all(999)  # a new session: other seeds, draws made, a fresh loader
    torch.rand(50), random.random(), np.random.rand(3)
    loader, generators = make_loader(workers, with_generator)
    resumed = ResumableEpoch(loader, generators, resume=pickle.loads(saved))
    rest = [step(batch) for batch in resumed]
    assert rest == uninterrupted[4:]
    assert resumed.batches_done == len(uninterrupted) == 6
    assert [torch.rand(2).tolist(), random.random()] == after
    # the test can fail: items and augmentations really differ along the epoch
    assert len({row[1] for b in uninterrupted for row in b[:2]}) == 12


def test_without_it_a_new_iterator_draws_another_permutation():
    seed_all(3)
    loader, _ = make_loader(0, False)
    first = [batch[:, 0].tolist() for batch in loader]
    seed_all(3)
    state_mid = None
    for index, _batch in enumerate(loader):
        if index == 2:
            from colab_gpu_guard import restore_rng_state, rng_state

            state_mid = rng_state()
            break
    restore_rng_state(state_mid)
    again = [batch[:, 0].tolist() for batch in loader]
    assert again[:3] != first[3:6]  # restoring a mid-epoch state starts another epoch


def test_bad_use_says_what_is_expected():
    loader, _ = make_loader(0, False)
    with pytest.raises(TypeError, match="resume must be an EpochCheckpoint"):
        ResumableEpoch(loader, resume={"batches_done": 3})
    epoch = ResumableEpoch(loader)
    list(epoch)
    with pytest.raises(RuntimeError, match="make a new one for the next"):
        list(epoch)
    assert str(epoch.checkpoint()) == "EpochCheckpoint: 6 batches done"


def three_epochs(loader, stop_at=None, resume=None) -> tuple[list, object]:
    """Epochs 1-3 of `loader` (from epoch 2 when resuming): rows and steps per epoch; with
    stop_at, pickles a checkpoint after that many batches of epoch 2 and stops."""
    epochs = []
    if resume is not None:
        epochs.append([step(batch) for batch in ResumableEpoch(loader, resume=resume)])
    for number in range(len(epochs) + 2 if resume is not None else 1, 4):
        epoch, rows = ResumableEpoch(loader), []
        for batch in epoch:
            rows.append(step(batch))
            if number == 2 and epoch.batches_done == stop_at:
                return epochs + [rows], pickle.dumps(epoch.checkpoint())
        epochs.append(rows)
    return epochs, None


@pytest.mark.parametrize("workers", [0, 2])
def test_the_loaders_own_generator_is_captured_without_being_passed(workers):
    """Interrupted in epoch 2 and resumed without naming the loader's generator= (the
    shuffle order comes from it): the rest of epoch 2 and epoch 3 as uninterrupted. It
    was not captured: the resumed epoch drew the order of a fresh generator's epoch 1."""
    seed_all(3)
    uninterrupted, _ = three_epochs(make_loader(workers, True)[0])
    seed_all(3)
    interrupted, saved = three_epochs(make_loader(workers, True)[0], stop_at=2)
    assert interrupted == [uninterrupted[0], uninterrupted[1][:2]]

    seed_all(999)  # a new session: other seeds, a fresh loader and generator
    torch.rand(50), random.random()
    resumed, _ = three_epochs(make_loader(workers, True)[0], resume=pickle.loads(saved))
    assert resumed == [uninterrupted[1][2:], uninterrupted[2]]


def test_persistent_workers_refuse_a_checkpoint_they_cannot_resume():
    """Persistent workers keep their random streams from one epoch to the next, in their
    own processes: a checkpoint after the first epoch would resume other augmentations."""
    seed_all(3)
    loader = DataLoader(
        Augmented(),
        batch_size=2,
        shuffle=True,
        num_workers=2,
        worker_init_fn=seed_worker,
        persistent_workers=True,
        multiprocessing_context=worker_context(),
    )
    first = ResumableEpoch(loader)
    batches = iter(first)
    next(batches)
    assert first.checkpoint().batches_done == 1  # the first epoch's workers start fresh
    list(batches)
    second = ResumableEpoch(loader)
    for _batch in second:
        with pytest.raises(RuntimeError, match="persistent_workers=False to checkpoint"):
            second.checkpoint()
        break
