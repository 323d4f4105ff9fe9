"""`%gpu_reset` / `gpu_reset` in a real IPython shell, proven with weakrefs to CPU tensors:
every hidden holder a notebook keeps is released, user variables survive unless named, a
dry run changes nothing, bad input changes nothing."""

from __future__ import annotations

import gc
import io
import json
import re
import sys
import traceback
import weakref
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard import cuda_health, notebook_refs
from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from tests.fake_cuda import fake_torches  # noqa: E402

N = 250_000  # 1 MB of float32 per tensor


def alive(ip, key: str) -> bool:
    return ip.user_ns["refs"][key]() is not None


def cell(run_cell, source: str) -> int:
    """Run a cell; return its number only (an ExecutionResult would hold the output)."""
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec
    return result.execution_count


def fail_cell(run_cell, source: str) -> None:
    with capture_output():
        result = run_cell(source)
    assert result.error_in_exec is not None


# ---------------------------------------------------------------- output history


def test_tensor_held_only_by_out_is_freed(shell, run_cell):
    result = cell(run_cell, f"t = torch.zeros({N}); refs['t'] = weakref.ref(t); t")
    run_cell("del t")
    number = result
    assert number in shell.user_ns["Out"]
    run_cell("1 + 1")  # `_` moves on
    run_cell("2 + 2")
    run_cell("3 + 3")  # ... and past ___
    assert alive(shell, "t"), "Out / _N should still hold the tensor"
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "t")
    assert number not in shell.user_ns["Out"]
    assert f"_{number}" not in shell.user_ns and f"_{number}" not in shell.user_ns_hidden
    assert report.dropped["output history"] == 1
    assert f"Out[{number}]" in report.dropped_names
    assert report.released_bytes >= N * 4


def test_the_counts_count_the_names_listed(shell, run_cell):
    """'would drop: 1 output history entry, 3 output names' says as many output names as
    the names line lists after the Out[N] entries (`_`, `_N`, the displayhook's copies)."""
    cell(run_cell, "torch.zeros(8)")
    report = reset.gpu_reset(shell=shell, dry_run=True)
    names = report.dropped_names
    history = [name for name in names if name.startswith("Out[")]
    others = ("<exception ", "<last cell result>", "<debugger")
    outputs = [name for name in names if name not in history and not name.startswith(others)]
    assert any(name.startswith("<displayhook.") for name in outputs), names
    assert report.dropped["output history"] == len(history)
    assert report.dropped["output names"] == len(outputs), names
    assert report.dropped["last cell result"] == names.count("<last cell result>")


def test_plain_outputs_survive(shell, run_cell):
    plain = cell(run_cell, "41 + 1")
    tensor = cell(run_cell, f"x = torch.ones({N}); refs['x'] = weakref.ref(x); x")
    run_cell("del x")
    text = cell(run_cell, "'keep me'")
    reset.gpu_reset(shell=shell)
    out = shell.user_ns["Out"]
    assert out[plain] == 42
    assert out[text] == "keep me"
    assert shell.user_ns[f"_{plain}"] == 42
    assert shell.user_ns["_"] == "keep me"
    assert tensor not in out
    assert not alive(shell, "x")


def _only_underscores_hold(shell, number: int) -> None:
    """Remove the Out[N]/_N copies so that only _ / __ / ___ hold the value."""
    shell.user_ns["Out"].pop(number, None)
    shell.user_ns.pop(f"_{number}", None)
    shell.user_ns_hidden.pop(f"_{number}", None)
    result = shell.last_execution_result
    if result is not None:
        result.result = None


def test_tensor_held_only_by_underscore_is_freed(shell, run_cell):
    result = cell(run_cell, f"t = torch.zeros({N}); refs['u'] = weakref.ref(t); t")
    run_cell("del t")
    _only_underscores_hold(shell, result)
    assert alive(shell, "u")
    assert shell.user_ns["_"] is shell.user_ns["refs"]["u"]()
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "u")
    assert "_" in report.dropped_names
    assert shell.user_ns["_"] == "" and shell.user_ns_hidden["_"] == ""
    # IPython keeps updating _ afterwards
    run_cell("7 * 6")
    assert shell.user_ns["_"] == 42


