"""Whose CUDA error is it: this process's, a child process's, or another's; and what that
means for this kernel's CUDA context (only this process's own sticky error marks it broken).

Also the multiprocessing start method the forked-CUDA advice names.
"""

from __future__ import annotations

import os
from typing import Optional

from .. import cuda_health
from ..frameworks import torch as torch_support
from .diagnosis import Diagnosis

# Libraries whose CUDA errors are raised by their own CUDA call in this process.
_CUDA_FRAMEWORKS = (
    "cupy",
    "cupy_backends",
    "jax",
    "jaxlib",
    "tensorflow",
    "numba",
    "onnxruntime",
    "pycuda",
    "tensorrt",
    "cuda",  # cuda-python
    "triton",
    "cudf",
    "cuml",
    "llama_cpp",
)


def own_sticky_error(diagnosis: Diagnosis) -> bool:
    """Did this sticky error come from a CUDA call of this process? Yes when PyTorch has
    started CUDA here (its context shares the process's primary context with every other
    framework), or when a CUDA library raised it (CuPy, JAX, TensorFlow, Numba, ONNX
    Runtime, PyCUDA, ...: their own call). A plain message seen while PyTorch never started
    CUDA here came from another process, or from a CUDA library this list misses: the
    advice says both (`fixes._sticky_elsewhere`)."""
    torch = torch_support.loaded()
    if torch is not None and torch_support.cuda_initialized(torch):
        return True
    module = str(diagnosis.details.get("type", "")).split(".")[0]
    return module in _CUDA_FRAMEWORKS


def enrich_sticky(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    reason = diagnosis.error or diagnosis.details.get("cuda_error", "sticky CUDA error")
    torch = torch_support.loaded()
    if torch is None or torch_support.cuda_version(torch) is not None:
        # (a CuPy error beside a CPU-only torch is not a torch context to mark)
        cuda_health.mark_broken(reason)
        diagnosis.notes.append(
            "The CUDA context is marked broken: `%gpu_status` says so without calling into "
            "CUDA, and `%gpu_reset` skips the CUDA steps after one bounded synchronise that "
            "checks it (a synchronise that succeeds would clear the mark)."
        )
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING")
    diagnosis.facts["CUDA_LAUNCH_BLOCKING"] = repr(blocking) if blocking is not None else "unset"
    if blocking == "1":
        diagnosis.notes.append(
            "CUDA_LAUNCH_BLOCKING=1 is set, so the traceback points at the kernel that failed."
        )


def enrich_elsewhere(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    health = cuda_health.health()  # no probe: nothing here calls into CUDA
    state = {
        cuda_health.NO_TORCH: "not started (torch not imported)",
        cuda_health.NOT_INITIALISED: "not started",
    }.get(health.state, health.state)
    diagnosis.facts["this kernel's CUDA"] = state
    blocking = os.environ.get("CUDA_LAUNCH_BLOCKING")
    diagnosis.facts["CUDA_LAUNCH_BLOCKING"] = (
        repr(blocking) if blocking is not None else "unset"
    ) + " in this kernel (child processes inherit its environment)"


def default_start_method() -> str:
    """The start method multiprocessing uses when none was chosen: 'fork' on Linux up to
    Python 3.13, 'forkserver' from 3.14, 'spawn' on macOS and Windows. Read from
    ``get_all_start_methods()``, whose first entry is the default (documented so in 3.14;
    the same order before), without fixing the start method as ``get_start_method()``
    does."""
    import multiprocessing

    return multiprocessing.get_all_start_methods()[0]
