"""The trace over real allocator snapshots, recorded on a GPU by tools/record_cuda_snapshots.py
in real notebook shells (tests/fixtures/cuda_snapshots/: the pickles torch wrote and
manifest.json, with each cell's source, number, file name and the figures measured beside
it): every figure the report gives against those measurements, and torch's own snapshot
tools reading every pickle."""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import pytest

from colab_gpu_guard.trace import SavedCell, saved_report
from colab_gpu_guard.trace.kinds import CELL, LIBRARY, MODULE, NO_STACK, USERS
from colab_gpu_guard.trace.lines import Places
from colab_gpu_guard.trace.recording import Recorder
from colab_gpu_guard.units import jargon_in

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cuda_snapshots"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
SCENARIOS = MANIFEST["scenarios"]


def load(name: str) -> tuple[dict, dict, dict]:
    """(snapshot, the scenario's manifest entry, its cells by file name)."""
    scenario = SCENARIOS[name]
    with open(FIXTURES / scenario["pickle"], "rb") as file:
        snapshot = pickle.load(file)
    sources = {cell["execution_count"]: cell["source"] for cell in scenario["cells"]}
    cells = {
        filename: SavedCell(number, sources[number])
        for filename, number in scenario["facts"]["file_names"].items()
    }
    return snapshot, scenario, cells


def lines_of(lines, cell: int) -> dict[int, int]:
    return {
        line.where.line: line.nbytes
        for line in lines
        if line.where.kind == CELL and line.where.cell == cell
    }


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_torchs_tools_read_every_fixture(name):
    viz = pytest.importorskip("torch.cuda._memory_viz")
    snapshot, _, _ = load(name)
    assert "Segment size mismatch" not in viz.segsum(snapshot)
    assert viz.trace(snapshot).startswith("Device 0")


@pytest.mark.parametrize("name", ["forward_peak", "forward_peak_plain_shell"])
def test_the_forward_pass_by_line_is_what_was_measured(name):
    snapshot, scenario, cells = load(name)
    facts = scenario["facts"]
    report = saved_report(snapshot, cells)
    (device,) = report.devices
    assert device.peak_allocated == facts["peak_allocated"]  # max_memory_allocated()
    assert device.end_allocated == facts["cells"]["4"]["allocated_after"]
    assert device.start_allocated == 0 == facts["cells"]["2"]["allocated_after"]
    assert device.end_reserved == facts["cells"]["4"]["reserved_after"]  # memory_reserved()
    assert device.start_reserved == 0 == facts["cells"]["2"]["reserved_after"]
    at_peak = lines_of(device.at_peak, 4)
    assert at_peak[1] == facts["measured"]["x"]  # x = torch.randn(...)
    assert lines_of(device.kept, 3) == {2: facts["measured"]["params"]}  # model = ....cuda()
    # torch's own frames fold away: nothing of theirs under the notebook's lines
    assert all(not line.inner for line in device.at_peak + device.kept)
    assert [line.where.text for line in device.at_peak if line.where.line == 1] == [
        "x = torch.randn(2048, 4096, device='cuda')"
    ]
    shown = re.sub(r"<[^>]+>", " ", report._repr_html_())  # what the page shows
    assert jargon_in(str(report)) == [] and jargon_in(shown) == []


def test_a_plain_shells_cells_are_named_by_their_file_names_alone():
    snapshot, _, _ = load("forward_peak_plain_shell")
    report = saved_report(snapshot)  # no sources: <ipython-input-N-...> names the cell
    (device,) = report.devices
    assert {(line.where.cell, line.where.line) for line in device.at_peak} >= {(4, 1), (4, 2)}


def test_the_backward_pass_has_no_python_line_and_the_optimizer_state_is_named():
    snapshot, scenario, cells = load("training_leak")
    facts = scenario["facts"]
    (device,) = saved_report(snapshot, cells).devices
    assert device.end_allocated == facts["cells"]["4"]["allocated_after"]
    assert device.peak_allocated == facts["peak_allocated"]
    kinds = {line.where.kind for line in device.at_peak}
    assert NO_STACK in kinds  # gradients: allocated by autograd's own thread
    assert LIBRARY not in kinds and MODULE not in kinds
    assert lines_of(device.kept, 4)[6] == facts["measured"]["optimizer_state"]  # opt.step()
    # every allocation without a Python line is made during loss.backward() (cell line 5)
    line = 0
    for event in snapshot["device_traces"][0]:
        cell = [f["line"] for f in event.get("frames", ()) if f["filename"] in cells]
        if event["action"] == "alloc" and not event.get("frames"):
            assert line == 5
        elif cell:
            line = cell[0]


def test_a_user_modules_line_is_under_the_notebook_line():
    snapshot, scenario, cells = load("user_module")
    facts = scenario["facts"]
    (device,) = saved_report(snapshot, cells).devices
    kept = {line.where.line: line for line in device.kept}
    assert kept[4].nbytes == facts["measured"]["big"]
    assert kept[5].nbytes == facts["measured"]["small"]
    (inner,) = kept[4].inner
    assert inner.where.kind == MODULE and inner.where.filename.endswith("nbutils.py")
    assert inner.nbytes == facts["measured"]["big"]


def test_one_cells_window_of_a_users_recording():
    """The user's recording was on for the whole scenario: reading cell 4 alone (from the
    last event before it began) gives cell 4's figures, as measured after cells 3 and 4."""
    snapshot, scenario, cells = load("forward_peak")
    facts = scenario["facts"]
    history = snapshot["device_traces"][0]
    begun = facts["cells"]["4"]["start_us"]
    before = [event for event in history if event["time_us"] < begun]
    recorder = Recorder(torch=None, max_entries=1)
    recorder.mode, recorder.before, recorder.cell = USERS, [before], 4
    report = recorder.analyse(snapshot, places=Places(None, cells))
    (device,) = report.devices
    assert device.start_allocated == facts["cells"]["3"]["allocated_after"]
    assert device.end_allocated == facts["cells"]["4"]["allocated_after"]
    assert {line.where.cell for line in device.kept} == {4}
    assert sum(line.nbytes for line in device.kept) == (
        facts["cells"]["4"]["allocated_after"] - facts["cells"]["3"]["allocated_after"]
    )
    assert "cell [4] on cuda:0" in str(report)


def test_the_out_of_memory_scenario_names_the_line_that_asked():
    snapshot, scenario, cells = load("oom")
    facts = scenario["facts"]
    if not facts["oom_calls"]:
        pytest.skip(f"the oom scenario did not run out of memory on its {MANIFEST['gpu']}")
    (device,) = saved_report(snapshot, cells).devices
    assert device.oom is not None
    assert (device.oom.where.cell, device.oom.where.line) == (4, 2)  # logits = model(batch)
    # the trace keeps the size asked for (what torch's message says); the observer gets it
    # rounded up by the allocator (to 2 MiB for a large block): seen on an H200,
    # 59813761024 asked, 59814969344 to the observer
    observed = facts["oom_calls"][-1]["alloc"]
    assert device.oom.requested <= observed < device.oom.requested + 2 * 2**20
    assert lines_of(device.at_peak, 4)[1] == facts["measured"]["batch"]


def test_the_notebooks_saved_trace_is_what_the_fixtures_give():
    from tools import trace_example

    data = trace_example.example()
    if data is None:
        assert not SCENARIOS["oom"]["facts"]["oom_calls"]
        assert not trace_example.EXAMPLE.exists()  # nothing saved that the fixtures lack
        return
    assert trace_example.main(["--check"]) == 0
    assert data["label"].startswith("A saved trace, not this machine's: recorded on an ")