def test_tensor_held_only_by_double_underscore_is_freed(shell, run_cell):
    result = cell(run_cell, f"t = torch.zeros({N}); refs['uu'] = weakref.ref(t); t")
    run_cell("del t")
    later = cell(run_cell, "5")
    _only_underscores_hold(shell, result)
    assert shell.user_ns["__"] is shell.user_ns["refs"]["uu"]()
    assert shell.user_ns["_"] == 5
    reset.gpu_reset(shell=shell)
    assert not alive(shell, "uu")
    assert shell.user_ns["_"] == 5, "a plain `_` is not touched"
    assert shell.user_ns["Out"][later] == 5


def test_tensor_left_in_user_ns_hidden_by_reset_out_is_freed(shell, run_cell):
    """IPython's own `%reset -f out` (the usual advice) blanks `_` in user_ns only: the
    output lives on in user_ns_hidden, where no name the user sees reaches it."""
    cell(run_cell, f"t = torch.zeros({N}); refs['h'] = weakref.ref(t); t")
    run_cell("del t")
    shell.run_line_magic("reset", "-f out")
    gc.collect()
    assert alive(shell, "h"), "IPython's reset leaves the output alive"
    found = {item.name: item.holder for item in find_leftovers()}
    assert found["<user_ns_hidden['_']>"] == "output history"
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "h")
    assert "<user_ns_hidden['_']>" in report.dropped_names
    assert report.released_bytes >= N * 4
    assert any(note.startswith("_, __, ___ are back in step") for note in report.notes)
    run_cell("6 * 7")
    assert shell.user_ns["_"] == 42


def test_hidden_copy_behind_a_user_assigned_underscore_is_freed(shell, run_cell):
    cell(run_cell, f"t = torch.zeros({N}); refs['a'] = weakref.ref(t); t")
    run_cell("del t")
    shell.user_ns["Out"].clear()
    for name in list(shell.user_ns_hidden):
        if notebook_refs.is_output_name(name):
            shell.user_ns.pop(name, None)
            shell.user_ns_hidden.pop(name)
    run_cell("_ = 'mine'\n__ = ___ = None")  # the user's own: IPython keeps hidden copies
    assert alive(shell, "a")
    reset.gpu_reset(shell=shell)
    assert not alive(shell, "a")
    run_cell("1 + 1")
    assert shell.user_ns["_"] == "mine", "the user's `_` stays theirs"
    for name in ("_", "__", "___"):  # leave the shell's display hook as it was
        shell.user_ns[name] = shell.user_ns_hidden[name] = getattr(shell.displayhook, name)


def test_container_of_tensors_in_out_is_dropped(shell, run_cell):
    result = cell(
        run_cell,
        f"batch = {{'x': [torch.ones({N})]}}; refs['c'] = weakref.ref(batch['x'][0]); batch",
    )
    run_cell("del batch")
    reset.gpu_reset(shell=shell)
    assert not alive(shell, "c")
    assert result not in shell.user_ns["Out"]


def test_out_entry_also_held_by_a_variable_stays_alive(shell, run_cell):
    result = cell(run_cell, f"keep = torch.ones({N}); refs['k'] = weakref.ref(keep); keep")
    report = reset.gpu_reset(shell=shell)
    assert alive(shell, "k")
    assert "keep" in shell.user_ns
    assert result not in shell.user_ns["Out"]  # the hidden copy is dropped
    assert any(item.name == "keep" for item in report.leftovers)


# ---------------------------------------------------------------- exceptions and frames

FAILING_FUNCTION = f"""
def train():
    batch = torch.ones({N})
    refs['frame'] = weakref.ref(batch)
    raise ValueError("boom")
train()
"""


def test_failed_cell_local_frame_is_freed(shell, run_cell):
    fail_cell(run_cell, FAILING_FUNCTION)
    assert alive(shell, "frame")
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "frame")
    assert report.dropped["exceptions"] >= 1
    assert report.dropped["traceback frames"] >= 1
    assert not hasattr(sys, "last_value") and not hasattr(sys, "last_traceback")
    assert shell.last_execution_result.error_in_exec is None


def test_clear_frames_misses_a_read_f_locals_snapshot_on_this_python():
    """The CPython behaviour gpu_reset works around (gh-113939, fixed in 3.13): once a
    frame's f_locals was read, traceback.clear_frames leaves the locals alive."""

    def train():
        batch = torch.ones(10)
        held.append(weakref.ref(batch))
        raise ValueError("boom")

    held: list = []
    try:
        train()
    except ValueError as error:
        kept = error
    tb = kept.__traceback__.tb_next
    assert "batch" in tb.tb_frame.f_locals
    traceback.clear_frames(kept.__traceback__)
    assert (held[0]() is not None) == (sys.version_info < (3, 13))
    notebook_refs.clear_frame(tb.tb_frame, exited=True)
    assert held[0]() is None


