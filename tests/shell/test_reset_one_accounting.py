"""Every figure in one `%gpu_reset` report comes from one accounting: what it expected to
free, what it freed, what stayed and the host note all count an autograd graph's saved
tensors alike. Real CPU tensors in a real shell; storages' weakrefs prove what went."""

from __future__ import annotations

import gc

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.units import format_bytes  # noqa: E402

SIDE = 1024  # a 4 MiB float32 matrix


def run(run_cell, source: str):
    with capture_output():
        result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec
    return result


def displayed_result(run_cell, keep_in_module: bool) -> None:
    """`(x @ w).tanh()` shown as a cell's result: its graph saved x (the tanh output is
    the result itself); weakrefs to both storages, and to w's."""
    run(run_cell, f"w = torch.randn({SIDE}, {SIDE}, requires_grad=True)")
    keep = "sys.modules['cgg_nbutils'].keep = r; " if keep_in_module else ""
    run(
        run_cell,
        "import types\n"
        "sys.modules['cgg_nbutils'] = types.ModuleType('cgg_nbutils')\n"
        f"x = torch.randn({SIDE}, {SIDE}); r = (x @ w).tanh(); {keep}\n"
        "refs['x'] = weakref.ref(x.untyped_storage())\n"
        "refs['r'] = weakref.ref(r.untyped_storage())\n"
        "del x",
    )
    run(run_cell, "r")
    run(run_cell, "del r")


@pytest.fixture
def module_cleanup(shell):
    yield shell
    sys_modules = shell.user_ns["sys"].modules
    sys_modules.pop("cgg_nbutils", None)
    gc.collect()


def test_a_displayed_result_with_a_graph_freed_expected_and_noted_alike(shell, run_cell):
    displayed_result(run_cell, keep_in_module=False)
    refs = shell.user_ns["refs"]
    both = 2 * SIDE * SIDE * 4
    done = reset.gpu_reset(shell=shell)
    gc.collect()
    assert refs["x"]() is None and refs["r"]() is None
    assert done.estimated_bytes == done.released_bytes == both
    # the host note counts the graph's saved tensor as freed too: nothing "more"
    assert not any("more than the arrays found" in note for note in done.notes), done.notes
    assert not any("still in use" in note for note in done.notes)


def test_a_result_a_module_global_keeps_says_all_it_expected_stayed(module_cleanup, run_cell):
    shell = module_cleanup
    displayed_result(run_cell, keep_in_module=True)
    refs = shell.user_ns["refs"]
    both = 2 * SIDE * SIDE * 4
    done = reset.gpu_reset(shell=shell)
    assert refs["x"]() is not None and refs["r"]() is not None  # the global keeps both
    assert done.estimated_bytes == both and done.released_bytes == 0
    stayed = [note for note in done.notes if "expected to be freed is still in use" in note]
    assert stayed == [
        f"{format_bytes(both)} expected to be freed is still in use: something outside the "
        "notebook's variables holds it (an installed package's global or cache, a C "
        "extension's, another thread): delete that reference, or restart the kernel, to "
        "free it"
    ]
