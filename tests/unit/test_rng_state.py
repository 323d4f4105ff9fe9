"""rng_state / restore_rng_state / isolated_rng with real torch and NumPy: a resumed run draws
exactly what the uninterrupted run draws, DataLoader workers and its generator included."""

from __future__ import annotations

import pickle
import random
import subprocess
import sys
import types
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

import colab_gpu_guard  # noqa: E402
from colab_gpu_guard import seed_all  # noqa: E402
from colab_gpu_guard.seeding.rng_state import (  # noqa: E402
    GeneratorState,
    RngState,
    RngStateError,
    isolated_rng,
    restore_rng_state,
    rng_state,
)
from tests.workers import worker_context  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


class Augmented(Dataset):
    """Each item draws from torch, Python random and NumPy inside the worker."""

    def __len__(self):
        return 8

    def __getitem__(self, index):
        return torch.tensor(
            [float(index), torch.rand(()).item(), random.random(), float(np.random.rand())]
        )


def make_loader(generator) -> DataLoader:
    # workers forked from the tests' clean server process, never from this one (tests.workers)
    return DataLoader(
        Augmented(),
        batch_size=2,
        shuffle=True,
        num_workers=2,
        generator=generator,
        multiprocessing_context=worker_context(),
    )


def epoch(loader: DataLoader) -> list[list[float]]:
    """One epoch: the loader's batches, then the main process's own "training" draws."""
    rows = [row.tolist() for batch in loader for row in batch]
    rows.append(torch.randn(3).tolist() + [random.random(), float(np.random.rand())])
    return rows


def test_resumed_run_draws_what_the_uninterrupted_run_draws(tmp_path):
    seed_all(3)
    generator = torch.Generator().manual_seed(11)
    loader = make_loader(generator)
    uninterrupted = [epoch(loader) for _ in range(3)]

    seed_all(3)
    generator = torch.Generator().manual_seed(11)
    loader = make_loader(generator)
    first = epoch(loader)
    path = tmp_path / "rng.pkl"
    path.write_bytes(pickle.dumps(rng_state(generators={"loader": generator})))
    del generator, loader

    seed_all(999)  # a different session: other seeds, a fresh generator
    torch.rand(100), random.random(), np.random.rand(5)
    generator = torch.Generator().manual_seed(5)
    restore_rng_state(pickle.loads(path.read_bytes()), generators={"loader": generator})
    loader = make_loader(generator)
    resumed = [epoch(loader) for _ in range(2)]

    assert first == uninterrupted[0]
    assert resumed == uninterrupted[1:]
    # the workers really drew differently per item and per epoch (the test can fail)
    assert len({row[1] for e in uninterrupted for row in e[:-1]}) == 24


