"""Is this process's CUDA context usable, busy or broken? A synchronise that outlasts its
timeout means busy, never broken; only a CUDA error of this process's own call marks the
context broken (`mark_broken`), and a later passing synchronise clears the mark."""

from __future__ import annotations

import os
import threading
import time
from typing import Any, NamedTuple, Optional

from .frameworks import torch as torch_support

OK = "ok"
BUSY = "busy"
BROKEN = "broken"
FORKED = "forked"
NOT_INITIALISED = "not initialised"
NO_TORCH = "torch not imported"

RESTART_ADVICE = (
    "the CUDA context of this process is unusable; restart the runtime "
    "(Colab: Runtime > Restart session; Jupyter: Kernel > Restart)"
)
FORKED_DETAIL = (
    "this process was forked from one that had already started CUDA; CUDA cannot be used "
    "here (torch raises 'Cannot re-initialize CUDA in forked subprocess'), and the GPU "
    "memory belongs to the parent process"
)


class ContextHealth(NamedTuple):
    state: str  # ok, busy, broken, forked, not initialised, no torch
    detail: str = ""

    @property
    def broken(self) -> bool:
        return self.state == BROKEN

    @property
    def busy(self) -> bool:
        return self.state == BUSY


# ---------------------------------------------------------------- the broken mark

# CUDA work is asynchronous: a cell can end with seconds of kernels still queued, so a
# synchronise that outlasts its timeout means *busy* (the queued work is still running).
# Only a CUDA error raised by this process's own CUDA call (device-side assert, illegal
# memory access, launch failure) leaves the context unusable until the process restarts;
# whoever sees one marks it here, so that status and reset report it. A really broken
# context cannot pass a synchronise, so a probe that passes proves a mark wrong.

_broken_reason: Optional[str] = None


def mark_broken(reason: str) -> None:
    """Record a sticky CUDA error raised by this process's own CUDA call. An error seen in
    a child process's exception, or while this process never started CUDA, is not one
    (the advisor decides; see advisor/enrich.py)."""
    global _broken_reason
    _broken_reason = reason


def broken_reason() -> Optional[str]:
    return _broken_reason


def clear() -> None:
    """Forget a recorded breakage (a successful probe does this; tests too)."""
    global _broken_reason
    _broken_reason = None


# ---------------------------------------------------------------- synchronising

# Only the devices this process already has a context on are synchronised
# (``frameworks.torch.devices_with_context``): selecting another would create a context
# there. One synchronise runs at a time, in a daemon thread; a probe while it still runs
# waits on that one instead of starting another.


class _Sync:
    """One ``torch.cuda.synchronize`` of each device with a context, in a daemon thread."""

    def __init__(self, torch: Any, devices: list[int]) -> None:
        self.devices = devices
        self.started = time.monotonic()
        self.error: Optional[str] = None
        self.done = threading.Event()
        self.thread = threading.Thread(
            target=self._run, args=(torch,), name="colab_gpu_guard-sync", daemon=True
        )

    def _run(self, torch: Any) -> None:
        try:
            for index in self.devices:
                torch.cuda.synchronize(index)
        except Exception as error:  # torch: AcceleratorError / RuntimeError of the synchronise
            self.error = f"{type(error).__name__}: {error}".strip()
            mark_broken(self.error)
        finally:
            self.done.set()

    def devices_text(self) -> str:
        return ", ".join(f"cuda:{index}" for index in self.devices) or "no device"

    def busy_detail(self) -> str:
        waited = time.monotonic() - self.started
        return (
            f"torch.cuda.synchronize() on {self.devices_text()} has not returned after "
            f"{waited:.1f} s"
        )


_lock = threading.Lock()
_running: Optional[_Sync] = None


def _forget_after_fork() -> None:
    global _lock, _running
    _lock = threading.Lock()  # a lock held by another thread at fork time stays held
    _running = None  # the thread did not come along


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_after_fork)


def _sync_in_progress() -> Optional[_Sync]:
    run = _running
    return run if run is not None and not run.done.is_set() else None


def synchronize(torch: Any, timeout: float) -> ContextHealth:
    """Synchronise the devices this process has a context on, waiting at most `timeout`
    seconds: ok, busy (still running when the time was up; the same synchronise goes on,
    and the next call waits on it instead of starting another) or broken (it raised: a
    sticky error of this process, marked)."""
    global _running
    with _lock:
        run = _sync_in_progress()
        if run is None:
            run = _running = _Sync(torch, torch_support.devices_with_context(torch))
            run.thread.start()
    if not run.done.wait(timeout):
        return ContextHealth(BUSY, run.busy_detail())
    if run.error is not None:
        return ContextHealth(BROKEN, run.error)
    return ContextHealth(OK)


def synchronized_devices() -> str:
    """'cuda:0, cuda:1': the devices the last synchronise visited."""
    run = _running
    return run.devices_text() if run is not None else "no device"


# ---------------------------------------------------------------- the state


def _in_bad_fork(torch: Any) -> bool:
    try:
        return torch_support.cuda_in_bad_fork(torch)
    except Exception:  # torch: a build without the fork check
        return False


def health(probe: bool = False, timeout: float = 2.0) -> ContextHealth:
    """The context's state. With `probe`, synchronise (bounded by `timeout`) to find out,
    which also clears a broken mark the context proves wrong."""
    torch = torch_support.loaded()
    if torch is not None and _in_bad_fork(torch):
        return ContextHealth(FORKED, FORKED_DETAIL)
    initialised = torch is not None and torch_support.cuda_initialized(torch)
    reason = _broken_reason
    if reason is not None:
        if not (probe and initialised):
            return ContextHealth(BROKEN, reason)
        found = synchronize(torch, timeout)
        if found.state == OK:
            clear()
            return found
        return found if found.broken else ContextHealth(BROKEN, reason)
    if torch is None:
        return ContextHealth(NO_TORCH)
    if not initialised:
        return ContextHealth(NOT_INITIALISED)
    if probe:
        return synchronize(torch, timeout)
    run = _sync_in_progress()
    if run is not None:
        return ContextHealth(BUSY, run.busy_detail())
    return ContextHealth(OK)
