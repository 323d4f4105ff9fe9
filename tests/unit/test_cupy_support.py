"""CuPy seeding and pool release touch only devices that already have a CUDA context.

No GPU (and so no CuPy) here: `FakeCupy` answers as CuPy 14 does, from its source -
``cupy.cuda.Device`` calls ``cudaSetDevice`` on entry and again on exit to restore the
previous device (cupy/cuda/device.pyx), which under CUDA 12 creates a context on a device
without one; the memory pool acts on the current device only (cupy/cuda/memory.pyx,
``MemoryPool.device_pool``); the global generators live in
``cupy.random._generator._random_states`` keyed by device, and a device without one gets
one seeded from ``CUPY_SEED`` at its first draw (cupy/random/_generator.py). The driver
query is answered from the same set of contexts. The GPU truth is in tests/gpu/test_cupy_jax.py.
"""

from __future__ import annotations

import os
import sys
import types

import pytest

from colab_gpu_guard.frameworks import cupy as cupy_support

MiB = 2**20


class FakeCupy:
    def __init__(self, contexts=(), current=0, count=2):
        self.contexts = set(contexts)  # devices with a primary context
        self.current = current
        self.count = count
        self.set_devices: list[int] = []  # every cudaSetDevice, in order
        self.pools = {index: {"total": 0, "used": 0} for index in range(count)}
        self.pinned_free_blocks = 0
        self.module = self._module()
        self.generators = self.module.random._generator._random_states

    def set_device(self, index):
        self.set_devices.append(index)
        self.contexts.add(index)  # CUDA 12: cudaSetDevice creates the primary context
        self.current = index

    def _module(self):
        fake = self
        cupy = types.ModuleType("cupy")
        runtime = types.SimpleNamespace(
            getDevice=lambda: fake.current,
            getDeviceCount=lambda: fake.count,
            setDevice=fake.set_device,
        )

        class Device:
            def __init__(self, index):
                self.index = index

            def __enter__(self):
                self.previous = fake.current
                if self.index != fake.current:
                    fake.set_device(self.index)

            def __exit__(self, *exc):
                fake.set_device(self.previous)

        class Pool:
            def _pool(self):
                return fake.pools[fake.current]

            def total_bytes(self):
                return self._pool()["total"]

            def used_bytes(self):
                return self._pool()["used"]

            def free_all_blocks(self):
                pool = self._pool()
                pool["total"] = pool["used"]

        class PinnedPool:
            def n_free_blocks(self):
                return fake.pinned_free_blocks

            def free_all_blocks(self):
                assert fake.current in fake.contexts, "cudaFreeHost without a context"
                fake.pinned_free_blocks = 0

        pool, pinned = Pool(), PinnedPool()
        cupy.cuda = types.SimpleNamespace(runtime=runtime, Device=Device)
        cupy.get_default_memory_pool = lambda: pool
        cupy.get_default_pinned_memory_pool = lambda: pinned
        generator_module = types.ModuleType("cupy.random._generator")
        generator_module._random_states = {}
        cupy.random = types.SimpleNamespace(_generator=generator_module)
        return cupy

    def add_generator(self, index):
        fake = self

        class RandomState:
            seeded_with = None
            seeded_on = None

            def seed(self, value):
                self.seeded_with, self.seeded_on = value, fake.current

        assert index in self.contexts  # a cuRAND generator needs a context
        state = self.generators[index] = RandomState()
        return state


@pytest.fixture
def fake_cupy(monkeypatch):
    def install(**kwargs):
        fake = FakeCupy(**kwargs)
        monkeypatch.setitem(sys.modules, "cupy", fake.module)
        monkeypatch.setitem(sys.modules, "cupy.random._generator", fake.module.random._generator)
        monkeypatch.setattr(
            cupy_support,
            "devices_with_context",
            lambda count=None: sorted(fake.contexts),
        )
        monkeypatch.setenv(cupy_support.SEED_VARIABLE, "")  # restored (unset) after the test
        monkeypatch.delenv(cupy_support.SEED_VARIABLE)
        return fake

    return install


def test_seed_reaches_each_generator_and_sets_cupy_seed_for_the_rest(fake_cupy):
    fake = fake_cupy(contexts={0, 1}, current=0)
    first, second = fake.add_generator(0), fake.add_generator(1)
    how = cupy_support.seed(42)
    assert (first.seeded_with, first.seeded_on) == (42, 0)
    assert (second.seeded_with, second.seeded_on) == (42, 1)  # made current to seed it
    assert fake.current == 0 and fake.contexts == {0, 1}
    assert os.environ[cupy_support.SEED_VARIABLE] == "42"
    assert "cuda:0, cuda:1" in how and "CUPY_SEED=42" in how