def test_state_restored_in_another_process(tmp_path):
    seed_all(4)
    generator = torch.Generator().manual_seed(8)
    torch.rand(7)
    path = tmp_path / "rng.pkl"
    path.write_bytes(pickle.dumps(rng_state([generator])))
    expected = [torch.rand(3).tolist(), torch.randperm(6, generator=generator).tolist()]
    expected += [random.random(), float(np.random.rand())]
    script = (
        "import pickle, random, sys, numpy as np, torch\n"
        "from colab_gpu_guard import restore_rng_state\n"
        "g = torch.Generator()\n"
        f"restore_rng_state(pickle.load(open({str(path)!r}, 'rb')), [g])\n"
        "print([torch.rand(3).tolist(), torch.randperm(6, generator=g).tolist(),"
        " random.random(), float(np.random.rand())])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == repr(expected)


def test_torch_cpu_state_equals_the_captured_one():
    seed_all(1)
    torch.rand(10)
    before = torch.get_rng_state().clone()
    state = rng_state()
    torch.rand(10)
    assert not torch.equal(torch.get_rng_state(), before)
    restore_rng_state(state)
    assert torch.equal(torch.get_rng_state(), before)
    assert state.torch[0].state == bytes(before.tolist())


def test_isolated_plotting_cell_leaves_training_draws_unchanged():
    seed_all(2)
    generator = torch.Generator().manual_seed(2)
    expected = [torch.randn(4).tolist(), random.random(), np.random.rand(2).tolist()]
    expected.append(torch.randperm(5, generator=generator).tolist())

    seed_all(2)
    generator = torch.Generator().manual_seed(2)
    with isolated_rng(generators={"g": generator}) as state:
        torch.rand(50), random.random(), np.random.rand(9)  # the "plotting cell"
        torch.randperm(5, generator=generator)
        assert isinstance(state, RngState)
    got = [torch.randn(4).tolist(), random.random(), np.random.rand(2).tolist()]
    got.append(torch.randperm(5, generator=generator).tolist())
    assert got == expected


def test_without_isolation_the_draws_shift():
    seed_all(2)
    expected = torch.randn(4).tolist()
    seed_all(2)
    torch.rand(50)
    assert torch.randn(4).tolist() != expected


def test_isolated_rng_restores_after_an_exception():
    seed_all(6)
    expected = random.random()
    seed_all(6)
    with pytest.raises(ZeroDivisionError), isolated_rng():
        random.random()
        raise ZeroDivisionError("inside the block")
    assert random.random() == expected


def test_str_lists_what_it_holds():
    state = rng_state({"loader": torch.Generator()})
    text = str(state)
    assert text.startswith("RngState: Python random, NumPy global RNG (MT19937), torch cpu")
    assert "generator 'loader'" in text
    assert state.to_dict()["state_bytes"]["cpu"] == torch.get_rng_state().numel()
    assert "&lt;b&gt;" in rng_state({"<b>": torch.Generator()})._repr_html_()


def test_missing_cuda_device_is_named_and_nothing_is_restored():
    seed_all(5)
    state = rng_state()
    fake = RngState(
        python=state.python,
        numpy=state.numpy,
        torch=state.torch + (GeneratorState("cuda:3", "cuda", bytes(16)),),
    )
    seed_all(6)
    before = (random.getstate(), torch.get_rng_state().clone(), np.random.get_state()[1].copy())
    with pytest.raises(RngStateError, match=r"cuda:3 was captured but this process sees \d"):
        restore_rng_state(fake)
    assert random.getstate() == before[0]
    assert torch.equal(torch.get_rng_state(), before[1])
    assert (np.random.get_state()[1] == before[2]).all()


def test_generator_names_must_match():
    generator = torch.Generator()
    state = rng_state({"loader": generator})
    with pytest.raises(RngStateError, match="generator 'loader' was captured; pass it again"):
        restore_rng_state(state)
    with pytest.raises(RngStateError, match="generator 'other' was not captured"):
        restore_rng_state(state, {"loader": generator, "other": torch.Generator()})
    two = {"loader": generator, "b": torch.Generator(), "a": torch.Generator()}
    with pytest.raises(RngStateError, match="generators 'a', 'b' were not captured"):
        restore_rng_state(state, two)
    with pytest.raises(TypeError, match="generator 'x' is a int, not a torch.Generator"):
        rng_state({"x": 3})
    with pytest.raises(TypeError, match="expected an RngState"):
        restore_rng_state("state")


def test_imported_cupy_and_tensorflow_are_listed_as_not_captured(monkeypatch):
    for name in ("cupy", "tensorflow"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    text = str(rng_state())
    assert "not captured: CuPy: CuPy does not expose" in text
    assert "not captured: TensorFlow: TensorFlow keeps" in text


def test_public_api_exports():
    assert colab_gpu_guard.rng_state is rng_state
    assert colab_gpu_guard.restore_rng_state is restore_rng_state
    assert colab_gpu_guard.isolated_rng is isolated_rng


# ---------------------------------------------------------------- NumPy bit generators


@pytest.fixture
def mt19937_after():
    """Tests that switch NumPy's global bit generator put MT19937 back after them."""
    yield
    np.random.set_bit_generator(np.random.MT19937(0))


def draws() -> list:
    return [random.random(), float(np.random.standard_normal()), torch.rand(2).tolist()]


@pytest.mark.parametrize("kind", ["PCG64", "PCG64DXSM", "Philox", "SFC64", "MT19937"])
def test_every_numpy_bit_generator_is_captured_and_restored(kind, mt19937_after, recwarn):
    np.random.set_bit_generator(getattr(np.random, kind)(5))
    np.random.standard_normal()  # a cached Gaussian in the state
    state = rng_state()
    assert state.numpy.bit_generator == kind
    expected = draws()
    pickled = pickle.loads(pickle.dumps(state))
    np.random.rand(7), random.random(), torch.rand(3)
    restore_rng_state(pickled)
    assert draws() == expected
    assert [w for w in recwarn if "numpy" in str(w.filename)] == []  # no stray NumPy warning


def test_a_state_from_another_bit_generator_reinstalls_it(mt19937_after):
    np.random.set_bit_generator(np.random.PCG64(5))
    state = rng_state()
    expected = draws()
    np.random.seed(3)  # back on ... the same PCG64: seed() reseeds the bit generator in use
    np.random.set_bit_generator(np.random.MT19937(1))
    restore_rng_state(state)
    assert type(np.random.get_bit_generator()).__name__ == "PCG64"
    assert draws() == expected


def test_old_numpy_without_set_bit_generator_fails_cleanly(mt19937_after, monkeypatch):
    np.random.set_bit_generator(np.random.PCG64(5))
    state = rng_state()
    np.random.set_bit_generator(np.random.MT19937(1))
    monkeypatch.delattr(np.random, "set_bit_generator")  # as NumPy before 1.25
    before = (random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state())
    with pytest.raises(RngStateError, match="NumPy global RNG: captured on PCG64") as caught:
        restore_rng_state(state)
    assert caught.value.streams == ("NumPy global RNG",)
    assert "needs NumPy 1.25 or later" in str(caught.value)
    assert random.getstate() == before[0]
    assert np.random.get_state(legacy=False)["state"]["key"].tolist() == (
        before[1]["state"]["key"].tolist()
    )
    assert torch.equal(torch.get_rng_state(), before[2])


def _broken(state: RngState, **changes) -> RngState:
    import dataclasses

    return dataclasses.replace(state, **changes)


@pytest.mark.parametrize(
    "stream, change",
    [
        ("Python random", lambda s: _broken(s, python=(3, (1, 2), None))),
        (
            "NumPy global RNG",
            lambda s: _broken(
                s, numpy=type(s.numpy)("MT19937", {**s.numpy.state, "state": {"key": (1,)}})
            ),
        ),
        ("NumPy global RNG", lambda s: _broken(s, numpy=type(s.numpy)("NoSuch", {}))),
        ("torch cpu", lambda s: _broken(s, torch=(GeneratorState("cpu", "cpu", bytes(3)),))),
    ],
)
def test_a_bad_stream_is_named_and_nothing_is_restored(stream, change):
    seed_all(5)
    bad = change(rng_state())
    seed_all(6)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    with pytest.raises(RngStateError, match="nothing was restored") as caught:
        restore_rng_state(bad)
    assert caught.value.streams == (stream,)
    assert f"): {stream}" in str(caught.value) or f"; {stream}" in str(caught.value)
    assert random.getstate() == before[0]
    assert (np.random.get_state()[1] == before[1]).all()
    assert torch.equal(torch.get_rng_state(), before[2])


def test_a_late_failure_puts_back_what_was_already_restored(mt19937_after, monkeypatch):
    seed_all(5)
    np.random.set_bit_generator(np.random.PCG64(5))
    state = rng_state()
    seed_all(6)
    np.random.set_bit_generator(np.random.MT19937(2))  # the restore reinstalls PCG64 first
    original = np.random.get_bit_generator()
    before = (random.getstate(), np.random.get_state(legacy=False), torch.get_rng_state())

    def fails(tensor):  # the last step fails after Python and NumPy were restored
        raise RuntimeError("torch refused the state")

    monkeypatch.setattr(torch, "set_rng_state", fails)
    with pytest.raises(RngStateError, match="cannot restore torch cpu: torch refused") as caught:
        restore_rng_state(state)
    assert caught.value.streams == ("torch cpu",)
    assert random.getstate() == before[0]
    assert np.random.get_bit_generator() is original  # the user's object, not a copy
    assert np.random.get_state(legacy=False)["state"]["key"].tolist() == (
        before[1]["state"]["key"].tolist()
    )
    assert torch.equal(torch.get_rng_state(), before[2])


def test_numpy_generators_are_captured_by_name():
    rng = np.random.default_rng(0)
    philox = np.random.Generator(np.random.Philox(1))
    loader = torch.Generator().manual_seed(3)
    held = {"rng": rng, "philox": philox, "loader": loader}
    state = rng_state(held)
    assert "NumPy generator 'rng' (PCG64)" in str(state)
    expected = [rng.random(3).tolist(), philox.integers(100, size=4).tolist()]
    expected.append(torch.randperm(5, generator=loader).tolist())
    restore_rng_state(pickle.loads(pickle.dumps(state)), held)
    got = [rng.random(3).tolist(), philox.integers(100, size=4).tolist()]
    got.append(torch.randperm(5, generator=loader).tolist())
    assert got == expected
    with pytest.raises(RngStateError, match="captured on PCG64, the one given runs Philox"):
        restore_rng_state(state, {"rng": philox, "philox": philox, "loader": loader})
    with pytest.raises(RngStateError, match="was a cpu torch.Generator, the one given is a NumPy"):
        restore_rng_state(state, {"rng": rng, "philox": philox, "loader": rng})


def test_generators_held_in_variables_and_not_passed_are_listed(monkeypatch):
    main = types.ModuleType("__main__")
    main.rng = np.random.default_rng(0)
    main.g = torch.Generator()
    main._hidden = np.random.default_rng(1)
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # outside a notebook: __main__
    state = rng_state({"g": main.g})
    assert state.not_captured == (
        (
            "'rng'",
            "a NumPy Generator in your variables: pass generators={'rng': rng} to capture it",
        ),
    )


@pytest.mark.gpu
def test_cuda_generators_are_saved_and_restored_per_device():
    seed_all(9)
    count = torch.cuda.device_count()
    for index in range(count):
        torch.rand(5, device=f"cuda:{index}")  # a context on every device
    state = rng_state()
    assert [g.name for g in state.torch if g.device == "cuda"] == [
        f"cuda:{i}" for i in range(count)
    ]
    expected = [torch.rand(4, device=f"cuda:{i}").tolist() for i in range(count)]
    restore_rng_state(state)
    for index in range(count):
        assert torch.cuda.get_rng_state(index).tolist() == list(state.torch[1 + index].state)
    assert [torch.rand(4, device=f"cuda:{i}").tolist() for i in range(count)] == expected
