"""%%gpu_trace and trace_cell against a real CUDA device, in the real IPython shell: the
bytes at the peak by line equal what the cell allocated (torch's memory_allocated and the
tensors' own storages), what it kept is named, an out-of-memory run names the line that
failed (in the report and at the failure), recording is off after the cell, and a user's
own `_record_memory_history` is left on with its history. Skipped without a CUDA device."""

from __future__ import annotations

import pickle

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard import trace
from colab_gpu_guard.trace.kinds import BEFORE, CELL, OWN, USERS

pytestmark = pytest.mark.gpu

MiB = 2**20
NAMES = ("tracing", "a", "b", "before", "at_peak", "after", "x", "keep", "rows", "free")


@pytest.fixture
def shown(captured) -> str:
    """What the user sees: printed lines and the text form of what was displayed (the
    report is displayed, both text and HTML: IPython's capture keeps it apart from stdout)."""
    displayed = "".join(output.data.get("text/plain", "") + "\n" for output in captured.outputs)
    return captured.stdout + displayed


def cuda(ip, run_cell):
    torch = pytest.importorskip("torch")
    assert run_cell(
        "import torch\ntorch.cuda.init()\nfrom colab_gpu_guard.trace import at_failure"
    ).success
    yield torch
    torch.cuda.memory._record_memory_history(None)
    for name in NAMES:
        ip.user_ns.pop(name, None)
    ip.run_line_magic("gpu_reset", "")


def recording_on(torch) -> bool:
    return bool(torch._C._cuda_isHistoryEnabled())


def by_line(lines) -> dict[int, int]:
    return {line.where.line: line.nbytes for line in lines if line.where.kind == CELL}


def test_bytes_at_the_peak_by_line_are_what_the_cell_allocated(cuda, run_cell, ip):
    torch = cuda
    result = run_cell(
        "from colab_gpu_guard import trace_cell\n"  # 1
        "with trace_cell() as tracing:\n"  # 2
        "    before = torch.cuda.memory_allocated()\n"  # 3
        "    a = torch.empty(8 * 2**20, dtype=torch.uint8, device='cuda')\n"  # 4
        "    b = torch.empty(4 * 2**20, dtype=torch.uint8, device='cuda')\n"  # 5
        "    at_peak = torch.cuda.memory_allocated()\n"  # 6
        "    del b\n"  # 7
        "    after = torch.cuda.memory_allocated()\n"  # 8
    )
    assert result.success, result.error_in_exec
    ns = ip.user_ns
    report = ns["tracing"].report
    assert report.recording == OWN and not recording_on(torch)
    (device,) = report.devices
    assert device.start_allocated == ns["before"]
    assert device.peak_allocated == ns["at_peak"]
    assert device.end_allocated == ns["after"]
    lines = by_line(device.at_peak)
    assert lines == {4: 8 * MiB, 5: 4 * MiB}
    cells = [line.where.cell for line in device.at_peak if line.where.kind == CELL]
    assert cells == [result.execution_count] * 2
    before = [line.nbytes for line in device.at_peak if line.where.kind == BEFORE]
    assert sum(before) == ns["before"]
    assert by_line(device.kept) == {4: ns["a"].untyped_storage().nbytes()}
    assert device.kept[0].names == ("a",)


def test_the_magic_shows_the_line_and_saves_torchs_snapshot(cuda, run_cell, tmp_path):
    torch = cuda
    saved = tmp_path / "trace.pickle"
    with capture_output() as captured:
        result = run_cell(
            f"%%gpu_trace --save {saved}\nx = torch.ones(2**20, device='cuda')  # 4 MiB\n"
        )
    assert result.success and not recording_on(torch)
    n = result.execution_count
    assert f"[{n}] line 2  x = torch.ones(2**20, device='cuda')  # 4 MiB" in shown(captured)
    from torch.cuda import _memory_viz

    with open(saved, "rb") as file:
        snapshot = pickle.load(file)
    assert "Segment size mismatch" not in _memory_viz.segsum(snapshot)


