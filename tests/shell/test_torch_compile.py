"""What torch.compile keeps alive, named by the leftovers scan and freed by %gpu_reset: real
torch.compile (backend="eager" on CPU; the default inductor backend on a GPU), proven with
weakrefs and, on CUDA, the allocator's figures."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.frameworks import torch_compile  # noqa: E402
from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402

ROOT = str(Path(__file__).resolve().parents[2])
N = 250_000  # 1 MB of float32


@pytest.fixture
def shell(shell):
    """conftest.py's `shell` with dynamo's caches empty before and after."""
    import torch._dynamo

    torch._dynamo.reset()
    yield shell
    torch._dynamo.reset()


def cell(run_cell, source: str):
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec
    return result.execution_count


def compile_a_graph_holding_a_tensor(run_cell, size: int = N) -> None:
    """A tensor marked as a static address (as compiled optimizers mark theirs) is installed
    into the compiled graph as an attribute: once the user deletes it, only dynamo's cache
    keeps it alive (the graph is a global dynamo installs in the notebook's namespace)."""
    cell(
        run_cell,
        f"t = torch.ones({size})\n"
        "torch._dynamo.mark_static_address(t, guard=True)\n"
        "def f(x):\n"
        "    return x + t\n"
        "cf = torch.compile(f, backend='eager')\n"
        f"cf(torch.ones({size}))\n"
        "ref = weakref.ref(t)\n"
        "del t\n"
        "gc.collect()",
    )


def test_a_tensor_only_dynamo_keeps_is_named_and_freed_by_gpu_reset_alone(
    shell, run_cell, monkeypatch
):
    compile_a_graph_holding_a_tensor(run_cell)
    assert shell.user_ns["ref"]() is not None, "dynamo's cache keeps the deleted tensor"
    assert any(name.startswith("__compiled_fn_") for name in shell.user_ns)

    (held,) = [item for item in find_leftovers() if item.name.startswith("<compiled graph")]
    assert held.name.endswith(" of f()>.t_0") and held.holder == "other"
    assert held.nbytes == N * 4 and held.shape == (N,)

    dry = reset.gpu_reset(dry_run=True, shell=shell)
    assert any("would run torch._dynamo.reset(): " in note for note in dry.notes)
    assert dry.estimated_bytes >= N * 4
    assert not any(item.name == held.name for item in dry.leftovers)
    assert shell.user_ns["ref"]() is not None  # a dry run changes nothing

    # without the dynamo step, a reset frees nothing of it: gc and the caches do not reach it
    monkeypatch.setattr(torch_compile, "reset_caches", lambda *args, **kwargs: None)
    reset.gpu_reset(shell=shell)
    assert shell.user_ns["ref"]() is not None
    monkeypatch.undo()

    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "")
    assert shell.user_ns["ref"]() is None
    out = captured.stdout
    assert re.search(r"torch\._dynamo\.reset\(\): [\d,]+ compiled frames? dropped", out), out
    assert "tensors held by compiled graphs: 977 KiB" in out  # N * 4 bytes, by weakref
    assert torch_compile.RECOMPILE_NOTE in out
    assert not any(name.startswith("__compiled_fn_") for name in shell.user_ns)
    assert not [item for item in find_leftovers() if item.name.startswith("<compiled graph")]

    # the compiled function still works: it compiles again
    cell(run_cell, "t = torch.ones(4)\nassert cf(torch.ones(4)).tolist() == [2.0] * 4")


def test_compiled_module_parameters_are_named_through_orig_mod(shell, run_cell):
    cell(
        run_cell,
        "model = torch.nn.Sequential(torch.nn.Linear(256, 256))\n"
        "cmodel = torch.compile(model, backend='eager')\n"
        "cmodel(torch.ones(2, 256))\n"
        "refs = [weakref.ref(p) for p in model.parameters()]",
    )
    names = [item.name for item in find_leftovers() if "model" in item.name]
    assert names == ["model.0.weight", "model.0.bias"]  # named once, by the first holder
    # deleting `model` alone would free nothing: `cmodel._orig_mod` is the same module
    assert reset.gpu_reset("model", dry_run=True, shell=shell).estimated_bytes == 0

    cell(run_cell, "del model")
    by_name = {item.name: item for item in find_leftovers()}
    weight = by_name["cmodel._orig_mod.0.weight"]
    assert weight.holder == "user variable" and weight.nbytes == 256 * 256 * 4
    # a module's graph is labelled as such; it holds no parameter (they are its inputs)
    labels = [graph.label for graph in torch_compile.compiled_graphs(shell.user_ns)]
    assert any(label.endswith(" of torch.compile(module)>") for label in labels), labels

    report = reset.gpu_reset("cmodel", shell=shell)
    assert all(ref() is None for ref in shell.user_ns["refs"])
    assert report.released_bytes >= (256 * 256 + 256) * 4
    assert any(step.startswith("torch._dynamo.reset(): ") for step in report.steps)


