"""Reading this process's reproducibility record: `repro_record()`.

Nothing here creates a CUDA context or initialises CUDA: GPUs come from NVML (the driver),
or, without NVML, from torch for devices that already have a context. torch is read only
when already imported (`import_torch=True` imports it, for the command line).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from typing import Any, Optional

from .. import nvml
from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import numpy as numpy_support
from ..frameworks import tensorflow as tensorflow_support
from ..frameworks import torch as torch_support
from .hash_seed import hash_seed_at_start
from .repro import ReproRecord
from .repro_parts import (
    BACKEND_SETTINGS,
    REPRO_ENV,
    SCHEMA_VERSION,
    Cpu,
    Distributed,
    Gpu,
    Seeding,
    TorchFlags,
    Versions,
)


def repro_record(every_cell: Optional[int] = None, import_torch: bool = False) -> ReproRecord:
    """This process's reproducibility record now. `every_cell`: the per-cell base seed in
    force; None: the one %seed_all --every-cell reseeds from, if it is on."""
    from .every_cell import active_reseeder
    from .seed import last_seed

    if every_cell is None:
        reseeder = active_reseeder()
        every_cell = reseeder.base_seed if reseeder is not None else None

    torch = torch_support.loaded()
    if torch is None and import_torch and torch_support.installed():
        torch = torch_support.import_torch()
    snapshot = nvml.snapshot(processes=False)
    gpus, note = _gpus(snapshot, torch)
    return ReproRecord(
        schema_version=SCHEMA_VERSION,
        taken_at=time.time(),
        versions=_versions(torch, snapshot),
        seeding=_seeding(last_seed(), every_cell, torch),
        torch_flags=_torch_flags(torch) if torch is not None else TorchFlags(),
        env=tuple((name, os.environ.get(name)) for name in REPRO_ENV),
        gpus=gpus,
        gpu_note=note,
        distributed=_distributed(torch),
        frameworks=_frameworks(),
        platform=platform.platform(),
        cpu=_cpu(torch),
    )


def _seeding(seed: Optional[int], every_cell: Optional[int], torch: Any) -> Seeding:
    kernel_hash_seed = hash_seed_at_start().seed
    if torch is None:
        return Seeding(seed, every_cell, kernel_hash_seed=kernel_hash_seed)
    cuda = []
    devices = torch_support.devices_with_context(torch)
    for index in devices:  # a generator's seed is host memory: no device switch, no context
        cuda.append((f"cuda:{index}", int(torch.cuda.default_generators[index].initial_seed())))
    return Seeding(seed, every_cell, int(torch.initial_seed()), tuple(cuda), kernel_hash_seed)


def _cpu(torch: Any) -> Cpu:
    from .precision import cpu_low_precision

    capability = None
    bf16 = tf32 = None
    if torch is not None:
        reader = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
        capability = str(reader()) if reader is not None else None
        bf16, tf32 = cpu_low_precision(torch)
    return Cpu(_cpu_model(), capability, bf16, tf32, os.cpu_count())


def _cpu_model() -> Optional[str]:
    """The CPU's model name: /proc/cpuinfo on Linux (as torch.utils.collect_env's lscpu
    reads it), else what the platform says."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "cpu model") and value.strip():
                    return value.strip()
    except OSError:
        pass
    return platform.processor() or None


def _torch_flags(torch: Any) -> TorchFlags:
    from .determinism import read_flags
    from .precision import read_precision

    flags = read_flags(torch)
    precision = read_precision(torch)  # None where torch refuses to read a mixed setting
    return TorchFlags(
        deterministic_algorithms=flags.algorithms,
        deterministic_warn_only=flags.warn_only,
        cudnn_deterministic=flags.cudnn_deterministic,
        cudnn_benchmark=flags.cudnn_benchmark,
        matmul_allow_tf32=precision.matmul_allow_tf32,
        cudnn_allow_tf32=precision.cudnn_allow_tf32,
        float32_matmul_precision=precision.matmul_precision,
        fp32_precision=tuple((f"torch.backends.{node}", value) for node, value in precision.fp32),
        cpu_threads=_cpu_threads(torch),
        backends=_backends(torch),
    )


def _backends(torch: Any) -> tuple[tuple[str, str], ...]:
    """Each of BACKEND_SETTINGS this torch has, read (a call for the names ending in ())."""
    found = []
    for name in BACKEND_SETTINGS:
        path = name.removesuffix("()")
        owner: Any = torch
        for part in path.split(".")[1:]:
            owner = getattr(owner, part, None)
            if owner is None:
                break
        if owner is None:
            continue
        try:
            value = owner() if name.endswith("()") else owner
        except (RuntimeError, TypeError):  # torch: a setting it cannot read in this build
            continue
        found.append((name, str(getattr(value, "name", value))))
    return tuple(found)


