"""A LEAK line names the holder one step from the notebook's names (issue 34): a list a
forward hook fills, an object's attribute a method appends to, a functools cache, a user
module's global. Real IPython shell, real CPU torch: the bytes the line says a run kept
are checked against the storages' own sizes, and clearing the holder named frees them
(weakrefs to the storages)."""

from __future__ import annotations

import gc
import sys
import weakref

import pytest

from colab_gpu_guard.cells.history_text import START_AFRESH
from colab_gpu_guard.cells.rerun_holders import CACHE, VARIABLE
from tests.records import reruns

torch = pytest.importorskip("torch")

MiB = 2**20
SLACK = 64 * 1024  # malloc's figure is net: a cell may free a few bytes of IPython's own


def pop(ip, *names: str) -> None:
    for name in names:
        ip.user_ns.pop(name, None)


def check(flagged: list, history: str, holder: str, kind: str, nbytes: int, words: str) -> None:
    assert flagged and all(record.rerun_leak for record in flagged), history
    for record in flagged:
        assert nbytes - SLACK <= record.leak_bytes < nbytes + MiB, history
        assert [(item.kind, item.name) for item in record.holders] == [(kind, holder)], history
        assert record.held_by == words, history
        assert f"held by {words}" in history


def storages(items) -> list:
    return [weakref.ref(item.untyped_storage()) for item in items]


def test_a_list_a_forward_hook_fills_is_named(ip, run_cell):
    """``net(x)`` rerun, where a forward hook registered on a submodule appends each output
    to a global list the cell never names: the line names that list."""
    run_cell(
        "import torch\nhook_acts = []\n"
        "def keep_output(module, inputs, output):\n    hook_acts.append(output)\n"
        "hook_net = torch.nn.Sequential(torch.nn.Linear(1000, 1000), torch.nn.ReLU())\n"
        "hook_handle = hook_net[0].register_forward_hook(keep_output)"
    )
    flagged, history = reruns(
        run_cell, "with torch.no_grad():\n    hook_net(torch.ones(4000, 1000))"
    )
    kept = ip.user_ns["hook_acts"]
    nbytes = kept[-1].untyped_storage().nbytes()
    assert nbytes == 4000 * 1000 * 4
    check(
        flagged,
        history,
        "hook_acts",
        VARIABLE,
        nbytes,
        f"`hook_acts` (grew by 1 item; {START_AFRESH})",
    )
    refs = storages(kept)
    kept.clear()
    assert all(ref() is None for ref in refs)
    pop(ip, "hook_acts", "keep_output", "hook_net", "hook_handle")


def test_an_objects_attribute_a_method_fills_is_named(ip, run_cell):
    """``trainer.step(x)`` rerun, where ``step`` appends to ``self.history``: the line
    names ``trainer.history``."""
    run_cell(
        "import torch\n"
        "class StepTrainer:\n"
        "    def __init__(self):\n        self.history = []\n"
        "    def step(self, x):\n        self.history.append(x * 2)\n"
        "trainer = StepTrainer()"
    )
    flagged, history = reruns(run_cell, "trainer.step(torch.ones(4_000_000))")
    kept = ip.user_ns["trainer"].history
    nbytes = kept[-1].untyped_storage().nbytes()
    check(
        flagged,
        history,
        "trainer.history",
        VARIABLE,
        nbytes,
        f"`trainer.history` (grew by 1 item; {START_AFRESH})",
    )
    assert flagged[-1].grew == ("trainer.history",)
    refs = storages(kept)
    kept.clear()
    assert all(ref() is None for ref in refs)
    pop(ip, "StepTrainer", "trainer")


@pytest.mark.parametrize("cache", ["functools.cache", "functools.lru_cache(maxsize=8)"])
def test_a_functools_cache_is_named_by_its_function(ip, run_cell, cache):
    """A ``functools.cache``d function (or a bounded ``lru_cache``) called with a new
    argument each rerun: its cache keeps every result; the line names the function and
    how to empty its cache."""
    run_cell(
        "import functools, torch\ncalls = [0]\n"
        f"@{cache}\ndef features(n):\n    return torch.ones(4_000_000) + n"
    )
    flagged, history = reruns(run_cell, "calls[0] += 1\nfeatures(calls[0]);")
    wrapper = ip.user_ns["features"]
    results = [wrapper(n) for n in range(1, 4)]  # cache hits: the results it keeps
    nbytes = results[-1].untyped_storage().nbytes()
    words = (
        "`features` (its functools cache grew by 1 result; `features.cache_clear()` releases them)"
    )
    check(flagged, history, "features", CACHE, nbytes, words)
    assert flagged[-1].grew == ()  # not a variable of the notebook's
    refs = storages(results)
    del results
    wrapper.cache_clear()
    assert all(ref() is None for ref in refs)
    pop(ip, "calls", "features")