def test_seed_creates_no_generator_and_no_context(fake_cupy):
    fake = fake_cupy(contexts=(), current=0)
    how = cupy_support.seed(7)
    assert fake.set_devices == [] and fake.contexts == set()
    assert fake.generators == {}
    assert os.environ[cupy_support.SEED_VARIABLE] == "7"
    assert "no CuPy generator exists yet" in how


def test_seed_never_restores_to_a_device_without_a_context(fake_cupy):
    """The current device has no context (say, CUDA 11, or a context made through the
    driver): switching to the generator's device and back would create one there."""
    fake = fake_cupy(contexts={1}, current=0)
    state = fake.add_generator(1)
    cupy_support.seed(3)
    assert state.seeded_with == 3
    assert fake.set_devices == [] and fake.contexts == {1}


def test_every_cell_reseeds_cupy_the_same_way(fake_cupy):
    from colab_gpu_guard import seeding

    fake = fake_cupy(contexts={0}, current=0)
    state = fake.add_generator(0)
    seeding.reseed_loaded(11)
    assert state.seeded_with == 11 and os.environ[cupy_support.SEED_VARIABLE] == "11"
    assert fake.contexts == {0}


def test_seed_all_reports_cupy(fake_cupy):
    from colab_gpu_guard import seed_all

    fake = fake_cupy(contexts={0}, current=0)
    fake.add_generator(0)
    report = seed_all(5)
    (cupy,) = [rng for rng in report.seeded if rng.name == "CuPy"]
    assert "cupy.random.seed on cuda:0" in cupy.how


def test_release_empties_every_device_with_a_context(fake_cupy):
    fake = fake_cupy(contexts={0, 1}, current=1)
    fake.pools[0].update(total=96 * MiB, used=32 * MiB)
    fake.pools[1].update(total=8 * MiB, used=0)
    fake.pinned_free_blocks = 3
    steps = cupy_support.release_caches()
    assert fake.pools[0]["total"] == 32 * MiB and fake.pools[1]["total"] == 0
    assert fake.current == 1 and fake.contexts == {0, 1}
    assert steps == [
        "cupy memory pool on cuda:0: freed 64 MiB of unused cached memory"
        " (32 MiB still in use by arrays)",
        "cupy memory pool on cuda:1: freed 8 MiB of unused cached memory"
        " (0 B still in use by arrays)",
        "cupy pinned memory pool: 3 unused buffers freed",
    ]


def test_release_switches_to_no_device_without_a_context(fake_cupy):
    fake = fake_cupy(contexts={0}, current=0, count=3)
    fake.pools[0].update(total=4 * MiB)
    steps = cupy_support.release_caches()
    assert fake.set_devices == [] and fake.contexts == {0}
    assert steps == [
        "cupy memory pool on cuda:0: freed 4 MiB of unused cached memory"
        " (0 B still in use by arrays)"
    ]


def test_release_leaves_devices_it_cannot_reach_and_says_so(fake_cupy):
    fake = fake_cupy(contexts={1}, current=0)
    fake.pools[1].update(total=4 * MiB)
    fake.pinned_free_blocks = 2
    steps = cupy_support.release_caches()
    assert fake.set_devices == [] and fake.contexts == {1}
    assert fake.pools[1]["total"] == 4 * MiB
    assert "cuda:1: not emptied; the current device cuda:0 has no CUDA context" in steps[0]
    assert steps[1] == "cupy pinned memory pool: 2 unused buffers kept (no CUDA context current)"


def test_release_with_nothing_cached_says_so(fake_cupy):
    fake_cupy(contexts={0}, current=0)
    assert cupy_support.release_caches() == ["cupy memory pool: nothing cached on cuda:0"]


def test_driver_query_reads_the_primary_context_state(monkeypatch):
    """devices_with_context asks cuDevicePrimaryCtxGetState per device; before anything
    initialised the driver (cuDeviceGet: CUDA_ERROR_NOT_INITIALIZED) there is none."""
    active = {1}

    def get_device(device, ordinal):
        device._obj.value = ordinal
        return 0

    def get_state(device, flags, is_active):
        is_active._obj.value = int(device.value in active)
        return 0

    monkeypatch.setattr(cupy_support, "_driver", lambda: (get_device, get_state))
    assert cupy_support.devices_with_context(count=3) == [1]
    monkeypatch.setattr(cupy_support, "_driver", lambda: (lambda d, o: 3, get_state))
    assert cupy_support.devices_with_context(count=3) == []
    monkeypatch.setattr(cupy_support, "_driver", lambda: None)
    assert cupy_support.devices_with_context(count=3) is None


def test_driver_library_is_looked_up_without_raising():
    """Here there is no CUDA driver: the lookup answers None instead of raising."""
    cupy_support._driver.cache_clear()
    try:
        driver = cupy_support._driver()
    finally:
        cupy_support._driver.cache_clear()
    assert driver is None or len(driver) == 2