def test_all_never_takes_dynamos_globals_for_variables(shell, run_cell):
    compile_a_graph_holding_a_tensor(run_cell)
    installed = [name for name in shell.user_ns if name.startswith("__compiled_fn_")]
    report = reset.gpu_reset(all_vars=True, shell=shell)
    assert not any(name.startswith("__") for name in report.dropped_names)
    assert shell.user_ns["ref"]() is None  # freed by dynamo's reset, not by a deletion
    assert installed and not any(name in shell.user_ns for name in installed)


def test_nothing_compiled_means_no_step_and_no_recompile(shell, run_cell):
    import torch._dynamo

    torch._dynamo.reset()
    assert torch_compile.compiled_codes() == []
    assert torch_compile.reset_caches(torch, shell.user_ns) is None
    report = reset.gpu_reset(shell=shell)
    assert not any("torch._dynamo" in step for step in report.steps)


def test_dynamo_not_imported_is_never_imported():
    script = textwrap.dedent(
        """
        import sys, torch
        from colab_gpu_guard import find_leftovers, gpu_reset
        assert "torch._dynamo" not in sys.modules, "torch itself imported dynamo"
        x = torch.ones(10)
        report = gpu_reset(namespace={"x": x})
        find_leftovers(namespace={"x": x})
        print("DYNAMO", "torch._dynamo" in sys.modules, len(report.steps))
        """
    )
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert "DYNAMO False" in done.stdout, done.stdout + done.stderr


def test_graph_parts_follow_only_dynamos_wrappers():
    """The walk from an installed graph reaches the GraphModule through the wrappers dynamo
    and inductor build (function __dict__, closures, bound methods), and no further."""
    module_type = torch.nn.Module
    graph = torch.nn.Linear(2, 2)

    def inner(x):
        return graph(x)

    def outer(x):
        return inner(x)

    outer.__wrapped__ = graph.forward
    modules, constants = torch_compile._graph_parts(outer, module_type)
    assert modules == [graph] and constants == []

    class UserThing:  # not dynamo's: never walked into
        def __init__(self) -> None:
            self.module = torch.nn.Linear(2, 2)

    def holder():
        return None

    holder.__dict__["thing"] = UserThing()
    holder.__dict__["constants"] = {"c0": torch.ones(2)}
    modules, constants = torch_compile._graph_parts(holder, module_type)
    assert modules == [] and constants == [holder.__dict__["constants"]]
    gc.collect()


# ---------------------------------------------------------------- GPU truth


INDUCTOR_SCRIPT = r"""
import gc, json, sys
import torch
import IPython
from IPython.testing.globalipapp import start_ipython
ip = start_ipython() or IPython.get_ipython()
ip.run_line_magic("load_ext", "colab_gpu_guard")
run = lambda source: ip.run_cell(source, store_history=True)
run("import torch, torch._dynamo, gc, weakref; torch.cuda.init()")
run("base = torch.cuda.memory_allocated()")
run('''
MiB = 2**20
t = torch.ones(64 * MiB // 4, device="cuda")
torch._dynamo.mark_static_address(t, guard=True)
def f(x):
    return (x * 2 + t[: x.numel()]).sum()
cf = torch.compile(f)  # the default backend: inductor
cf(torch.ones(1024, device="cuda"))
model = torch.nn.Linear(64, 16384).cuda()  # its 2048 x 16384 output: 128 MiB
cmodel = torch.compile(model, mode="reduce-overhead")  # outputs in a CUDA-graph pool
with torch.no_grad():
    for _ in range(3):
        out = cmodel(torch.ones(2048, 64, device="cuda"))
torch.cuda.synchronize()
ref = weakref.ref(t)
del t, out, model, cmodel
gc.collect()
''')
guard = __import__("colab_gpu_guard")
held = torch.cuda.memory_allocated()
torch.cuda.empty_cache()  # what is still reserved now, only a reset can release
reserved = torch.cuda.memory_reserved()
names = [item.name for item in guard.find_leftovers(device="cuda")]
report = guard.gpu_reset(shell=ip)
print("RESULT" + json.dumps({
    "base": ip.user_ns["base"], "held": held, "after": torch.cuda.memory_allocated(),
    "reserved": reserved, "reserved_after": torch.cuda.memory_reserved(),
    "alive": ip.user_ns["ref"]() is not None, "names": names, "steps": report.steps,
    "warnings": report.warnings,
}))
"""


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_reset_frees_what_inductor_and_cudagraph_trees_keep():
    pytest.importorskip("triton")
    import json

    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-c", INDUCTOR_SCRIPT],
        capture_output=True,
        text=True,
        env=env,
        timeout=540,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, (done.stdout + done.stderr)[-4000:]
    result = json.loads(lines[-1][len("RESULT") :])
    mib = 2**20
    assert result["held"] >= result["base"] + 64 * mib, result  # dynamo kept t alive
    assert any(" of f()>" in name for name in result["names"]), result["names"]
    assert not result["alive"], result
    (step,) = [step for step in result["steps"] if step.startswith("torch._dynamo.reset()")]
    assert "CUDA allocated: " in step and "CUDA-graph trees reset" in step, step
    assert result["after"] <= result["held"] - 64 * mib, result
    # t's 64 MiB and the CUDA-graph pool's 128 MiB output block go back to the driver
    assert result["reserved"] - result["reserved_after"] >= 192 * mib, result
    assert not result["warnings"], result["warnings"]
