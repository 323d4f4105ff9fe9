"""What process-wide registries keep, in a real shell: the globals of the user's own module
(``nb._cache``, named as the notebook imported it), ``weakref.finalize``'s finalizers
(their arguments) and running threads (their function's arguments). Listed with the bytes
of their storages; `%gpu_reset` (plain, ``--all``, a dry run) never deletes a module's
global, runs or removes a finalizer, nor stops a thread: it names them with the fix, and
weakrefs prove the memory stays, then goes once the user lets go."""

from __future__ import annotations

import gc
import sys
import textwrap
import threading

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.leftovers.registries import (  # noqa: E402
    FINALIZER,
    MODULE_GLOBAL,
    module_globals,
    users_module,
)
from colab_gpu_guard.reset import apply as reset  # noqa: E402

N = 250_000  # 1 MB of float32
MODULE = "cgg_test_nbutils"


@pytest.fixture
def user_module(tmp_path):
    """A module of the user's own beside the notebook: a cache its function fills, a class
    attribute, functions with a default and a closure cell that keep lists, an imported class
    and function (not its data)."""
    (tmp_path / f"{MODULE}.py").write_text(
        textwrap.dedent(
            """
            import torch
            from torch.nn import Linear
            from torch import zeros
            _cache = []
            LIMIT = 3

            def remember(x):
                _cache.append(x)
                return x

            def remember_once(x, seen=[]):
                seen.append(x)

            def _counter():
                calls = []
                def count(x):
                    calls.append(x)
                return count

            count = _counter()

            class Keeper:
                store = {}
            """
        )
    )
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    sys.modules.pop(MODULE, None)


def entries(shell) -> dict:
    return {item.name: item for item in find_leftovers(shell=shell)}


def assert_listed(shell, root: str, path: str, kind: str, keeper: str) -> None:
    """The 1 MB array under `root` + `path` is listed with its storage's bytes, as held by
    `kind` (not "other"), in a group of that kind whose badge names `keeper`."""
    item = entries(shell)[root + path]
    assert item.nbytes == 4 * N and item.holder == "other"
    assert item.held_as == kind and f"({kind})" in str(item)
    group = find_leftovers(shell=shell).groups().named(root)
    assert (group.kind, group.hidden_word) == (kind, f"kept by {keeper}")


def run(run_cell, source: str) -> None:
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec


def quiet(ip, line: str) -> str:
    with capture_output() as out:
        ip.run_line_magic("gpu_reset", line)
    return out.stdout


def test_a_modules_functions_are_walked_into_through_defaults_and_closure_cells(
    shell, run_cell, user_module
):
    run(
        run_cell,
        f"import {MODULE} as nb\nnb.remember_once(torch.ones({N})); nb.count(torch.ones({2 * N}))",
    )
    found = entries(shell)
    assert found["nb.remember_once.__defaults__[0][0]"].nbytes == 4 * N
    assert found["nb.count.<closure 'calls'>[0]"].nbytes == 8 * N
    assert found["nb.count.<closure 'calls'>[0]"].held_as == "module global"


def test_a_user_modules_globals_are_listed_and_never_deleted(shell, run_cell, user_module):
    run(
        run_cell,
        f"import {MODULE} as nb\n"
        f"nb.remember(torch.ones({N})); nb.Keeper.store['w'] = torch.ones({2 * N})\n"
        "refs['cached'] = weakref.ref(nb._cache[0].untyped_storage())\n"
        "refs['stored'] = weakref.ref(nb.Keeper.store['w'].untyped_storage())",
    )
    module = sys.modules[MODULE]
    found = entries(shell)
    assert found["nb._cache[0]"].nbytes == module._cache[0].untyped_storage().nbytes() == 4 * N
    assert found["nb.Keeper.store['w']"].nbytes == 8 * N
    assert str(found["nb._cache[0]"]).endswith("cpu  (module global)")  # not "(other)"
    labels = [item.label for item in module_globals(shell.user_ns)]
    assert "nb._cache" in labels and "nb.Keeper" in labels
    # a function is walked into through its defaults and closure cells: one with neither
    # keeps nothing and is no root
    assert "nb.remember_once" in labels and "nb.count" in labels
    assert "nb.remember" not in labels and "nb._counter" not in labels
    # imported names and plain values are not this module's data
    assert not {"nb.Linear", "nb.zeros", "nb.torch", "nb.LIMIT"} & set(labels)
    assert not any(label.startswith(("json.", "torch.", "IPython.")) for label in labels)

    # listed as what keeps them, with what frees them (not `del name`: no notebook name)
    groups = find_leftovers(shell=shell).groups()
    kept = groups.named("nb.Keeper")
    assert (kept.kind, kept.hidden_word, kept.nbytes) == (
        "module global",
        "kept by your module",
        8 * N,
    )
    advice = groups.advice()
    assert "`del module.name` (or assigning it anew) for your modules' globals" in advice
    assert "for your own variables" not in advice

    dry = reset.gpu_reset(shell=shell, dry_run=True)
    assert dry.estimated_bytes == 0
    text = quiet(shell, "--all") + quiet(shell, "")
    for line in ("`nb._cache` (977 KiB)", "`nb.Keeper` (1.91 MiB)", "`del nb.Keeper`"):
        assert line in text
    assert "never deletes" in text
    assert len(module._cache) == 1 and "w" in module.Keeper.store
    assert shell.user_ns["refs"]["cached"]() is not None
    assert shell.user_ns["refs"]["stored"]() is not None

    # a variable sharing the global's tensor: deleting it frees nothing, and says why
    run(run_cell, "x = nb._cache[0]")
    done = reset.gpu_reset("x", shell=shell)
    assert done.released_bytes == 0 and "x" not in shell.user_ns
    (note,) = [note for note in done.notes if note.startswith("`x`")]
    assert "`nb._cache`" in note and "global of your own module" in note

    run(run_cell, "nb._cache.clear(); del nb.Keeper.store['w']")
    assert shell.user_ns["refs"]["cached"]() is None
    assert shell.user_ns["refs"]["stored"]() is None
    assert not any(name.startswith("nb.") for name in entries(shell))


