"""Which CUDA devices this process has a context on: only those are ever visited."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from colab_gpu_guard.frameworks import torch as torch_support
from tests.child import run_python

ROOT = Path(__file__).resolve().parents[2]


def test_no_context_without_cuda_started():
    torch = pytest.importorskip("torch")
    if torch_support.cuda_initialized(torch):
        pytest.skip("CUDA already started in this process")
    assert torch_support.devices_with_context(torch) == []
    assert not torch_support.cuda_initialized(torch)  # asking started nothing


@pytest.mark.gpu
def test_gpu_context_only_where_a_tensor_was_made():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    body = textwrap.dedent(
        """
        import torch
        from colab_gpu_guard.frameworks import torch as torch_support
        torch.zeros(1, device="cuda:0")
        print(torch_support.devices_with_context(torch), torch.cuda.device_count())
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", body], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    devices, count = done.stdout.split("]")
    assert devices.strip() == "[0"
    assert int(count) >= 1


# ---------------------------------------------------------------- torch: seeding and caches
# No CUDA here: torch's CUDA entry points are replaced by stand-ins that record what they are
# asked, with CPU generators in place of the devices' generators (a CUDA generator's seed is
# host-side state too). Which device has a context is the only input.


class FakeCuda:
    """What torch.cuda would answer on a two-GPU machine with contexts on `contexts`."""

    def __init__(self, monkeypatch, torch, contexts, current=0, count=2):
        self.contexts = set(contexts)
        self.current = current
        self.entered: list[int] = []
        self.emptied = self.collected = 0
        self.generators = tuple(torch.Generator() for _ in range(count))
        cuda = torch.cuda
        monkeypatch.setattr(torch.version, "cuda", "12.8")
        monkeypatch.setattr(cuda, "is_initialized", lambda: True)
        monkeypatch.setattr(cuda, "device_count", lambda: count)
        monkeypatch.setattr(cuda.random, "device_count", lambda: count)  # manual_seed_all's
        monkeypatch.setattr(cuda, "current_device", lambda: self.current)
        monkeypatch.setattr(cuda, "default_generators", self.generators)
        monkeypatch.setattr(cuda, "device", self.device)
        monkeypatch.setattr(cuda, "empty_cache", self.empty_cache)
        monkeypatch.setattr(cuda, "ipc_collect", self.ipc_collect)
        monkeypatch.setattr(
            torch._C, "_cuda_hasPrimaryContext", self.contexts.__contains__, raising=False
        )

    def device(self, index):
        fake = self

        class Device:
            def __enter__(self):
                assert index in fake.contexts, "made a device without a context current"
                fake.entered.append(index)
                fake.previous, fake.current = fake.current, index

            def __exit__(self, *exc):
                fake.current = fake.previous  # MaybeExchangeDevice: creates no context

        return Device()

    def empty_cache(self):
        self.emptied += 1

    def ipc_collect(self):
        self.collected += 1


@pytest.mark.parametrize(
    "contexts, current, entered",
    [
        ({0}, 0, []),  # the usual case: the current device has a context, stay put
        ({1}, 0, [1]),  # current device without one: seed from a device that has one
        (set(), 0, []),  # no context anywhere: nothing to borrow, nothing is switched
    ],
)
def test_cuda_generators_are_all_seeded_from_a_device_with_a_context(
    monkeypatch, contexts, current, entered
):
    torch = pytest.importorskip("torch")
    fake = FakeCuda(monkeypatch, torch, contexts, current)
    torch_support.seed_cuda_generators(torch, 1234)
    assert [g.initial_seed() for g in fake.generators] == [1234, 1234]
    assert fake.entered == entered
    assert fake.current == current


def test_seed_all_reports_which_devices_use_the_seed_at_first_use(monkeypatch):
    torch = pytest.importorskip("torch")
    from colab_gpu_guard import seed_all

    fake = FakeCuda(monkeypatch, torch, contexts={0})
    report = seed_all(77)
    assert [g.initial_seed() for g in fake.generators] == [77, 77]
    (cuda,) = [rng for rng in report.seeded if rng.name.startswith("PyTorch CUDA")]
    assert "applied now (cuda:0); cuda:1 (no CUDA context yet) use the seed when first" in (
        cuda.how
    )
    assert "created" not in cuda.how

    fake.contexts.clear()
    (cuda,) = [rng for rng in seed_all(78).seeded if rng.name.startswith("PyTorch CUDA")]
    assert "no device has a CUDA context yet" in cuda.how


def test_seed_all_says_so_if_seeding_created_a_context(monkeypatch):
    """Should a torch create a context while seeding, the report says where."""
    torch = pytest.importorskip("torch")
    from colab_gpu_guard import seed_all

    fake = FakeCuda(monkeypatch, torch, contexts=set())
    generator = fake.generators[0]

    class Creating:
        def manual_seed(self, value):
            fake.contexts.add(0)
            return generator.manual_seed(value)

    monkeypatch.setattr(torch.cuda, "default_generators", (Creating(), fake.generators[1]))
    (cuda,) = [rng for rng in seed_all(5).seeded if rng.name.startswith("PyTorch CUDA")]
    assert "this torch created a CUDA context on cuda:0 while seeding" in cuda.how