@pytest.mark.parametrize("imported", ["import utils34b", "from utils34b import remember"])
def test_a_user_modules_global_is_named_with_its_module(ip, run_cell, tmp_path, imported):
    """A helper module of the user's (a file beside the notebook) whose function keeps
    what it is given in a module global: the line names ``utils34b._cache``, whether the
    cell calls it through the module or imported the function."""
    (tmp_path / "utils34b.py").write_text(
        "_cache = []\ndef remember(x):\n    _cache.append(x)\n    return x.sum()\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        run_cell(f"import torch\n{imported}")
        call = "utils34b.remember" if imported.startswith("import") else "remember"
        flagged, history = reruns(run_cell, f"{call}(torch.ones(4_000_000));")
        module = sys.modules["utils34b"]
        kept = module._cache
        nbytes = kept[-1].untyped_storage().nbytes()
        words = f"`utils34b._cache` (grew by 1 item; {START_AFRESH})"
        check(flagged, history, "utils34b._cache", VARIABLE, nbytes, words)
        refs = storages(kept)
        kept.clear()
        gc.collect()
        assert all(ref() is None for ref in refs)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("utils34b", None)
        pop(ip, "utils34b", "remember")


def test_an_installed_modules_globals_are_not_looked_into(ip, run_cell):
    """Only the user's own modules are looked into: a cell naming ``torch.nn.functional``
    and its functions reads none of torch's globals (a LEAK line never names one)."""
    from colab_gpu_guard.cells.watched import watch

    run_cell("import torch\nimport torch.nn.functional as F")
    found = watch(ip.user_ns, ("F", "relu", "torch", "randn", "nn", "functional"))
    assert all(not label.startswith(("F.", "torch.")) for label in found), found


def test_what_is_looked_into_runs_no_code_of_the_users(ip, run_cell):
    """Objects whose every hook records that it ran (``__getattribute__``, ``__class__``,
    ``__len__``, ``__bool__``, ``__eq__``, ``__hash__``, a dict subclass's ``__len__``),
    held as a notebook's names, as attributes and as a module's hooks dict, rebound by a
    rerun that keeps memory again: the rerun is flagged and names its holder, and none
    of them ran."""
    run_cell(
        "import torch\nhostile_calls = []\nhostile_kept = []\n"
        "class Hostile:\n"
        "    def __init__(self):\n"
        "        object.__setattr__(self, 'history', [])\n"
        "        object.__setattr__(self, '_forward_hooks', HostileDict())\n"
        "        object.__setattr__(self, '_modules', HostileDict(a=self))\n"
        "    def __getattribute__(self, name):\n"
        "        hostile_calls.append(name)\n"
        "        return object.__getattribute__(self, name)\n"
        "    @property\n"
        "    def __class__(self):\n"
        "        hostile_calls.append('__class__')\n"
        "        return Hostile\n"
        "    def __len__(self):\n        hostile_calls.append('len')\n        return 1\n"
        "    def __bool__(self):\n        hostile_calls.append('bool')\n        return True\n"
        "    def __eq__(self, other):\n        hostile_calls.append('eq')\n        return False\n"
        "    __hash__ = object.__hash__\n"
        "class HostileDict(dict):\n"
        "    def __len__(self):\n        hostile_calls.append('dict len')\n        return 0\n"
        "    def __bool__(self):\n        hostile_calls.append('dict bool')\n        return False\n"
        "hostile = Hostile()"
    )
    cell = "hostile = Hostile()\nhostile_kept.append(torch.ones(4_000_000))"
    flagged, history = reruns(run_cell, cell)
    assert flagged and all(record.rerun_leak for record in flagged), history
    assert all(
        record.held_by == f"`hostile_kept` (grew by 1 item; {START_AFRESH})" for record in flagged
    ), history
    assert ip.user_ns["hostile_calls"] == []
    pop(ip, "hostile_calls", "hostile_kept", "Hostile", "HostileDict", "hostile")
