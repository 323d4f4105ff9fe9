"""%%gpu_trace and %gpu_trace on|off in a real IPython shell: without CUDA one line and the
cell runs untraced (its value shown, its errors its own, its lines numbered as the cell
shows them); usage errors change nothing; cells named as IPython shows them."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from colab_gpu_guard.notebook_refs import cell_files


def run(ip, source: str):
    with capture_output() as captured:
        result = ip.run_cell(source, store_history=True)
    return result, captured


@pytest.mark.cpu_only
def test_without_cuda_one_line_and_the_cell_runs_untraced(ip):
    pytest.importorskip("torch")
    result, captured = run(ip, "%%gpu_trace\ntraced_value = 6\ntraced_value * 7\n")
    assert result.success and result.result == 42
    assert ip.user_ns["traced_value"] == 6
    lines = captured.stdout.splitlines()
    assert lines[0].startswith("gpu_trace: ")
    assert lines[0].endswith("; the cell ran untraced")
    assert ("CPU-only build" in lines[0]) or ("no CUDA GPU" in lines[0])
    assert lines[1:] == [f"Out[{result.execution_count}]: 42"] or len(lines) == 1


@pytest.mark.cpu_only
def test_without_cuda_a_save_says_no_file_was_written(ip, tmp_path):
    pytest.importorskip("torch")
    target = tmp_path / "cell.pickle"
    result, captured = run(ip, f"%%gpu_trace --save {target}\nsaved_value = 1\n")
    assert result.success and ip.user_ns["saved_value"] == 1
    line = captured.stdout.splitlines()[0]
    assert line.endswith(f"; the cell ran untraced (nothing written to {target})")
    assert not target.exists()


@pytest.mark.cpu_only
def test_the_line_form_without_cuda_says_so_and_stays_off(ip):
    pytest.importorskip("torch")
    _, captured = run(ip, "%gpu_trace on")
    assert captured.stdout.strip().endswith("; cells run untraced")
    _, captured = run(ip, "%gpu_trace")
    assert "tracing every cell is off" in captured.stdout
    _, captured = run(ip, "%gpu_trace off")
    assert captured.stdout.strip() == "gpu_trace: was not on"


def test_a_failing_cell_fails_with_its_own_line(ip):
    result, captured = run(ip, "%%gpu_trace\nfirst = 1\nraise ValueError('boom')\n")
    assert isinstance(result.error_in_exec, ValueError)
    assert ip.user_ns["first"] == 1
    text = captured.stdout + captured.stderr
    assert "ValueError" in text and "boom" in text
    assert "raise ValueError('boom')" in text


def test_the_body_is_named_as_the_cell_with_its_line_numbers(ip):
    result, _ = run(ip, "%%gpu_trace\n\ndef traced_f():\n    return 1\n")
    assert result.success
    code = ip.user_ns["traced_f"].__code__
    found = cell_files.cell_line(code.co_filename, code.co_firstlineno, ip)
    assert found == (result.execution_count, 3)  # the magic's line is line 1
    assert cell_files.source_line(code.co_filename, 4) == "return 1"


def test_a_plain_cell_is_named_by_its_number(ip):
    result, _ = run(ip, "def plain_f():\n    return 2\n")
    code = ip.user_ns["plain_f"].__code__
    assert cell_files.cell_line(code.co_filename, 2, ip) == (result.execution_count, 2)
    assert cell_files.cell_line(__file__, 1, ip) is None


def test_ipykernels_hashed_cell_files_are_named_by_number(ip):
    """ipykernel names a cell's file by a hash of its text (IPython 7.34 keeps no map from
    it to the cell's number; 8+ does): both give the number."""
    compiler = pytest.importorskip("ipykernel.compiler")
    saved = ip.compile
    ip.compile = compiler.XCachingCompiler()
    try:
        result, _ = run(ip, "def hashed_f():\n    return 3\n")
    finally:
        ip.compile = saved
    filename = ip.user_ns["hashed_f"].__code__.co_filename
    assert filename.endswith(".py") and "ipykernel_" in filename
    saved.__dict__.get("_filename_map", {}).pop(filename, None)  # as IPython 7.34: no map
    ip.compile = compiler.XCachingCompiler()
    try:
        assert cell_files.cell_line(filename, 2, ip) == (result.execution_count, 2)
    finally:
        ip.compile = saved


def test_remembered_files_keep_their_offset():
    cell_files.remember("<made-up-cell>", 9, line_offset=1)
    assert cell_files.cell_line("<made-up-cell>", 2) == (9, 3)


@pytest.mark.parametrize(
    "line, message",
    [
        ("--max-entries 0", "--max-entries must be 1 or more"),
        ("--save x.pickle on", "--save is for one cell"),
        ("maybe", "argument on|off: invalid choice"),
    ],
)
def test_bad_input_changes_nothing(ip, line, message):
    with pytest.raises(UsageError, match=message):
        ip.run_line_magic("gpu_trace", line)


def test_save_to_a_missing_folder_is_refused_before_the_cell_runs(ip):
    result, captured = run(ip, "%%gpu_trace --save /no/such/folder/t.pickle\nnot_run = 1\n")
    assert "not_run" not in ip.user_ns
    assert "--save: no folder '/no/such/folder'" in captured.stdout + captured.stderr


def test_cell_options_while_every_cell_is_traced_are_refused(ip):
    """`%gpu_trace on` (which needs CUDA: its state is set here as it leaves it) traces
    every cell; `%%gpu_trace --save F` would run traced without saving: refused, not run."""
    from colab_gpu_guard.ipython.magics.trace import TraceMagics

    magics = ip.magics_manager.registry[TraceMagics.__name__]
    magics.following = object()  # what `on` keeps; nothing reads it before the refusal
    try:
        result, captured = run(ip, "%%gpu_trace --max-entries 10\nnot_run = 1\n")
    finally:
        magics.following = None
    assert "not_run" not in ip.user_ns
    assert "--max-entries: every cell is traced already" in captured.stdout + captured.stderr


def test_on_is_not_a_cell_option(ip):
    result, captured = run(ip, "%%gpu_trace on\nnot_run = 1\n")
    assert "not_run" not in ip.user_ns
    assert "'on' is for the line form: %gpu_trace on" in captured.stdout + captured.stderr


def test_unload_removes_the_magic(ip):
    ip.run_line_magic("unload_ext", "colab_gpu_guard")
    try:
        assert ip.find_cell_magic("gpu_trace") is None
        assert ip.find_line_magic("gpu_trace") is None
    finally:
        ip.run_line_magic("load_ext", "colab_gpu_guard")