def test_frame_locals_snapshot_is_released_gh113939(shell, run_cell):
    """A frame that outlives its traceback chain (a logger keeps the traceback object) and
    whose f_locals were read: gpu_reset still releases its locals."""
    fail_cell(run_cell, FAILING_FUNCTION)
    tb = sys.last_traceback
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code.co_name == "train"
    shell.user_ns["held_tb"] = tb  # someone else keeps the innermost traceback
    assert "batch" in tb.tb_frame.f_locals  # creates the snapshot on < 3.13
    del tb
    try:
        reset.gpu_reset(shell=shell)
        assert not alive(shell, "frame")
        assert "held_tb" in shell.user_ns
    finally:
        shell.user_ns.pop("held_tb", None)


def test_frame_clear_refuses_executing_frames():
    """The claim gpu_reset relies on: clearing a running frame raises, so it is skipped."""
    with pytest.raises(RuntimeError):
        sys._getframe().clear()
    assert notebook_refs.clear_frame(sys._getframe()) is False


def test_tensor_in_exception_args_is_freed(shell, run_cell):
    fail_cell(
        run_cell,
        f"t = torch.ones({N}); refs['args'] = weakref.ref(t)\n"
        "try:\n    raise ValueError('bad batch', t)\nfinally:\n    del t",
    )
    assert sys.last_value.args[1] is shell.user_ns["refs"]["args"]()
    reset.gpu_reset(shell=shell)
    assert not alive(shell, "args")


def test_exception_chained_through_context_is_freed(shell, run_cell):
    fail_cell(
        run_cell,
        f"""
def load():
    cached = torch.ones({N})
    refs['context_frame'] = weakref.ref(cached)
    raise KeyError('missing', torch.ones({N}))
def run():
    try:
        load()
    except KeyError as error:
        refs['context_args'] = weakref.ref(error.args[1])
        raise RuntimeError('load failed')
run()
""",
    )
    assert isinstance(sys.last_value.__context__, KeyError)
    assert alive(shell, "context_frame") and alive(shell, "context_args")
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "context_frame")
    assert not alive(shell, "context_args")
    assert report.dropped["exceptions"] >= 2


def test_exception_kept_by_user_variable_still_releases_frames(shell, run_cell):
    """The user's own reference to the exception keeps it, but not its frames' locals."""
    run_cell(
        f"""
def step():
    activations = torch.ones({N})
    refs['kept'] = weakref.ref(activations)
    raise ValueError('x')
try:
    step()
except ValueError as error:
    keep = error
"""
    )
    fail_cell(run_cell, "raise keep")
    assert alive(shell, "kept")
    reset.gpu_reset(shell=shell)
    assert not alive(shell, "kept")
    assert isinstance(shell.user_ns["keep"], ValueError), "the variable itself stays"


def test_debugger_held_frame_is_freed(shell, run_cell):
    """A real %debug session (quit at once) leaves the debugger holding the frame's locals."""
    from IPython.core.debugger import Pdb

    fail_cell(run_cell, FAILING_FUNCTION)
    debugger = Pdb(stdin=io.StringIO("q\n"), stdout=io.StringIO())
    debugger.use_rawinput = False
    shell.InteractiveTB.pdb = debugger
    try:
        with capture_output():
            shell.run_line_magic("debug", "")
        # drop every other holder by hand: only the debugger is left
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        shell.last_execution_result.error_in_exec = None
        shell.InteractiveTB.tb = None
        assert alive(shell, "frame"), "the debugger should keep the frame alive"
        report = reset.gpu_reset(shell=shell)
        assert report.dropped["debugger"] == 1
        assert not alive(shell, "frame")
    finally:
        shell.InteractiveTB.pdb = None


# ---------------------------------------------------------------- named variables


def test_named_variables_survive_unless_named(shell, run_cell):
    run_cell(
        f"keep = torch.ones({N}); drop = torch.ones({N}); plain = 3\n"
        "refs['keep'] = weakref.ref(keep); refs['drop'] = weakref.ref(drop)"
    )
    report = reset.gpu_reset("drop", shell=shell)
    assert "drop" not in shell.user_ns and not alive(shell, "drop")
    assert "keep" in shell.user_ns and alive(shell, "keep")
    assert shell.user_ns["plain"] == 3
    assert report.dropped["user variables"] == 1


