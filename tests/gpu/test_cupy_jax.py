"""CuPy and JAX on a real GPU: seeding, leftovers and cache release (each skipped where
the framework is not installed or has no GPU). JAX runs in a fresh interpreter with
``XLA_PYTHON_CLIENT_PREALLOCATE=false`` (set before JAX is imported), so it takes memory
as it needs it rather than 75% of the GPU at start."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from colab_gpu_guard.frameworks import cupy as cupy_support
from tests.child import run_python

ROOT = Path(__file__).resolve().parents[2]
MiB = 2**20

pytestmark = pytest.mark.gpu


def run(body: str, **env_changes: str) -> dict:
    env = dict(os.environ, **env_changes)
    env.pop(cupy_support.SEED_VARIABLE, None)
    return run_python(body, env)


# ---------------------------------------------------------------- CuPy


@pytest.fixture
def cupy(monkeypatch):
    cupy = pytest.importorskip("cupy")
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("CuPy sees no CUDA device")
    except Exception as error:  # CUDARuntimeError: no driver or device
        pytest.skip(f"CuPy cannot use CUDA: {error}")
    monkeypatch.setenv(cupy_support.SEED_VARIABLE, "")  # seed_all sets it; restored after
    monkeypatch.delenv(cupy_support.SEED_VARIABLE)
    return cupy


def test_gpu_cupy_draws_repeat_after_seed_all(cupy):
    from colab_gpu_guard import seed_all

    seed_all(7)
    first = cupy.random.rand(16).get().tolist()
    seed_all(7)
    again = cupy.random.rand(16).get().tolist()
    cupy.random.seed(7)
    by_hand = cupy.random.rand(16).get().tolist()
    assert first == again == by_hand
    assert cupy_support.devices_with_context() is not None  # the driver query works here
    assert int(cupy.cuda.runtime.getDevice()) in cupy_support.devices_with_context()


def test_gpu_cupy_seed_before_first_use_creates_nothing_and_takes_effect():
    """A fresh process: seed_all before CuPy drew anything creates no generator and no
    context; the first draw (its generator seeded from CUPY_SEED) is cupy.random.seed's."""
    pytest.importorskip("cupy")
    result = run(
        """
        import json, cupy
        from colab_gpu_guard import seed_all
        from colab_gpu_guard.frameworks import cupy as cupy_support
        before = cupy_support.devices_with_context()
        report = seed_all(21)
        after = cupy_support.devices_with_context()
        how = [r.how for r in report.seeded if r.name == "CuPy"][0]
        first = cupy.random.rand(8).get().tolist()
        cupy.random.seed(21)
        print(json.dumps(dict(before=before, after=after, how=how, first=first,
                              by_hand=cupy.random.rand(8).get().tolist())))
        """
    )
    assert result["after"] == result["before"], result
    assert "no CuPy generator exists yet" in result["how"]
    assert result["first"] == result["by_hand"]


def test_gpu_cupy_arrays_are_found_as_leftovers(cupy):
    from colab_gpu_guard import find_leftovers

    namespace = {"buffer": cupy.ones(MiB, dtype=cupy.float32)}
    found = [item for item in find_leftovers(namespace=namespace) if item.name == "buffer"]
    assert len(found) == 1
    (item,) = found
    assert item.framework == "cupy" and item.device == f"cuda:{namespace['buffer'].device.id}"
    assert item.nbytes >= 4 * MiB and item.array_nbytes == 4 * MiB


def test_gpu_cupy_pool_is_released_by_gpu_reset(cupy):
    from colab_gpu_guard import gpu_reset

    pool = cupy.get_default_memory_pool()
    pool.free_all_blocks()
    namespace = {"buffer": cupy.ones(16 * MiB, dtype=cupy.float32)}  # 64 MiB
    used, total = pool.used_bytes(), pool.total_bytes()
    assert used >= 64 * MiB
    report = gpu_reset("buffer", namespace=namespace)
    assert "buffer" not in namespace
    assert pool.used_bytes() <= used - 64 * MiB
    assert pool.total_bytes() <= total - 64 * MiB  # returned to the driver, not just cached
    device = int(cupy.cuda.runtime.getDevice())
    assert any(
        step.startswith(f"cupy memory pool on cuda:{device}: freed") for step in report.steps
    ), report.steps


# ---------------------------------------------------------------- JAX


def test_gpu_jax_key_and_clear_caches_without_preallocation():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed")
    result = run(
        """
        import json, os
        import jax, jax.numpy as jnp
        if jax.default_backend() != "gpu":
            print(json.dumps(dict(skip=f"JAX runs on {jax.default_backend()}")))
            raise SystemExit
        from colab_gpu_guard import find_leftovers, gpu_reset, jax_key, seed_all
        seed_all(3)
        ours = jax.random.normal(jax_key(), (4,)).tolist()
        reference = jax.random.normal(jax.random.key(3), (4,)).tolist()
        double = jax.jit(lambda x: x * 2)
        double(jnp.ones(4)).block_until_ready()
        namespace = {"x": jnp.ones(1 << 20, dtype=jnp.float32)}
        found = [item.name for item in find_leftovers(namespace=namespace)]
        stats = jax.devices()[0].memory_stats() or {}
        report = gpu_reset("x", namespace=namespace)
        stats_after = jax.devices()[0].memory_stats() or {}
        again = double(jnp.ones(4)).tolist()  # compiles again after clear_caches
        print(json.dumps(dict(
            ours=ours, reference=reference, again=again, found=found, steps=report.steps,
            in_use=stats.get("bytes_in_use"), in_use_after=stats_after.get("bytes_in_use"),
            preallocate=os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"))))
        """,
        XLA_PYTHON_CLIENT_PREALLOCATE="false",
    )
    if "skip" in result:
        pytest.skip(result["skip"])
    assert result["preallocate"] == "false"
    assert result["ours"] == result["reference"]
    assert "x" in result["found"]
    assert "jax.clear_caches()" in result["steps"]
    assert result["again"] == [2.0] * 4
    if result["in_use"] is not None and result["in_use_after"] is not None:
        assert result["in_use_after"] <= result["in_use"] - 4 * MiB, result