def test_installed_and_standard_modules_are_not_the_users():
    import json

    import IPython

    assert not users_module(vars(json)) and not users_module(vars(IPython))
    assert not users_module(vars(torch)) and not users_module({"__name__": "x"})


def test_a_finalizers_arguments_are_listed_and_the_reset_leaves_it(shell, run_cell):
    run(
        run_cell,
        "class Watched:\n    pass\n"
        "def cleanup(t):\n    pass\n"
        f"obj = Watched(); arg = torch.ones({N})\n"
        "refs['arg'] = weakref.ref(arg.untyped_storage())\n"
        "fin = weakref.finalize(obj, cleanup, arg)\n"
        "del arg",
    )
    assert_listed(shell, "<weakref.finalize cleanup>", ".args[0]", "finalizer", "weakref.finalize")
    roots = {key.kind for key, *_rest in _root_entries(shell)}
    assert FINALIZER in roots

    text = quiet(shell, "--all") + quiet(shell, "")
    assert "`<weakref.finalize cleanup>` (977 KiB)" in text
    assert "never runs or removes" in text
    assert shell.user_ns["fin"].alive and shell.user_ns["refs"]["arg"]() is not None

    run(run_cell, "del obj")  # the object it watches goes: the finalizer runs
    assert not shell.user_ns["fin"].alive and shell.user_ns["refs"]["arg"]() is None
    assert not any(name.startswith("<weakref.finalize") for name in entries(shell))


def _root_entries(shell) -> list:
    from colab_gpu_guard.leftovers.scan_roots import root_entries

    return root_entries(shell, shell.user_ns)


def test_module_globals_are_roots_of_their_own_kind(shell, run_cell, user_module):
    run(run_cell, f"import {MODULE}\n{MODULE}.remember(torch.ones(10))")
    keys = {key for key, *_rest in _root_entries(shell)}
    assert (MODULE_GLOBAL, f"{MODULE}._cache") in keys
    run(run_cell, f"{MODULE}._cache.clear()")


def test_each_scan_sees_the_modules_imported_replaced_or_removed_since_the_last(
    shell, run_cell, user_module
):
    """The user's modules are judged again only when sys.modules changed: a module imported
    after a scan, an entry replaced in place (the same names, as many), one removed."""
    label = f"{MODULE}._cache[0]"
    assert not any(name.startswith(MODULE) for name in entries(shell))  # not imported yet
    run(run_cell, f"import {MODULE}\n{MODULE}.remember(torch.ones({N}));")  # no Out[N]
    assert entries(shell)[label].nbytes == 4 * N
    module = sys.modules[MODULE]
    sys.modules[MODULE] = type(sys)(MODULE)  # not a file of the user's: no root
    try:
        assert label not in entries(shell)
    finally:
        sys.modules[MODULE] = module
    assert entries(shell)[label].nbytes == 4 * N
    del sys.modules[MODULE]
    assert label not in entries(shell)
    sys.modules[MODULE] = module
    run(run_cell, f"{MODULE}._cache.clear()")


def test_a_running_threads_arguments_are_listed_and_freed_when_it_returns(shell, run_cell):
    run(
        run_cell,
        "import threading\n"
        "go = threading.Event()\n"
        "def work(batch, go):\n    go.wait(30)\n"
        f"batch = torch.ones({N}); refs['batch'] = weakref.ref(batch.untyped_storage())\n"
        "worker = threading.Thread(target=work, args=(batch, go), name='loader', daemon=True)\n"
        "worker.start(); del batch, worker",
    )
    try:
        assert_listed(shell, "<thread 'loader'>", "._args[0]", "running thread", "a running thread")
        text = quiet(shell, "--all") + quiet(shell, "")
        assert "held by running threads: `<thread 'loader'>` (977 KiB)" in text
        assert shell.user_ns["refs"]["batch"]() is not None  # the reset stops no thread
    finally:
        shell.user_ns["go"].set()
    for thread in threading.enumerate():
        if thread.name == "loader":
            thread.join(10)
    gc.collect()
    assert shell.user_ns["refs"]["batch"]() is None
    assert not any(name.startswith("<thread 'loader'>") for name in entries(shell))
