"""A cell's allocator history replayed, on constructed snapshots in torch's format (checked
against torch's own tools in test_trace_builder): every figure against the constructed
allocator's own counters, lines named from real cells run in the real IPython shell."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from colab_gpu_guard.trace import SavedCell, oom, saved_report
from colab_gpu_guard.trace.kinds import BEFORE, CELL, LIBRARY, MODULE, NO_STACK, OWN, USERS
from colab_gpu_guard.trace.lines import Places
from colab_gpu_guard.trace.recording import Recorder
from colab_gpu_guard.trace.records import TraceReport
from colab_gpu_guard.trace.replay import TIMELINE_POINTS, replay, window_start
from tests.shared_shell import global_shell
from tests.trace_allocator import Allocator, frames

MiB = 1 << 20


@pytest.fixture(scope="module")
def cell():
    """A real cell of the real shell: its number, its file name, the line of `step`'s body."""
    ip = global_shell()
    result = ip.run_cell(
        "def step():\n    out = [0] * 3  # allocate\n    return out\n"
        "cell_file = step.__code__.co_filename\n",
        store_history=True,
    )
    assert result.error_in_exec is None
    yield result.execution_count, ip.user_ns["cell_file"]
    for name in ("step", "cell_file"):
        ip.user_ns.pop(name, None)


@pytest.fixture
def module_file(tmp_path):
    path = tmp_path / "mymodel.py"
    path.write_text(
        "def forward(x):\n    return x\n\n\ndef layer(x):\n    h = forward(x)  # here\n"
    )
    return str(path)


def _torch_file() -> str:
    return os.path.join(os.path.dirname(os.__file__), "functools.py")  # the standard library


def _fake_recorder(mode: str = OWN, max_entries: int = 100_000, before=None) -> Recorder:
    recorder = Recorder(torch=None, max_entries=max_entries, shell=global_shell())
    recorder.mode = mode
    recorder.before = before or []
    return recorder


def test_peak_by_line_matches_the_allocators_own_counts(cell):
    number, filename = cell
    a = Allocator(record=False)
    a.alloc(8 * MiB)  # before the cell: no history of it
    a.record = True
    line2 = frames((filename, 2, "step"), (filename, 5, "<module>"))
    line3 = frames((filename, 3, "step"))
    x = a.alloc(4 * MiB, line2)
    y = a.alloc(4 * MiB, line2)
    t = a.alloc(1 * MiB - 100, line3)  # counted as torch counts it: 1 MiB
    peak = a.allocated()
    a.free(t)
    a.free(y)
    end = a.allocated()
    trace = replay(a.snapshot(), 0, places=Places(global_shell()))
    assert trace.start_allocated == 8 * MiB
    assert trace.peak_allocated == peak == 17 * MiB
    assert trace.end_allocated == end == 12 * MiB
    assert trace.end_reserved == a.reserved() and trace.start_reserved == 8 * MiB
    assert trace.peak_reserved == 17 * MiB
    by = {(line.where.kind, line.where.line): line for line in trace.at_peak}
    assert by[(CELL, 2)].nbytes == 8 * MiB and by[(CELL, 2)].count == 2
    assert by[(CELL, 2)].where.cell == number
    assert by[(CELL, 2)].where.text == "out = [0] * 3  # allocate"
    assert by[(CELL, 3)].nbytes == 1 * MiB
    assert by[(BEFORE, 0)].nbytes == 8 * MiB
    assert sum(line.nbytes for line in trace.at_peak) == peak
    assert [(line.where.line, line.nbytes, line.count) for line in trace.kept] == [(2, 4 * MiB, 1)]
    assert trace.kept[0].addresses == (x,)


def test_a_reused_address_is_the_cells_allocation(cell):
    _, filename = cell
    a = Allocator(record=False)
    old = a.alloc(2 * MiB)
    a.record = True
    a.free(old)
    new = a.alloc(2 * MiB, frames((filename, 2, "step")))
    assert new == old  # the cached segment again
    trace = replay(a.snapshot(), 0, places=Places(global_shell()))
    assert trace.start_allocated == 2 * MiB and trace.end_allocated == 2 * MiB
    assert [(line.where.kind, line.nbytes) for line in trace.kept] == [(CELL, 2 * MiB)]


