"""Where the tests' DataLoader workers come from: forked from one clean server process.

Never forked from the test process: a fork copies its other threads' locks (a panel
ticker, NVML's sampler) and hung in the full suite. A worker forked from the server
starts with torch, NumPy, the package and the tests' datasets already imported, where a
spawned one imports them anew (1.7 s for two workers against 0.06 s, measured here).
Like a spawned worker, it does not inherit this process's environment as it is now: the
rank reaches it with `seed_worker`, pickled with it.
"""

from __future__ import annotations

import multiprocessing

# what the server imports once, before its first fork; a module missing here is only
# imported in each worker instead (the fork server passes over a failed import)
PRELOADED = [
    "numpy",
    "torch",
    "colab_gpu_guard",
    "tests.unit.test_workers",
    "tests.unit.test_resume",
    "tests.unit.test_rng_state",
]


def worker_context() -> multiprocessing.context.BaseContext:
    """The start method for `DataLoader(multiprocessing_context=...)`."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOADED)
    return context