def test_reset_without_names_deletes_no_variable(shell, run_cell):
    run_cell(f"keep = torch.ones({N}); plain = [1, 2]; refs['keep'] = weakref.ref(keep)")
    before = set(shell.user_ns)
    reset.gpu_reset(shell=shell)
    assert set(shell.user_ns) >= before - {"_", "__", "___"}
    assert alive(shell, "keep")


@pytest.mark.cpu_only
def test_all_deletes_no_host_tensor_on_a_cpu_only_build(shell, run_cell):
    """`--all` deletes only variables holding GPU memory: on a CPU-only build none (the
    report says so, and how to name them); host tensors go when named."""
    np = pytest.importorskip("numpy")
    assert np is not None
    run_cell(
        f"import numpy\nkeep = torch.ones({N}); mod = torch.nn.Linear(4, 4)\n"
        "arr_np = numpy.zeros(10); plain = 'text'\n"
        "refs['keep'] = weakref.ref(keep); refs['mod'] = weakref.ref(mod.weight)"
    )
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "--all")
    assert alive(shell, "keep") and alive(shell, "mod")
    assert {"keep", "mod", "arr_np", "torch", "refs"} <= set(shell.user_ns)
    assert shell.user_ns["plain"] == "text"
    assert "none holds GPU memory" in captured.stdout and "%gpu_reset NAME" in captured.stdout
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "keep mod")
    assert "keep" not in shell.user_ns and "mod" not in shell.user_ns
    assert not alive(shell, "keep") and not alive(shell, "mod")


# ---------------------------------------------------------------- dry run


def test_dry_run_changes_nothing(shell, run_cell):
    result = cell(run_cell, f"t = torch.zeros({N}); refs['out'] = weakref.ref(t); t")
    run_cell(f"del t\ndrop = torch.ones({N}); refs['drop'] = weakref.ref(drop)")
    fail_cell(run_cell, FAILING_FUNCTION)
    out_before = dict(shell.user_ns["Out"])
    names_before = set(shell.user_ns)
    last_value = sys.last_value
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "drop --dry-run")
    assert alive(shell, "out") and alive(shell, "drop") and alive(shell, "frame")
    assert dict(shell.user_ns["Out"]) == out_before
    assert set(shell.user_ns) == names_before
    assert sys.last_value is last_value
    assert "would drop" in captured.stdout and "nothing changed" in captured.stdout
    report = reset.gpu_reset("drop", dry_run=True, shell=shell)
    assert report.dry_run
    assert f"Out[{result}]" in report.dropped_names and "drop" in report.dropped_names
    assert report.estimated_bytes >= 3 * N * 4
    assert report.released_bytes == 0
    assert alive(shell, "out") and alive(shell, "drop") and alive(shell, "frame")
    del last_value


# ---------------------------------------------------------------- bad input


def _snapshot(shell):
    return (
        dict(shell.user_ns["Out"]),
        set(shell.user_ns),
        getattr(sys, "last_value", None),
    )


@pytest.mark.parametrize(
    "line, message",
    [
        ("no_such_variable", "no such variable"),
        ("keep no_such_variable", "no such variable"),
        ("keep --all", "--all and NAME contradict each other: give one"),
        ("--bogus", ""),
        ("keep --dry-run=3", ""),
        ("1abc", "not a variable name"),
        ("Out", "IPython's own"),
    ],
)
def test_bad_input_is_a_usage_error_and_changes_nothing(shell, run_cell, line, message):
    run_cell(f"t = torch.zeros({N}); refs['out'] = weakref.ref(t); t")
    run_cell(f"del t\nkeep = torch.ones({N}); refs['keep'] = weakref.ref(keep)")
    fail_cell(run_cell, FAILING_FUNCTION)
    before = _snapshot(shell)
    with pytest.raises(UsageError) as raised:
        shell.run_line_magic("gpu_reset", line)
    assert message in str(raised.value)
    assert _snapshot(shell) == before
    assert alive(shell, "out") and alive(shell, "keep") and alive(shell, "frame")
    del before


def test_api_rejects_bad_input_with_value_error(shell, run_cell):
    run_cell("keep = 1")
    with pytest.raises(ValueError, match="no such variable"):
        reset.gpu_reset("nope", shell=shell)
    with pytest.raises(ValueError, match="not both"):
        reset.gpu_reset("keep", all_vars=True, shell=shell)
    with pytest.raises(TypeError):
        reset.gpu_reset(dry_run="yes", shell=shell)
    with pytest.raises(ValueError, match="keep: named more than once"):
        reset.gpu_reset("keep", "keep", shell=shell)
    assert shell.user_ns["keep"] == 1