def test_module_lines_under_the_notebook_line_and_folded_frames(cell, module_file):
    _, filename = cell
    a = Allocator()
    stack = frames(
        (_torch_file(), 10, "wrapper"),
        (module_file, 6, "layer"),
        (filename, 2, "step"),
    )
    a.alloc(3 * MiB, stack)
    a.alloc(1 * MiB, frames((module_file, 6, "layer")))  # no cell on the stack
    a.alloc(5 * MiB, frames((_torch_file(), 10, "wrapper")))  # only a library's frames
    a.alloc(2 * MiB)  # no stack recorded at all
    trace = replay(a.snapshot(), 0, places=Places(global_shell()))
    kinds = {line.where.kind: line for line in trace.at_peak}
    assert kinds[CELL].inner[0].where.kind == MODULE
    assert kinds[CELL].inner[0].where.text == "h = forward(x)  # here"
    assert (kinds[CELL].inner[0].nbytes, kinds[CELL].nbytes) == (3 * MiB, 3 * MiB)
    assert kinds[MODULE].nbytes == 1 * MiB and kinds[MODULE].where.line == 6
    assert kinds[LIBRARY].nbytes == 5 * MiB
    assert kinds[NO_STACK].nbytes == 2 * MiB
    assert [line.where.kind for line in trace.at_peak] == [LIBRARY, CELL, NO_STACK, MODULE]


def test_the_timeline_is_bounded_and_keeps_the_peak(cell):
    _, filename = cell
    a = Allocator()
    here = frames((filename, 2, "step"))
    held = []
    for i in range(600):
        held.append(a.alloc(MiB if i != 377 else 64 * MiB, here))
        if i == 377:
            a.free(held.pop())
        elif len(held) > 3:
            a.free(held.pop(0))
    trace = replay(a.snapshot(), 0, places=Places(global_shell()))
    assert len(trace.timeline) <= TIMELINE_POINTS
    assert max(point.allocated for point in trace.timeline) == trace.peak_allocated
    assert any(point.event == trace.peak_event for point in trace.timeline)
    assert trace.peak_allocated == 67 * MiB  # the three held plus the 64 MiB one
    assert trace.landmarks[0].nbytes == 64 * MiB or 64 * MiB in [m.nbytes for m in trace.landmarks]


def test_a_users_recording_is_read_from_where_the_cell_began(cell):
    _, filename = cell
    a = Allocator()
    a.alloc(6 * MiB, frames((filename, 3, "step")))  # the user's earlier cell
    before = [list(trace[-1:]) for trace in a.snapshot()["device_traces"]]
    a.alloc(2 * MiB, frames((filename, 2, "step")))
    snapshot = a.snapshot()
    start, lost = window_start(before[0], snapshot["device_traces"][0])
    assert (start, lost) == (2, False)  # segment_alloc + alloc before the cell
    report = _fake_recorder(USERS, before=before).analyse(snapshot)
    (trace,) = report.devices
    assert trace.event_count == 2 and trace.start_allocated == 6 * MiB
    assert [line.where.line for line in trace.kept] == [2]
    assert "your own torch.cuda.memory._record_memory_history recording was on" in str(report)
    # the ring buffer overwrote the cell's start: the whole history is read, and said so
    assert window_start([{"action": "alloc", "addr": 1, "size": 2, "time_us": 3}], [])[1]


def test_a_full_history_says_its_start_is_gone(cell):
    _, filename = cell
    a = Allocator()
    for _ in range(3):
        a.alloc(MiB, frames((filename, 2, "step")))
    report = _fake_recorder(OWN, max_entries=6).analyse(a.snapshot())
    assert report.devices[0].dropped
    assert "raise --max-entries" in str(report)


def test_an_oom_names_the_line_that_asked(cell):
    number, filename = cell
    a = Allocator()
    a.alloc(6 * MiB, frames((filename, 2, "step")))
    a.oom(8 << 30, 512 * MiB, frames((filename, 3, "step")))
    report = _fake_recorder().analyse(a.snapshot())
    text = str(report)
    assert f"CUDA out of memory at [{number}] line 3  return out: asked for 8 GiB with 512 MiB" in (
        text
    )


def test_the_views(cell):
    number, filename = cell
    a = Allocator()
    a.alloc(5 * MiB, frames((filename, 2, "step")))
    a.alloc(MiB, frames(("/tmp/evil\x1b[2J.py", 1, "f")))
    recorder = _fake_recorder()
    recorder.cell = number
    report = recorder.analyse(a.snapshot())
    text = str(report)
    assert text.splitlines()[0].startswith(f"gpu_trace: cell [{number}] on cuda:0: peak 6 MiB")
    assert "5 MiB  1 allocation" in text and f"[{number}] line 2  out = [0] * 3" in text
    assert "\x1b" not in text and "\\x1b" in text
    page = report._repr_html_()
    assert "<script" not in page and "var(--jp-" in page and "<svg" in page
    assert "\x1b" not in page
    data = json.loads(json.dumps(report.to_dict()))
    assert TraceReport.from_dict(data) == report
    with pytest.raises(ValueError, match="schema"):
        TraceReport.from_dict({"schema_version": 99})


