"""A torch stand-in whose CUDA has started: `synchronize` blocks until released or
raises on demand (what cuda_health, reset and status see without a GPU)."""

from __future__ import annotations

import contextlib
import threading
import types

from colab_gpu_guard import cuda_health
from colab_gpu_guard.frameworks import torch as torch_support


class FakeCuda:
    """torch.cuda as cuda_health, reset and status use it. `release` unset: synchronize
    blocks (a long kernel still running); `error`: synchronize raises it."""

    def __init__(self, count: int, contexts, bad_fork: bool) -> None:
        self.count = count
        self.contexts = set(contexts)
        self.bad_fork = bad_fork
        self.release = threading.Event()
        self.release.set()
        self.error: Exception | None = None
        self.synced: list[int] = []
        self.emptied = 0

    def is_initialized(self) -> bool:
        return not self.bad_fork  # as torch: `_initialized and not _is_in_bad_fork()`

    def _is_in_bad_fork(self) -> bool:
        return self.bad_fork

    def device_count(self) -> int:
        return self.count

    def synchronize(self, index: int) -> None:
        self.synced.append(index)
        self.release.wait(30)
        if self.error is not None:
            raise self.error

    def memory_stats(self, index: int) -> dict:
        return {
            "allocated_bytes.all.current": 0,
            "reserved_bytes.all.current": 4 << 20,
            "allocated_bytes.all.peak": 0,
            "num_ooms": 0,
        }

    def empty_cache(self) -> None:
        self.emptied += 1

    def ipc_collect(self) -> None:
        pass


def fake_cuda_torch(count: int = 1, contexts=(0,), bad_fork: bool = False):
    cuda = FakeCuda(count, contexts, bad_fork)
    return types.SimpleNamespace(
        __version__="2.3.0+cu121",
        version=types.SimpleNamespace(cuda="12.1"),
        cuda=cuda,
        _C=types.SimpleNamespace(_cuda_hasPrimaryContext=lambda index: index in cuda.contexts),
    )


@contextlib.contextmanager
def fake_torches(monkeypatch):
    """use(**kwargs) makes `fake_cuda_torch(**kwargs)` the torch colab_gpu_guard sees; on
    leaving, every synchronise is let go and has ended, and the mark is cleared."""
    made = []

    def use(**kwargs):
        stub = fake_cuda_torch(**kwargs)
        monkeypatch.setattr(torch_support, "loaded", lambda: stub)
        made.append(stub)
        return stub

    cuda_health.clear()
    try:
        yield use
    finally:
        for stub in made:
            stub.cuda.release.set()
        run = cuda_health._running
        if run is not None:
            assert run.done.wait(10)
        cuda_health.clear()