def test_an_out_of_memory_run_names_the_line_that_failed(cuda, run_cell, ip):
    torch = cuda
    with capture_output() as captured:
        result = run_cell(
            "%%gpu_trace\n"
            "keep = torch.empty(64 * 2**20, dtype=torch.uint8, device='cuda')\n"
            "try:\n"
            "    x = torch.empty(2**50, dtype=torch.uint8, device='cuda')\n"
            "except torch.cuda.OutOfMemoryError as error:\n"
            "    found = at_failure(error)  # as the advisor asks, in the failing cell\n"
            "    raise\n"
        )
    assert isinstance(result.error_in_exec, torch.cuda.OutOfMemoryError)
    n = result.execution_count
    assert f"CUDA out of memory at [{n}] line 4  x = torch.empty(2**50" in shown(captured)
    found = ip.user_ns.pop("found")
    assert found is not None and found.requested >= 2**50
    assert found.lines[0].where == (CELL, n, 2, "", found.lines[0].where.text)
    assert found.lines[0].nbytes == 64 * MiB
    assert found.text.startswith(f"at the failure: 64 MiB from `[{n}] line 2  keep = ")
    assert trace.at_failure(result.error_in_exec) is None  # handed out once
    assert not recording_on(torch)


def test_a_users_own_recording_is_left_on_with_its_history(cuda, run_cell, ip):
    torch = cuda
    torch.cuda.memory._record_memory_history("all", max_entries=10_000)
    try:
        assert run_cell("keep = torch.empty(2**20, dtype=torch.uint8, device='cuda')").success
        address = ip.user_ns["keep"].untyped_storage().data_ptr()
        with capture_output() as captured:
            result = run_cell(
                "%%gpu_trace\nx = torch.empty(3 * 2**20, dtype=torch.uint8, device='cuda')"
            )
        assert result.success
        assert "your own torch.cuda.memory._record_memory_history recording was on" in (
            shown(captured)
        )
        assert recording_on(torch)
        history = torch.cuda.memory._snapshot()["device_traces"][0]
        assert any(e["action"] == "alloc" and e["addr"] == address for e in history)
        n = result.execution_count
        assert f"3 MiB  1 allocation     [{n}] line 2" in shown(captured)
    finally:
        torch.cuda.memory._record_memory_history(None)


def test_the_line_form_traces_each_following_cell_until_off(cuda, run_cell):
    torch = cuda
    with capture_output() as captured:
        run_cell("%gpu_trace on")
        result = run_cell("x = torch.empty(5 * 2**20, dtype=torch.uint8, device='cuda')")
        run_cell("%gpu_trace off")
    assert not recording_on(torch)
    assert f"[{result.execution_count}] line 1  x = torch.empty(5" in shown(captured)
    assert shown(captured).count("gpu_trace: cell [") == 1
    with capture_output() as captured:
        run_cell("x = torch.empty(2**20, device='cuda')")
    assert "gpu_trace" not in shown(captured)


def test_cell_options_while_every_cell_is_traced_are_refused(cuda, run_cell, ip):
    """With `%gpu_trace on`, `%%gpu_trace --save F` would run traced without saving: a
    usage error naming the options, the cell not run."""
    run_cell("%gpu_trace on")
    try:
        with capture_output() as captured:
            run_cell("%%gpu_trace --save t.pickle --names\nnot_run_traced = 1")
        assert "not_run_traced" not in ip.user_ns
        assert "--save, --names: every cell is traced already" in shown(captured)
    finally:
        run_cell("%gpu_trace off")


def test_the_api_reads_a_users_window_only(cuda):
    torch = cuda
    torch.cuda.memory._record_memory_history("all", max_entries=10_000)
    try:
        first = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
        with trace.trace_cell(names=False) as tracing:
            second = torch.empty(6 * MiB, dtype=torch.uint8, device="cuda")
        report = tracing.report
        assert report.recording == USERS
        (device,) = report.devices
        assert device.peak_allocated - device.start_allocated == 6 * MiB
        assert device.kept_nbytes == second.untyped_storage().nbytes()
        del first, second
    finally:
        torch.cuda.memory._record_memory_history(None)


def test_a_second_traced_cell_is_recorded_afresh(cuda, run_cell):
    """Tensors kept from a traced cell keep their stacks after recording stops: the next
    traced cell must not take that for a recording of the user's."""
    torch = cuda
    assert run_cell("%%gpu_trace\na = torch.empty(2**20, dtype=torch.uint8, device='cuda')").success
    with capture_output() as captured:
        result = run_cell("%%gpu_trace\nb = torch.empty(2**21, dtype=torch.uint8, device='cuda')")
    assert result.success and not recording_on(torch)
    assert "your own" not in shown(captured)
    assert "recorded for this cell only" in shown(captured)
    assert f"2 MiB  1 allocation     [{result.execution_count}] line 2" in shown(captured)


def test_a_full_history_says_so(cuda, run_cell):
    with capture_output() as captured:
        result = run_cell(
            "%%gpu_trace --max-entries 8\n"
            "x = [torch.empty(2**20, dtype=torch.uint8, device='cuda') for _ in range(20)]\n"
        )
    assert result.success
    assert "raise --max-entries to see its start" in shown(captured)
