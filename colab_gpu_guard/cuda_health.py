"""Is this process's CUDA context usable?

A sticky CUDA error (device-side assert, illegal memory access, launch failure) leaves the
context unusable until the process restarts; every later CUDA call raises again. Whoever
sees such an error marks the context broken here, so that status and reset report it
instead of calling into CUDA (and risking a hang).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Optional

from .frameworks import torch as torch_support

RESTART_ADVICE = (
    "the CUDA context of this process is unusable; restart the runtime "
    "(Colab: Runtime > Restart session; Jupyter: Kernel > Restart)"
)


@dataclass(frozen=True)
class ContextHealth:
    state: str  # "ok", "not initialised", "no torch", "broken"
    detail: str = ""

    @property
    def broken(self) -> bool:
        return self.state == "broken"


_broken_reason: Optional[str] = None


def mark_broken(reason: str) -> None:
    global _broken_reason
    _broken_reason = reason


def broken_reason() -> Optional[str]:
    return _broken_reason


def clear() -> None:
    """Forget a recorded breakage (for tests; a real broken context never heals)."""
    global _broken_reason
    _broken_reason = None


def health(probe: bool = False, timeout: float = 2.0) -> ContextHealth:
    """The context's state. With `probe`, synchronise (bounded by `timeout`) to find out."""
    if _broken_reason is not None:
        return ContextHealth("broken", _broken_reason)
    torch = torch_support.loaded()
    if torch is None:
        return ContextHealth("no torch")
    if not torch_support.cuda_initialized(torch):
        return ContextHealth("not initialised")
    if probe:
        error = synchronize_all(torch, timeout)
        if error is not None:
            return ContextHealth("broken", error)
    return ContextHealth("ok")


def synchronize_all(torch, timeout: float = 2.0) -> Optional[str]:
    """Synchronise every device in a helper thread; return the error text (and mark the
    context broken) if it raised or did not finish within `timeout` seconds."""
    outcome: list[Optional[str]] = []

    def run() -> None:
        try:
            for index in range(torch_support.cuda_device_count(torch)):
                torch.cuda.synchronize(index)
            outcome.append(None)
        except Exception as error:  # torch.AcceleratorError / RuntimeError
            outcome.append(f"{type(error).__name__}: {error}".strip())

    worker = threading.Thread(target=run, name="colab_gpu_guard-sync", daemon=True)
    worker.start()
    worker.join(timeout)
    if not outcome:
        reason = f"torch.cuda.synchronize() did not return within {timeout:g} s"
    else:
        reason = outcome[0]
    if reason is not None:
        mark_broken(reason)
    return reason
