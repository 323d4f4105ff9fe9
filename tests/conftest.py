"""Shared fixtures: a real IPython shell with the extension loaded, and the gpu and cpu_only
markers."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def _torch_has_cuda() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.version.cuda is not None


def pytest_collection_modifyitems(config, items):
    if _cuda_available():
        skip_cpu = pytest.mark.skip(reason="describes a CPU-only machine (this one has CUDA)")
        for item in items:
            if "cpu_only" in item.keywords:
                item.add_marker(skip_cpu)
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (none here)")
    cuda_build = _torch_has_cuda()
    skip_build = pytest.mark.skip(reason="describes a CPU-only torch build (this torch has CUDA)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
        elif cuda_build and "cpu_only" in item.keywords:
            item.add_marker(skip_build)


def global_shell():
    """IPython's real global test shell (an InteractiveShell), started once per process."""
    import IPython
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or IPython.get_ipython()


@pytest.fixture(autouse=True, scope="session")
def _shell_running():
    """Tests run as in a notebook: an IPython shell runs in this process (several test
    modules start it at import; this makes a single file run the same way)."""
    global_shell()


def flush_output_history(shell) -> None:
    """``%reset -f out``, then what it forgets: IPython's flush clears ``_``/``__``/``___``
    in ``user_ns`` but not in ``user_ns_hidden``, and from then on the display hook takes
    them for user-assigned and stops updating them (later tests rely on ``_``)."""
    shell.run_line_magic("reset", "-f out")
    for name in ("_", "__", "___"):
        if name in shell.user_ns_hidden and name in shell.user_ns:
            shell.user_ns_hidden[name] = shell.user_ns[name]


@pytest.fixture
def ip():
    """The real global IPython test shell with colab_gpu_guard loaded; unloaded after."""
    shell = global_shell()
    shell.run_line_magic("load_ext", "colab_gpu_guard")
    yield shell
    shell.run_line_magic("unload_ext", "colab_gpu_guard")
    from colab_gpu_guard import seeding

    seeding.seed_all(0)  # leave deterministic mode off for the next test


@pytest.fixture
def run_cell(ip):
    """Run a cell like a notebook would (store_history=True), returning its result."""

    def run(source: str):
        return ip.run_cell(source, store_history=True)

    return run


@pytest.fixture
def world():
    """world(fake_world): NVML answers from that fake machine (tests/fake_pynvml.py) from
    now on; the test's own clean-up sets NVML back."""
    from colab_gpu_guard import nvml
    from tests import fake_pynvml

    def use(fake_world):
        nvml.set_pynvml(fake_pynvml.install(fake_world))
        return fake_world

    return use