def test_usage_error_in_a_cell_shows_no_traceback(shell, run_cell):
    with capture_output() as captured:
        result = run_cell("%gpu_reset missing_name")
    assert isinstance(result.error_in_exec, UsageError)
    assert "Traceback" not in captured.stdout + captured.stderr


def test_magic_never_shows_a_raw_traceback(shell, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(reset, "gpu_reset", explode)
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "")
    assert "gpu_reset: failed: RuntimeError" in captured.stdout
    assert "restart the runtime" in captured.stdout


# ---------------------------------------------------------------- CUDA state and report


def test_broken_context_skips_cuda_steps_and_says_restart(shell, run_cell):
    run_cell(f"t = torch.zeros({N}); refs['out'] = weakref.ref(t); t")
    run_cell("del t")
    cuda_health.mark_broken("CUDA error: device-side assert triggered")
    try:
        with capture_output() as captured:
            shell.run_line_magic("gpu_reset", "")
        report = reset.gpu_reset(shell=shell)
    finally:
        cuda_health.clear()
    assert report.restart_required and report.cuda_state == "broken"
    assert not any("empty_cache" in step for step in report.steps)
    assert "restart the runtime" in captured.stdout
    assert not alive(shell, "out"), "the device-agnostic steps still ran"


@pytest.fixture
def fake_torch(monkeypatch):
    """A torch stand-in whose CUDA has started (see tests/fake_cuda.py)."""
    with fake_torches(monkeypatch) as use:
        yield use


def test_busy_gpu_waits_then_says_run_again_and_never_restart(shell, fake_torch, monkeypatch):
    from colab_gpu_guard.reset import plan

    stub = fake_torch()
    monkeypatch.setattr(plan, "SYNC_TIMEOUT_S", 0.2)
    stub.cuda.release.clear()  # a long kernel queued by the last cell is still running
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "")
    text = captured.stdout
    assert re.search(
        r"WARNING: the GPU is still running CUDA work queued by the last cell "
        r"\(torch\.cuda\.synchronize\(\) on cuda:0 has not returned after 0\.\d s\), so the "
        r"cached memory was not emptied; run %gpu_reset again when that work finishes",
        text,
    ), text
    assert "restart" not in text.lower() and stub.cuda.emptied == 0
    report = reset.gpu_reset(shell=shell)
    assert report.cuda_state == "busy" and not report.restart_required
    assert stub.cuda.synced == [0]  # one synchronise, still the first
    dry = reset.gpu_reset(dry_run=True, shell=shell)
    assert any(
        note.endswith("; %gpu_reset waits up to 0.2 s for it before emptying the cache")
        for note in dry.notes
    ), dry.notes
    stub.cuda.release.set()  # the kernel finishes
    assert cuda_health._running.done.wait(5)
    done = reset.gpu_reset(shell=shell)
    assert done.cuda_state == "ok" and not done.warnings
    assert "torch.cuda.synchronize() on cuda:0" in done.steps
    assert "torch.cuda.empty_cache() (cuda:0: the devices with a CUDA context)" in done.steps
    assert stub.cuda.emptied == 1 and cuda_health.broken_reason() is None


def test_reset_synchronises_only_devices_with_a_context(shell, fake_torch):
    stub = fake_torch(count=2, contexts=(1,))
    report = reset.gpu_reset(shell=shell)
    assert stub.cuda.synced == [1]
    assert "torch.cuda.synchronize() on cuda:1" in report.steps


def test_reset_clears_a_mark_the_context_proves_wrong(shell, fake_torch):
    stub = fake_torch()
    cuda_health.mark_broken("CUDA error: device-side assert triggered (from a child process)")
    report = reset.gpu_reset(shell=shell)
    assert report.cuda_state == "ok" and not report.restart_required
    assert stub.cuda.emptied == 1 and cuda_health.broken_reason() is None


def test_reset_on_a_real_sticky_error_says_restart(shell, fake_torch):
    stub = fake_torch()
    stub.cuda.error = RuntimeError("CUDA error: an illegal memory access was encountered")
    report = reset.gpu_reset(shell=shell)
    assert report.cuda_state == "broken" and report.restart_required
    assert report.warnings == [
        "CUDA steps skipped: RuntimeError: CUDA error: an illegal memory access was "
        f"encountered; {cuda_health.RESTART_ADVICE}"
    ]
    assert stub.cuda.emptied == 0


