"""CUDA error advisor: name the real cause of a CUDA error and the fix.

``classify(exc)`` (diagnosis.py) reads an exception's type and message, walking
``__cause__`` and ``__context__``, and returns a :class:`Diagnosis` built from the message
alone (recognise.py names the kind and the framework, oom_figures.py reads an out-of-memory
message's figures; fixes.py, memory_fixes.py and setup_fixes.py write the prose), or
``None`` for anything that is not a recognised GPU error (host and TPU memory included).
tests/fixtures/cuda_error_corpus.json holds the real messages it is tested against.
``advise(exc)`` (enrich.py) adds what can be learned safely from this process (leftover
tensors by name, NVML's list of GPU processes and memory; driver and build versions and
each GPU's capability: setup_facts.py; the cuBLAS or cuDNN loaded: cuda_libraries.py),
marks the CUDA context broken after a sticky error raised by this process's own CUDA call
(not one carried from a child process: see origin.py), and can release the failed call's
traceback frames after an out-of-memory error. Both work outside notebooks; the IPython
exception hook is ``colab_gpu_guard.ipython.shell_advisor``.

Nothing here imports IPython, torch or numpy.
"""

from __future__ import annotations

from .advice import RESTART_SESSION, Advice
from .diagnosis import Diagnosis, Section, classify
from .enrich import advise
from .fixes import DETERMINISTIC_ALTERNATIVES
from .kinds import (
    ATTENTION_KERNELS,
    CUBLAS_DETERMINISM,
    CUDA_DRIVER_OOM,
    DEVICE_BUSY,
    DEVICE_MISMATCH,
    DRIVER_MISMATCH,
    DRIVER_VERSIONS,
    FORKED_CUDA,
    GENERATOR_DEVICE,
    GPU_TOO_OLD,
    INVALID_DEVICE,
    KINDS,
    LATE_KERNEL_ERROR,
    LAUNCH_RESOURCES,
    LIBRARY_SETUP,
    MEMORY_IN_DISGUISE,
    MEMORY_KINDS,
    NCCL_ERROR,
    NO_GPU,
    NONDETERMINISTIC_OP,
    OUT_OF_MEMORY,
    STICKY_ERROR,
    STICKY_ERROR_ELSEWHERE,
    STREAM_CAPTURE,
    TITLES,
)
from .machine import GpuProcess, arch_supports, driver_facts, gpu_processes, torch_arch_list
from .oom_figures import parse_oom_message, parse_size
from .recognise import STICKY_ERRORS, Recognised, recognise

__all__ = [
    "ATTENTION_KERNELS",
    "CUBLAS_DETERMINISM",
    "CUDA_DRIVER_OOM",
    "DEVICE_BUSY",
    "DEVICE_MISMATCH",
    "DETERMINISTIC_ALTERNATIVES",
    "DRIVER_MISMATCH",
    "DRIVER_VERSIONS",
    "FORKED_CUDA",
    "GENERATOR_DEVICE",
    "GPU_TOO_OLD",
    "INVALID_DEVICE",
    "KINDS",
    "LATE_KERNEL_ERROR",
    "LAUNCH_RESOURCES",
    "LIBRARY_SETUP",
    "MEMORY_IN_DISGUISE",
    "MEMORY_KINDS",
    "NCCL_ERROR",
    "NONDETERMINISTIC_OP",
    "NO_GPU",
    "OUT_OF_MEMORY",
    "RESTART_SESSION",
    "STICKY_ERROR",
    "STICKY_ERROR_ELSEWHERE",
    "STICKY_ERRORS",
    "STREAM_CAPTURE",
    "TITLES",
    "Advice",
    "Diagnosis",
    "GpuProcess",
    "Recognised",
    "Section",
    "advise",
    "arch_supports",
    "classify",
    "driver_facts",
    "gpu_processes",
    "parse_oom_message",
    "parse_size",
    "recognise",
    "torch_arch_list",
]
