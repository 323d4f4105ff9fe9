"""Shared fixtures: a real IPython shell with the extension loaded, and the gpu and cpu_only
markers."""

from __future__ import annotations

import contextlib
import gc
import importlib
import importlib.util
import os
import re
import sys

import pytest

from tests.shared_shell import (
    flush_output_history,
    forget_the_traceback_sources,
    global_shell,
    open_models,
)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)


def _freeze_the_libraries() -> None:
    """The libraries the tests use, imported, and what importing them made moved out of the
    collector's way for the rest of the run (`gc.freeze`): torch alone makes 170,000 objects
    that every full collection would go over again - `gpu_reset`'s, and each test's
    `gc.collect()` before a weakref proves a release - and those collections were most of
    the suite's time (a reset test: 3 s, 2 of them collecting). What tests make (the shell,
    its namespace, every tensor, cycle and frame) is made after and collected as in a
    notebook. Frozen objects are also left out of `gc.get_objects()` and
    `gc.get_referrers()`: only libraries' import-time state is, which no test's object
    is; `tests/unit/test_frozen_libraries.py` checks the shell and what it holds stay
    visible."""
    for name in LIBRARIES:
        # one not in this environment (the minimal one has no torch) is left out
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    gc.collect()
    gc.freeze()


# what the tests import in this process, imported before the freeze: torch's inductor
# config is what `torch.use_deterministic_algorithms` imports (dynamo, sympy: 800 modules
# and 150,000 objects), at the suite's first deterministic seed otherwise
LIBRARIES = (
    "torch",
    "torch._inductor.config",
    "numpy",
    "pandas",
    "pyarrow",
    "IPython",
    "IPython.testing.globalipapp",
    "ipywidgets",
    "hypothesis",  # the property tests'
    "networkx",  # what torch.compile's tests import
)


_freeze_the_libraries()


def pytest_collection_finish(session):
    """What collecting made frozen too (the test modules and pytest's 2,800 items: 70,000
    objects, 90 ms more in every full collection). The shell is started after, by the
    first test (`tests/unit/test_frozen_libraries.py` checks it and a cell's objects are
    not frozen)."""
    gc.collect()
    gc.freeze()


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


@pytest.fixture(autouse=True, scope="session")
def _shell_running():
    """Tests run as in a notebook: an IPython shell runs in this process (several test
    modules start it at import; this makes a single file run the same way)."""
    global_shell()


@pytest.fixture(autouse=True)
def _close_the_widgets_it_opened():
    """Every widget model a test opened is closed after it: a panel `%unload_ext` stopped
    (the `ip` fixture's teardown) stays open as in a notebook, 1,000 objects that every
    later full collection of the heap would go over again."""
    before = set(open_models())
    yield
    for key, model in open_models().items():
        if key not in before:
            model.close()


@pytest.fixture(autouse=True)
def _forget_the_traceback_sources():
    """The cells' sources and syntax trees a test's tracebacks left cached, let go after it
    (`forget_the_traceback_sources`)."""
    yield
    forget_the_traceback_sources()


@pytest.fixture
def ip():
    """The real global IPython test shell with colab_gpu_guard loaded; unloaded after, and
    what the test left taken out (the names its cells made, its outputs, the last result
    and error, the configurables it added: a `Magics` made by hand joins them): the next
    test starts from the same shell, whatever the order the tests run in."""
    shell = global_shell()
    names = set(shell.user_ns)
    configurables = list(shell.configurables)
    shell.run_line_magic("load_ext", "colab_gpu_guard")
    yield shell
    shell.run_line_magic("unload_ext", "colab_gpu_guard")
    for name in [name for name in shell.user_ns if name not in names]:
        if not _ipython_name(name):
            del shell.user_ns[name]
    shell.configurables[:] = configurables
    forget_the_cells(shell)
    from colab_gpu_guard import seeding

    seeding.seed_all(0, deterministic=False)  # leave deterministic mode off for the next test


@pytest.fixture
def run_cell(ip):
    """Run a cell like a notebook would (store_history=True), returning its result."""

    def run(source: str):
        return ip.run_cell(source, store_history=True)

    return run


@pytest.fixture
def shell(ip, run_cell):
    """The shell for tests that prove what is freed: the notebook's hidden holders (output
    history, the last result and error) emptied before (`forget_the_cells`; `ip` empties
    them after, and removes the variables the test made); torch, weakref, sys and gc
    imported and an empty `refs` dict for the test's weakrefs. A test module that needs
    more overrides this fixture and asks for it by name (`def shell(shell): ...`)."""
    pytest.importorskip("torch")
    forget_the_cells(ip)
    result = run_cell("import torch, weakref, sys, gc\nrefs = {}")
    assert result.error_in_exec is None, result.error_in_exec
    return ip


def forget_the_cells(ip) -> None:
    """What a test's cells left in the shell's hidden holders, let go without a `gpu_reset`:
    the output history, the last result and error. A reset's scan and collection of the
    whole heap before every `shell` test were a ninth of the suite's time (520 s against
    462); a test that proves a release runs its own."""
    flush_output_history(ip)
    for attribute in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, attribute):
            delattr(sys, attribute)
    result = getattr(ip, "last_execution_result", None)
    if result is not None:
        result.result = result.error_in_exec = result.error_before_exec = None
    ip.InteractiveTB.tb = None


def _ipython_name(name: str) -> bool:
    """IPython's own names for inputs and outputs: `_`, `__`, `_i`, `_ii`, `_i7`, `_7`."""
    return re.fullmatch(r"_+|_i+|_i?\d+", name) is not None


@pytest.fixture
def bare_shell():
    """The global test shell with colab_gpu_guard not loaded; after the test it is unloaded
    again and the custom exception handler the test found is restored."""
    shell = global_shell()
    shell.run_line_magic("unload_ext", "colab_gpu_guard")
    saved = shell.custom_exceptions, shell.CustomTB
    yield shell
    shell.run_line_magic("unload_ext", "colab_gpu_guard")
    shell.custom_exceptions, shell.CustomTB = saved


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
