"""`%gpu_reset` deletes only what the user meant: `--all` only variables holding GPU memory
(none on a CPU runtime, and it says so), never Python's own dunder names, says when a name
it deleted held no array, and never lists a usage error our own magic raised as the user's
dropped exception. Real shell, real CPU torch; weakrefs prove what stays."""

from __future__ import annotations

import sys

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.ipython.magics import usage_lines  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.reset import plan  # noqa: E402
from colab_gpu_guard.units import jargon_in  # noqa: E402

NOTEBOOK = (
    "import numpy, os\n"
    "model = torch.nn.Linear(64, 64)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "x = torch.ones(1000)\n"
    "arr = numpy.zeros(1000)\n"
    "refs['weight'] = weakref.ref(model.weight); refs['x'] = weakref.ref(x)"
)
NO_GPU_NOTE = (
    "--all {verb} no variable: none holds GPU memory (tensors and arrays in host memory "
    "stay); to delete variables, name them: %gpu_reset NAME ..."
)


def alive(shell, key: str) -> bool:
    return shell.user_ns["refs"][key]() is not None


def magic(shell, line: str) -> str:
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", line)
    return captured.stdout


# ---------------------------------------------------------------- --all


def test_all_on_a_cpu_runtime_deletes_no_variable_and_says_so_in_one_line(shell, run_cell):
    assert run_cell(NOTEBOOK).error_in_exec is None
    names = {"model", "opt", "x", "arr", "os"}
    dry = magic(shell, "--all --dry-run")
    assert "  note: " + NO_GPU_NOTE.format(verb="would delete") + "\n" in dry, dry
    said = magic(shell, "--all")
    note = "  note: " + NO_GPU_NOTE.format(verb="deleted") + "\n"
    assert note in said, said
    assert said.count("--all") == 1 and jargon_in(said) == []
    assert names <= set(shell.user_ns) and alive(shell, "weight") and alive(shell, "x")
    report = reset.gpu_reset(all_vars=True, shell=shell)
    assert report.dropped.get("user variables", 0) == 0
    assert not names & set(report.dropped_names)


def test_all_counts_only_memory_on_an_accelerator():
    holds = plan.holds_accelerator_memory
    for device in ("cuda:0", "cuda:1", "mps:0", "mps", "xpu:0", "rocm:0", "cuda:0+cuda:1"):
        assert holds(device), device
    for device in ("cpu", "cpu:0", "meta", "unknown", ""):
        assert not holds(device), device


@pytest.mark.gpu
def test_all_deletes_the_variables_holding_gpu_memory_and_only_those(shell, run_cell):
    run_cell(
        "on_gpu = torch.ones(1000, device='cuda'); on_host = torch.ones(1000)\n"
        "refs['gpu'] = weakref.ref(on_gpu); refs['host'] = weakref.ref(on_host)"
    )
    said = magic(shell, "--all")
    assert "names: on_gpu" in said and "none holds GPU memory" not in said, said
    assert "on_gpu" not in shell.user_ns and not alive(shell, "gpu")
    assert "on_host" in shell.user_ns and alive(shell, "host")


# ---------------------------------------------------------------- Python's own names

DUNDERS = ["__name__", "__builtins__", "__doc__", "__spec__", "__loader__", "__package__"]


@pytest.mark.parametrize("name", [*DUNDERS, "__mine__"])
def test_a_dunder_name_is_refused_and_nothing_changes(shell, run_cell, name):
    run_cell("__mine__ = torch.ones(10)")
    before = {key: shell.user_ns[key] for key in [*DUNDERS, "__mine__"] if key in shell.user_ns}
    for line in (name, f"{name} --dry-run", f"refs {name}"):
        with pytest.raises(UsageError) as raised:
            shell.run_line_magic("gpu_reset", line)
        text = str(raised.value)
        assert text.startswith(f"{name}: Python's own name, not a variable of yours"), text
        assert text.endswith(f"\nUsage: {usage_lines()['gpu_reset']}"), text
    after = {key: shell.user_ns[key] for key in before if key in shell.user_ns}
    assert after.keys() == before.keys()
    assert all(after[key] is before[key] for key in before)
    assert "refs" in shell.user_ns
    result = run_cell("ran = False\nif __name__ == '__main__':\n    ran = True")
    assert result.error_in_exec is None and shell.user_ns["ran"] is True