def test_reset_in_a_forked_child_says_so(shell, fake_torch):
    stub = fake_torch(bad_fork=True)
    report = reset.gpu_reset(shell=shell)
    assert report.cuda_state == "forked" and not report.restart_required
    assert f"no CUDA cache to empty: {cuda_health.FORKED_DETAIL}" in report.notes
    assert stub.cuda.synced == [] and stub.cuda.emptied == 0


def test_report_text_html_and_json(shell, run_cell):
    run_cell(f"cache = {{'<b>x</b>': torch.ones({N})}}; cache['<b>x</b>']")
    fail_cell(run_cell, FAILING_FUNCTION)
    report = reset.gpu_reset(dry_run=True, shell=shell)
    text = str(report)
    assert "would drop" in text and "cache['<b>x</b>']" in text
    page = report._repr_html_()
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page
    # the names shown are those a user types: the exception's label stays in the JSON
    assert "<exception" not in page and "&lt;exception" not in page
    data = json.loads(json.dumps(report.to_dict()))
    assert data["dry_run"] is True and data["leftovers"][0]["name"] == "cache['<b>x</b>']"
    assert any(name.startswith("<exception") for name in data["dropped_names"])
    shell.user_ns.pop("cache", None)


def test_help_is_the_docstring(shell):
    doc = shell.find_line_magic("gpu_reset").__doc__
    assert "Example: %gpu_reset" in doc and "--dry-run" in doc and "--all" in doc


def test_outside_ipython_uses_the_given_namespace():
    namespace = {"big": torch.ones(10), "small": 1}
    ref = weakref.ref(namespace["big"])
    report = reset.gpu_reset("big", namespace=namespace)
    assert "big" not in namespace and namespace["small"] == 1
    assert ref() is None
    assert report.dropped["user variables"] == 1


# ---------------------------------------------------------------- GPU truth


@pytest.mark.gpu
def test_cuda_tensor_held_by_out_and_traceback_is_freed(shell, run_cell):
    torch.cuda.init()
    reset.gpu_reset(shell=shell)
    base = torch.cuda.memory_allocated()
    run_cell("x = torch.ones(64 * 2**20 // 4, device='cuda'); x")  # 64 MiB
    run_cell("del x")
    fail_cell(
        run_cell,
        "def f():\n    y = torch.ones(64 * 2**20 // 4, device='cuda')\n    raise ValueError\nf()",
    )
    assert torch.cuda.memory_allocated() >= base + 128 * 2**20
    report = reset.gpu_reset(shell=shell)
    assert torch.cuda.memory_allocated() == base
    assert report.devices and report.devices[0].freed >= 128 * 2**20
    assert any("empty_cache" in step for step in report.steps)


OOM_SCRIPT = r"""
import sys
import torch
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "colab_gpu_guard")
try:  # the advisor releases an OOM's frames by itself: test %gpu_reset alone
    shell.run_line_magic("gpu_advice", "off")
except Exception:
    pass
run = lambda source: shell.run_cell(source, store_history=True)
run("import torch; torch.cuda.init()")
run("base = torch.cuda.memory_allocated()")
run('''
def train():
    held = torch.ones(256 * 2**20 // 4, device="cuda")
    total = torch.cuda.get_device_properties(0).total_memory
    too_big = torch.empty(2 * total, dtype=torch.uint8, device="cuda")
train()
''')
after_oom = torch.cuda.memory_allocated()
shell.run_line_magic("gpu_reset", "")
print("RESULT", shell.user_ns["base"], after_oom, torch.cuda.memory_allocated(),
      type(sys.last_value).__name__ if hasattr(sys, "last_value") else "none")
"""


@pytest.mark.gpu
@pytest.mark.slow
def test_real_oom_then_reset_returns_to_pre_oom_level(tmp_path):
    import os
    import subprocess

    script = tmp_path / "oom.py"
    script.write_text(OOM_SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env
    )
    line = [row for row in done.stdout.splitlines() if row.startswith("RESULT")]
    assert line, done.stdout + done.stderr
    _, base, after_oom, after_reset, last = line[0].split()
    assert int(after_oom) >= int(base) + 256 * 2**20, "the failed frame held its tensor"
    assert int(after_reset) == int(base)
    assert last == "none"