def _cpu_threads(torch: Any) -> Optional[int]:
    try:
        return int(torch.get_num_threads())
    except Exception:  # torch: a build without get_num_threads
        return None


def _versions(torch: Any, snapshot: Any) -> Versions:
    numpy_version = numpy_support.version() if numpy_support.installed() else None
    torch_version = cuda = cudnn = None
    if torch is not None:
        torch_version = str(torch.__version__)
        cuda = torch_support.cuda_version(torch)
        try:
            found = torch.backends.cudnn.version()  # loads libcudnn; creates no context
        except Exception:  # torch: libcudnn missing or broken
            found = None
        cudnn = _cudnn_text(found) if found else None
    return Versions(
        python=platform.python_version(),
        numpy=numpy_version,
        torch=torch_version,
        cuda_runtime=cuda,
        cudnn=cudnn,
        driver=snapshot.driver_version,
        cuda_driver=snapshot.cuda_driver_version,
        triton=_installed_version("triton"),
        torchvision=_installed_version("torchvision"),
    )


def _installed_version(distribution: str) -> Optional[str]:
    """The installed version from the package's metadata (nothing is imported)."""
    module = sys.modules.get(distribution)
    version = getattr(module, "__version__", None) if module is not None else None
    if version:
        return str(version)
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as metadata_version

    try:
        return metadata_version(distribution)
    except (PackageNotFoundError, ValueError):
        return None


def _cudnn_text(version: int) -> str:
    """cuDNN's integer version as text: 8907 -> 8.9.7, 90100 -> 9.1.0."""
    if version >= 90000:
        major, rest = divmod(version, 10000)
        minor, patch = divmod(rest, 100)
    else:
        major, rest = divmod(version, 1000)
        minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def _gpus(snapshot: Any, torch: Any) -> tuple[tuple[Gpu, ...], Optional[str]]:
    if snapshot.available and snapshot.devices:
        return tuple(_gpu(d) for d in snapshot.devices), None
    devices = torch_support.devices_with_context(torch) if torch is not None else []
    if devices:  # properties are cached by torch once CUDA is up; no context is created
        gpus = []
        for index in devices:
            props = torch.cuda.get_device_properties(index)
            capability = f"{props.major}.{props.minor}"
            gpus.append(Gpu(index, props.name, capability, int(props.total_memory), "torch"))
        return tuple(gpus), None
    if not snapshot.available:
        return (), f"no GPU listed: {snapshot.error}"
    failed = snapshot.reason("devices")
    if failed is not None:
        return (), f"no GPU listed: NVML could not count the GPUs ({failed})"
    return (), "no GPU listed: NVML sees none"


def _gpu(device: Any) -> Gpu:
    """One NVML device as the record keeps it, with why its name is missing."""
    unknown = None
    if device.name is None or device.compute_capability is None:
        for field in ("device", "handle", "name", "compute_capability"):
            unknown = device.reason(field)
            if unknown is not None:
                break
    return Gpu(
        device.index,
        device.name,
        device.compute_capability,
        device.memory_total,
        lost=bool(device.lost),
        unknown=unknown,
    )


def _distributed(torch: Any) -> Distributed:
    dist = getattr(torch, "distributed", None) if torch is not None else None
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return Distributed(
                int(dist.get_world_size()),
                int(dist.get_rank()),
                _int_env("LOCAL_RANK"),
                f"torch.distributed ({dist.get_backend()})",
            )
    except Exception:  # torch.distributed: a process group torn down meanwhile
        pass
    world_size, rank = _int_env("WORLD_SIZE"), _int_env("RANK")
    if world_size is None and rank is None:
        return Distributed(local_rank=_int_env("LOCAL_RANK"))
    return Distributed(world_size or 1, rank or 0, _int_env("LOCAL_RANK"), "environment")


def _int_env(name: str) -> Optional[int]:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _frameworks() -> tuple[tuple[str, str], ...]:
    found = []
    for support in (numpy_support, torch_support, tensorflow_support, jax_support, cupy_support):
        if support.loaded() is not None:
            found.append((support.NAME, support.version()))
    for name in ("pytorch_lightning", "lightning", "accelerate", "transformers", "keras"):
        module = sys.modules.get(name)
        if module is not None:
            found.append((name, str(getattr(module, "__version__", "unknown"))))
    return tuple(found)