def test_every_cell_reseed_switches_no_device_without_a_context(monkeypatch):
    torch = pytest.importorskip("torch")
    from colab_gpu_guard import seeding

    fake = FakeCuda(monkeypatch, torch, contexts={1}, current=0)
    seeding.reseed_loaded(4321)
    assert [g.initial_seed() for g in fake.generators] == [4321, 4321]
    assert fake.entered == [1] and fake.current == 0


def test_cache_release_names_the_devices_with_a_context(monkeypatch):
    torch = pytest.importorskip("torch")
    fake = FakeCuda(monkeypatch, torch, contexts={1})
    steps = torch_support.release_cuda_caches(torch)
    assert (fake.emptied, fake.collected) == (1, 1)
    assert steps[0] == "torch.cuda.empty_cache() (cuda:1: the devices with a CUDA context)"
    fake.contexts.clear()
    assert torch_support.release_cuda_caches(torch) == []
    assert fake.emptied == 1  # nothing cached anywhere: not called


# ---------------------------------------------------------------- GPU truth
# Each in a fresh process: which contexts exist depends on everything the process did.


def _run(body: str, env: dict | None = None) -> dict:
    """`body` in a fresh interpreter; it prints one JSON line last."""
    return run_python(body, env)


_REFERENCE_DRAW = """
    import json, torch
    from colab_gpu_guard import seed_all
    seed_all({seed})  # before CUDA starts: torch queues it for every device
    print(json.dumps(torch.rand(4, device="cuda:{device}").tolist()))
"""


@pytest.mark.gpu
def test_gpu_seeding_after_cuda_init_says_what_it_did_and_applies_at_first_use():
    """CUDA initialised but no context yet (what `torch.cuda.get_device_name()` leaves):
    seed_all seeds the generator without creating a context (or says that torch did), and
    the first draw is the draw of a process seeded before CUDA started."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    result = _run(
        """
        import json, torch
        from colab_gpu_guard import seed_all, seeding
        has_context = torch._C._cuda_hasPrimaryContext
        torch.cuda.init()
        before = has_context(0)
        report = seed_all(11)
        after_seed_all = has_context(0)
        seeding.reseed_loaded(11)  # the per-cell path, as --every-cell runs it
        after_reseed = has_context(0)
        how = [r.how for r in report.seeded if r.name.startswith("PyTorch CUDA")][0]
        draw = torch.rand(4, device="cuda:0").tolist()
        print(json.dumps(dict(before=before, after_seed_all=after_seed_all,
                              after_reseed=after_reseed, how=how, draw=draw)))
        """
    )
    if result["before"]:
        pytest.skip("this torch creates a context when CUDA initialises")
    said_created = "created a CUDA context on cuda:0" in result["how"]
    assert said_created == result["after_seed_all"], result
    assert result["after_reseed"] == result["after_seed_all"], result
    assert "no device has a CUDA context yet" in result["how"], result
    assert result["draw"] == _run(_REFERENCE_DRAW.format(seed=11, device=0))


@pytest.mark.gpu
def test_gpu_no_context_on_an_untouched_device():
    """On cuda:0 only: seeding (plain, deterministic, per cell), %gpu_reset's release and a
    probing %gpu_status leave cuda:1 without a context; cuda:1 still draws from the seed
    when the user first uses it."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices")
    result = _run(
        """
        import json, torch
        from colab_gpu_guard import gpu_reset, gpu_status, seed_all, seeding
        has_context = torch._C._cuda_hasPrimaryContext
        ns = {"x": torch.ones(1 << 20, device="cuda:0")}
        (ns["x"] @ ns["x"]).item()
        steps = {"start": has_context(1)}
        seed_all(9)
        seed_all(9, deterministic=True)
        seed_all(9)
        steps["seed_all"] = has_context(1)
        seeding.reseed_loaded(9)
        steps["reseed"] = has_context(1)
        released = gpu_reset("x", namespace=ns)
        steps["gpu_reset"] = has_context(1)
        gpu_status(leftovers=False, probe=True)
        steps["gpu_status"] = has_context(1)
        seeding.reseed_loaded(5)
        draw = torch.rand(4, device="cuda:1").tolist()
        print(json.dumps(dict(steps=steps, released=released.steps, draw=draw)))
        """
    )
    assert not any(result["steps"].values()), result
    assert any("cuda:0: the devices with a CUDA context" in s for s in result["released"])
    assert result["draw"] == _run(_REFERENCE_DRAW.format(seed=5, device=1))