def test_at_failure_hands_out_the_last_firing_once(cell):
    number, filename = cell
    a = Allocator()
    a.alloc(6 * MiB, frames((filename, 2, "step")))
    a.alloc(MiB, frames((filename, 3, "step")))
    oom._last = oom._Firing(0, 8 << 30, 16 << 30, 0, a.snapshot(), None)

    class OutOfMemoryError(RuntimeError):
        pass

    assert oom.at_failure(ValueError("not memory")) is None  # kept for its own error
    found = oom.at_failure(OutOfMemoryError("CUDA out of memory"))
    assert found is not None and found.allocated == 7 * MiB
    assert found.text == (
        f"at the failure: 6 MiB from `[{number}] line 2  out = [0] * 3  # allocate`; "
        f"1 MiB from `[{number}] line 3  return out`"
    )
    assert oom.at_failure(OutOfMemoryError("again")) is None  # handed out once
    oom._last = oom._Firing(0, 8 << 30, 16 << 30, 0, a.snapshot(), None)
    assert oom.at_failure(RuntimeError("CUBLAS_STATUS_ALLOC_FAILED"), disguised=True)
    oom._last = oom._Firing(0, 8 << 30, 16 << 30, 0, a.snapshot(), number)  # an earlier cell
    assert oom.at_failure(OutOfMemoryError("CUDA out of memory")) is None


def test_a_saved_snapshot_names_the_cells_of_the_kernel_it_came_from():
    a = Allocator()
    a.alloc(6 * MiB, frames(("/tmp/ipykernel_77/4242.py", 2, "<module>")))
    cells = {"/tmp/ipykernel_77/4242.py": SavedCell(7, "batch = make()\nlogits = model(batch)")}
    report = saved_report(a.snapshot(), cells)
    text = str(report)
    assert "6 MiB  1 allocation     [7] line 2  logits = model(batch)" in text
    assert "(read from a saved snapshot: its whole recorded history)" in text
    assert report.devices[0].event_count == 2 and not report.devices[0].dropped


def test_a_users_recording_without_history_is_left_and_said():
    a = Allocator(record=False)
    a.alloc(MiB, frames(("/tmp/x.py", 1, "f")))  # stacks kept, no events: enabled="state"
    report = _fake_recorder(USERS, before=[[]]).analyse(a.snapshot())
    assert str(report) == (
        "gpu_trace: your own torch.cuda.memory._record_memory_history recording keeps no "
        "history of events (enabled='state'): left as it is, with nothing to read; the cell "
        "ran untraced"
    )


def test_a_window_with_fewer_allocations_than_torch_counted_says_its_start_is_gone(cell):
    _, filename = cell
    a = Allocator()
    a.alloc(MiB, frames((filename, 2, "step")))
    report = _fake_recorder(USERS, before=[[]]).analyse(a.snapshot(), made={0: 5})
    assert report.devices[0].dropped
    assert "its start is not in it, so the figures cover only what it kept" in str(report)
    assert "its start is not in it" in report._repr_html_()
    complete = _fake_recorder(USERS, before=[[]]).analyse(a.snapshot(), made={0: 1})
    assert not complete.devices[0].dropped


def test_what_a_cell_kept_is_named_by_the_variables_that_hold_it(cell):
    """The join of kept lines with find_leftovers' names, on real CPU tensors (a storage's
    address is what torch's allocator records)."""
    torch = pytest.importorskip("torch")
    from colab_gpu_guard.trace.recording import link_names

    _, filename = cell
    losses = [torch.ones(4096), torch.ones(2048)]
    namespace = {"losses": losses, "other": torch.zeros(1024)}
    a = Allocator()
    a.alloc(MiB, frames((filename, 2, "step")))
    report = _fake_recorder().analyse(a.snapshot())
    trace = report.devices[0]
    line = dataclasses.replace(
        trace.kept[0], addresses=tuple(t.untyped_storage().data_ptr() for t in losses)
    )
    report = dataclasses.replace(report, devices=(dataclasses.replace(trace, kept=(line,)),))
    linked = link_names(report, requested=True, namespace=namespace, device_type="cpu")
    assert linked.devices[0].kept[0].names == ("losses[0]", "losses[1]")
    assert linked.names is not None and linked.names.requested and linked.names.complete
    assert "<- losses[0], losses[1]" in str(linked)
    assert "find_leftovers, as asked" in str(linked)