def test_the_api_refuses_a_dunder_name_without_a_shell():
    namespace = {"__name__": "__main__", "__doc__": None}
    with pytest.raises(ValueError, match="__name__, __doc__: Python's own names"):
        reset.gpu_reset("__name__", "__doc__", namespace=namespace)
    assert namespace == {"__name__": "__main__", "__doc__": None}


# ---------------------------------------------------------------- names holding no array


def test_deleting_a_module_a_function_or_a_class_says_it_held_no_array(shell, run_cell):
    run_cell(
        "import os\ndef helper():\n    return 1\nclass Config:\n    lr = 0.1\n"
        "t = torch.ones(1000); count = 3"
    )
    dry = magic(shell, "os helper Config t count --dry-run")
    assert (
        "  note: `os` (a module), `helper` (a function), `Config` (a class), `count` hold no "
        "tensor or array: deleting them would free no memory\n"
    ) in dry, dry
    assert {"os", "helper", "Config", "t", "count"} <= set(shell.user_ns)
    said = magic(shell, "os helper Config t count")
    assert (
        "  note: `os` (a module), `helper` (a function), `Config` (a class), `count` held no "
        "tensor or array: deleted as asked, which freed no memory\n"
    ) in said, said
    assert "freed: 3.91 KiB of tensors" in said  # `t`'s
    assert not {"os", "helper", "Config", "t", "count"} & set(shell.user_ns)
    assert jargon_in(said) == []


def test_one_name_holding_no_array_is_worded_for_one(shell, run_cell):
    run_cell("import os")
    said = magic(shell, "os")
    assert "  note: `os` (a module) held no tensor or array: deleted as asked" in said, said


def test_no_note_for_names_that_reach_an_array(shell, run_cell):
    run_cell(
        "def make():\n    buf = torch.ones(100)\n    return lambda: buf\n"
        "fn = make()\nclass Cache:\n    w = torch.ones(100)"
    )
    said = magic(shell, "fn Cache")
    assert "held no tensor" not in said and "hold no tensor" not in said, said
    assert "fn" not in shell.user_ns and "Cache" not in shell.user_ns


# ---------------------------------------------------------------- our own usage errors


@pytest.mark.parametrize(
    "line", ["--bogus", "no_such_name", "__name__", "x --all", "gpu_reset --dry-run=3"]
)
def test_a_usage_error_from_our_own_magic_is_dropped_silently(shell, run_cell, line):
    run_cell("x = 1")
    result = run_cell(f"%gpu_reset {line}")
    assert isinstance(result.error_in_exec, UsageError)
    assert isinstance(sys.last_value, UsageError)
    for dry_run in (True, False):
        report = reset.gpu_reset(dry_run=dry_run, shell=shell)
        assert not report.dropped.get("exceptions") and not report.dropped.get("traceback frames")
        assert not [name for name in report.dropped_names if "exception" in name]
        text = str(report)
        assert text.splitlines()[1] in ("  would drop: nothing", "  dropped: nothing"), text
        assert "UsageError" not in text, text
        assert "traceback" not in text and "%debug" not in text, text
    assert getattr(sys, "last_value", None) is None  # dropped all the same
    assert shell.last_execution_result.error_in_exec is None


def test_a_usage_error_from_another_magic_is_still_the_users(shell, run_cell):
    """Recognised by who raised it, not by its type alone: a UsageError the user's own
    code raised (or another magic's) is listed as always."""
    result = run_cell(
        "from IPython.core.error import UsageError\n"
        "def check(v):\n    bad = torch.ones(1000)\n    raise UsageError('mine')\n"
        "check(1)"
    )
    assert isinstance(result.error_in_exec, UsageError)
    said = magic(shell, "")
    assert "1 exception" in said and "1 traceback frame" in said, said
