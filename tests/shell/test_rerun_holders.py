"""What holds the previous run's objects, named on a flagged rerun (issue 14): a failed
run's traceback (in the reference cycle IPython's record of a failed run makes, or as the
last error), caught errors kept in a list, and a list of losses described by the autograd
graphs it gained and the bytes they saved. Real IPython shell, real CPU torch; weakrefs to
the storages prove that the holder named is what keeps the memory."""

from __future__ import annotations

import gc
import weakref

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard.cells import tracker
from colab_gpu_guard.cells.history_text import START_AFRESH
from colab_gpu_guard.cells.tracker import format_history, memory_history
from colab_gpu_guard.leftovers.graphs import FIX as GRAPH_FIX
from colab_gpu_guard.units import format_bytes
from tests.records import collector_off, reruns

torch = pytest.importorskip("torch")

MiB = 2**20
X_BYTES = 5_000_000 * 4  # torch.ones(5_000_000)
SLACK = 64 * 1024  # malloc's figure is net: a cell may free a few bytes of IPython's own


def records(*cells: int) -> list:
    by_cell = {record.cell: record for record in memory_history()}
    return [by_cell[cell] for cell in cells]


def pop(ip, *names: str) -> None:
    for name in names:
        ip.user_ns.pop(name, None)


def test_a_failed_runs_traceback_is_named_and_collecting_frees_it(ip, run_cell):
    """A cell that fails after allocating, run twice: the first run's ``x`` is still alive
    after the second, though the newer error replaced it as the last one: IPython's record
    of the failed run (``ExecutionResult.error_in_exec``) and the error's traceback (whose
    ``run_code`` frame holds that record) keep each other alive until the collector runs."""
    run_cell("import torch, weakref\nfailed_refs = []")
    cell = (
        "def step():\n"
        "    x = torch.ones(5_000_000)\n"
        "    failed_refs.append(weakref.ref(x.untyped_storage()))\n"
        "    raise ValueError('after allocating')\n"
        "step()"
    )
    with collector_off(), capture_output():
        first, second = (run_cell(cell).execution_count for _ in range(2))
        (record,) = records(second)
        refs = ip.user_ns["failed_refs"]
        assert refs[0]() is not None and refs[1]() is not None  # both runs' x alive
    assert record.rerun_leak and record.rerun_of == first, format_history(memory_history())
    assert record.leak_kind == "cpu" and X_BYTES - SLACK <= record.leak_bytes < X_BYTES + MiB
    # `failed_refs` grew too, by a weakref: it holds none of the memory and is not named
    assert record.held_by == (
        f"<traceback: step() local 'x'> (run [{first}]'s error, in a reference cycle with "
        "IPython's record of the run: freed when the garbage collector runs, or by "
        "%gpu_reset)"
    )
    assert f"held by <traceback: step() local 'x'> (run [{first}]'s error" in format_history(
        memory_history()
    )
    gc.collect()
    assert refs[0]() is None  # the cycle was all that held the first run's x
    assert refs[1]() is not None  # the last error's traceback holds the second's
    with capture_output() as reset:
        ip.run_line_magic("gpu_reset", "")
    assert refs[1]() is None  # %gpu_reset releases the last error's frames
    # its note recalls the flag as history, and that what held the memory is gone
    assert "cells flagged for keeping memory again when rerun: " in reset.stdout, reset.stdout
    assert f"[{second}] is gone now" in reset.stdout, reset.stdout
    assert "cells that kept memory again" not in reset.stdout
    pop(ip, "failed_refs", "step")


def test_the_last_errors_traceback_is_named_when_the_rerun_did_not_fail(ip, run_cell):
    run_cell("import torch, weakref\nlast_refs = []\nkept_x = []")
    cell = (
        "def step():\n"
        "    x = torch.ones(5_000_000)\n"
        "    last_refs.append(weakref.ref(x.untyped_storage()))\n"
        "    if len(last_refs) == 1:\n"
        "        raise ValueError('the first run fails')\n"
        "    kept_x.append(x)\n"
        "step()"
    )
    with collector_off(), capture_output():
        first, second = (run_cell(cell).execution_count for _ in range(2))
    (record,) = records(second)
    assert record.rerun_leak and record.rerun_of == first, format_history(memory_history())
    # `kept_x` gained this run's x only: it holds nothing of the first run's, so it is not
    # what keeps the first run's memory alive
    assert record.held_by == (
        "<traceback: step() local 'x'> (the last error's traceback: %gpu_reset releases it)"
    )
    refs = ip.user_ns["last_refs"]
    gc.collect()
    assert refs[0]() is not None  # not garbage: the last error holds it
    ip.run_line_magic("gpu_reset", "")
    assert refs[0]() is None
    assert refs[1]() is not None  # kept_x's: a user variable %gpu_reset leaves alone
    pop(ip, "last_refs", "kept_x", "step")


def test_caught_errors_kept_in_a_list_are_named_by_their_tracebacks(ip, run_cell):
    run_cell("import torch, weakref\nerrors = []\nerror_refs = []")
    cell = (
        "def load():\n"
        "    y = torch.ones(5_000_000)\n"
        "    error_refs.append(weakref.ref(y.untyped_storage()))\n"
        "    raise OSError('disk')\n"
        "try:\n"
        "    load()\n"
        "except OSError as error:\n"
        "    errors.append(error)"
    )
    with collector_off():
        first, second = (run_cell(cell).execution_count for _ in range(2))
    (record,) = records(second)
    assert record.rerun_leak and record.rerun_of == first, format_history(memory_history())
    assert X_BYTES - SLACK <= record.leak_bytes < X_BYTES + MiB
    assert record.held_by == "`errors` (grew by 1 exception: <traceback: load() local 'y'>)"
    refs = ip.user_ns["error_refs"]
    gc.collect()
    assert all(ref() is not None for ref in refs)  # the list holds them, not garbage
    ip.user_ns["errors"].clear()
    gc.collect()
    assert all(ref() is None for ref in refs)
    pop(ip, "errors", "error_refs", "load", "error")


def test_losses_are_described_by_their_graphs_and_the_bytes_saved_die_with_them(ip, run_cell):
    """``losses.append(model(x).sum())``: each run adds one autograd graph that saved the
    16 MiB input (the weight it also saved is ``model_l.weight``'s, named): the flag says
    what the previous run's graph keeps, the leftovers scan agrees, and popping the loss
    frees exactly those bytes."""
    run_cell(
        "import torch, weakref\n"
        "model_l = torch.nn.Linear(1024, 1024)\n"
        "losses_l = []\n"
        "history_l = []\n"
        "inputs_l = []\n"
        "_hook = model_l.register_forward_hook(\n"
        "    lambda m, i, o: inputs_l.append(weakref.ref(i[0].untyped_storage())))"
    )
    saved = 4096 * 1024 * 4
    step = "losses_l.append(model_l(torch.randn(4096, 1024)).sum())"
    runs = [run_cell(step).execution_count for _ in range(3)]
    for record in records(*runs[1:]):
        assert record.rerun_leak, format_history(memory_history())
        assert (
            record.held_by
            == f"`losses_l` (grew by 1 autograd graph; the previous run's graph keeps "
            f"{format_bytes(saved)}; {GRAPH_FIX})"
        )
    # the panel's chart and its line of what matters now name the same holder
    from colab_gpu_guard.status import chart, compact, gpu_status

    status = gpu_status(leftovers=False, history=True)
    holder = (
        f"held by `losses_l` (grew by 1 autograd graph; the previous run's graph keeps "
        f"{format_bytes(saved)}; {GRAPH_FIX})"
    )
    assert f"cell [{runs[2]}] (a rerun of [{runs[1]}]) kept" in chart.render_history(status)
    assert holder in chart.render_history(status).replace("&#x27;", "'")
    leak = compact.last_leak(status)  # the line under the three facts
    assert leak is not None and holder in leak.text, leak
    # a dict per step: the item is the dict, the graph one level in
    step = "history_l.append({'loss': model_l(torch.randn(4096, 1024)).sum()})"
    more = [run_cell(step).execution_count for _ in range(2)]
    (record,) = records(more[1])
    assert record.rerun_leak, format_history(memory_history())
    assert record.held_by == (
        f"`history_l` (grew by 1 item, 1 autograd graph; the previous run's graph keeps "
        f"{format_bytes(saved)}; {GRAPH_FIX})"
    )
    from colab_gpu_guard import find_leftovers

    found = {item.name: item for item in find_leftovers()}
    assert found["losses_l[2]"].graph_nbytes == saved  # the scan names the same bytes
    inputs = ip.user_ns["inputs_l"]
    gc.collect()
    assert inputs[2]() is not None
    ip.user_ns["losses_l"].pop()
    gc.collect()
    assert inputs[2]() is None  # the saved input died with the loss that held its graph
    assert all(ref() is not None for ref in inputs[:2] + inputs[3:])
    del found
    run_cell("_hook.remove()")
    pop(ip, "model_l", "losses_l", "history_l", "inputs_l", "_hook")


def test_a_rerun_that_rebuilds_the_model_names_what_the_previous_graph_keeps(
    ip, run_cell, monkeypatch
):
    """Each run builds a new model and keeps its loss after backward(): the new loss's graph
    keeps weights `model_r` still names (0 B of its own), the previous run's keeps the old
    model's weights and grads (8 MiB): the LEAK line says what the previous run's keeps,
    and the bytes are real. Malloc's exact figures are what flag it (the new run's own
    objects are 0 B): reads are made cheap here, as on a heap that is not fragmented (late
    in a long test process a read can cost more than 1% of these 5 ms cells, and the
    resident size, which a reused block does not move, is all that is left)."""
    monkeypatch.setattr(tracker.active_tracker(ip)._reruns.malloc, "cheap_read_s", 1e9)
    run_cell("import torch, weakref\nlosses_r = []\nweights_r = []")
    step = (
        "model_r = torch.nn.Linear(1024, 1024)\n"
        "weights_r.append(weakref.ref(model_r.weight.untyped_storage()))\n"
        "loss_r = model_r(torch.randn(8, 1024)).sum()\nloss_r.backward()\n"
        "losses_r.append(loss_r)"
    )
    try:
        runs = [run_cell(step).execution_count for _ in range(3)]
        kept = 2 * (1024 * 1024 * 4 + 1024 * 4)  # weight, bias and their grads
        check = tracker.active_tracker(ip)._reruns
        for record in records(*runs[1:]):
            assert record.rerun_leak, (
                format_history(memory_history()),
                record,
                check.noise_floor,
                check.malloc.cost,
            )
            assert record.held_by == (
                "`losses_r` (grew by 1 autograd graph; the previous run's graph "
                f"keeps {format_bytes(kept)}; {GRAPH_FIX})"
            )
        gc.collect()
        assert all(ref() is not None for ref in ip.user_ns["weights_r"])
        ip.user_ns["losses_r"].clear()
        gc.collect()
        alive = [ref() is not None for ref in ip.user_ns["weights_r"]]
        assert alive == [False, False, True]  # the last model is still `model_r`'s
    finally:  # a failure here must not leave the model to the next tests' reports
        pop(ip, "losses_r", "weights_r", "model_r", "loss_r")


def test_a_container_that_grew_on_a_flagged_rerun_is_listed_before_ordinary_state(ip, run_cell):
    """``rows.append(torch.ones(...))`` rerun: `rows` holds what the user did not mean to
    keep, so the leftovers list shows it with the hidden holders, before a bigger tensor the
    user keeps on purpose, in the text, the JSON and the reset's list alike."""
    from colab_gpu_guard import find_leftovers, gpu_reset  # the scan told what grew on reruns
    from colab_gpu_guard.cells import tracker

    run_cell("import torch\nrows_g = []\nstate_g = torch.ones(8_000_000)")
    try:
        runs = [run_cell("rows_g.append(torch.ones(3_000_000))").execution_count for _ in range(3)]
        flagged = [record for record in records(*runs) if record.rerun_leak]
        assert flagged and all(record.grew == ("rows_g",) for record in flagged), format_history(
            memory_history()
        )
        assert "rows_g" in tracker.grown_on_rerun()
        groups = find_leftovers().groups()
        names = [group.name for group in groups]
        assert names.index("rows_g") < names.index("state_g")  # though it is smaller
        rows = groups.named("rows_g")
        assert (rows.kind, rows.hidden, rows.released_by_reset) == ("grew on rerun", True, False)
        assert rows.nbytes == 3 * 3_000_000 * 4
        assert "rows_g  list, grew on rerun: 3 arrays on cpu" in str(groups)
        assert groups.to_dict()["groups"][0]["kind"] == "grew on rerun"
        # the user's own list is badged as what it is, not "hidden"
        assert ">rerun leak</span>" in groups._repr_html_()
        held = str(gpu_reset(dry_run=True))
        assert held.index("rows_g  ") < held.index("state_g  ")
        # the reset's note names the holder once, after every cell it held memory for
        cells = ", ".join(f"[{record.cell}]" for record in flagged)
        assert f"held by: {cells} `rows_g` (grew by 1 item; {START_AFRESH})" in held, held
        # a variable of the same name a test namespace holds is not the notebook's
        plain = find_leftovers(namespace={"rows_g": [torch.ones(10)]}).groups()
        assert plain.named("rows_g").kind == "user variable"
    finally:
        pop(ip, "rows_g", "state_g")


def test_an_object_whose_attribute_grew_on_a_flagged_rerun_is_marked_too(ip, run_cell):
    """``trainer.history.append(...)`` rerun: the LEAK line names `trainer_g.history`, and
    the leftovers list marks the variable holding it, `trainer_g`, as a list that grew
    would be (a variable named like its start, `trainer`, is not)."""
    from colab_gpu_guard import find_leftovers

    run_cell(
        "import torch\nclass TrainerG:\n    def __init__(self):\n        self.history = []\n"
        "trainer_g = TrainerG()\ntrainer = [torch.ones(10)]"
    )
    try:
        runs = [
            run_cell("trainer_g.history.append(torch.ones(3_000_000))").execution_count
            for _ in range(3)
        ]
        flagged = [record for record in records(*runs) if record.rerun_leak]
        assert flagged and all(record.grew == ("trainer_g.history",) for record in flagged)
        groups = find_leftovers().groups()
        held = groups.named("trainer_g")
        assert (held.kind, held.hidden) == ("grew on rerun", True)
        assert "trainer_g  TrainerG, grew on rerun: 3 arrays on cpu" in str(groups)
        assert groups.named("trainer").kind == "user variable"
    finally:
        pop(ip, "trainer_g", "trainer", "TrainerG")


@pytest.mark.parametrize("reads", ["cheap", "costly"])
@pytest.mark.parametrize("free", ["outs.clear()", "%gpu_reset"])
def test_a_rerun_after_the_earlier_runs_memory_was_freed_is_not_flagged(
    ip, run_cell, monkeypatch, free, reads
):
    """A cell that keeps 20 MB, its keep freed in between (the list cleared; %gpu_reset
    of the output history), then run again: it kept 20 MB again, but nothing holds the
    earlier run's objects (their weakrefs are dead), so the rerun is no leak. A third
    run, with nothing freed in between, is one, held by what holds the second's.
    Costly malloc reads (a fragmented heap): the freeing cell gets no exact figure, and
    the resident size need not fall (glibc keeps a freed heap block), so its free is
    unseen; the rerun is still judged by what holds the earlier run's objects."""
    if reads == "costly":
        readings = tracker.active_tracker(ip)._reruns.malloc
        monkeypatch.setattr(readings, "cheap_read_s", -1.0)
        monkeypatch.setattr(readings, "read_share", 1e-12)
    run_cell("import torch, weakref\nouts = []\nrefs = []")
    if free == "outs.clear()":
        cell = "outs.append(torch.ones(5_000_000))\nrefs.append(weakref.ref(outs[-1]))"
    else:
        # displayed: Out[N] holds each run's tensor (`t` is rebound by the next run)
        cell = "t = torch.ones(5_000_000)\nrefs.append(weakref.ref(t))\nt"
    with capture_output():
        first = run_cell(cell).execution_count
        if free == "outs.clear()":
            run_cell("outs.clear()")
        else:
            run_cell("%gpu_reset t")  # the output history, and `t`
        gc.collect()
        assert ip.user_ns["refs"][0]() is None  # the first run's tensor is gone
        second = run_cell(cell).execution_count
        third = run_cell(cell).execution_count
    history = format_history(memory_history())
    again, leak = records(second, third)
    assert not again.rerun_leak and again.rerun_of == first, history
    assert leak.rerun_leak and leak.rerun_of == second, history
    assert ip.user_ns["refs"][1]() is not None  # the second run's tensor is still held
    holder = (
        f"`outs` (grew by 1 item; {START_AFRESH})" if free == "outs.clear()" else f"`Out[{second}]`"
    )
    assert holder in leak.held_by, history
    pop(ip, "outs", "refs", "t")


def test_a_list_that_gained_a_string_is_not_named_as_the_holder(ip, run_cell):
    """The cell appends a line to a log and calls a function that keeps 20 MB in a list
    the cell does not name: the log holds none of the memory, so it is not named."""
    run_cell(
        "import torch\nlog = []\n_hidden = []\n"
        "def step():\n    _hidden.append(torch.ones(5_000_000))"
    )
    flagged, history = reruns(run_cell, "log.append('step done')\nstep()")
    for record in flagged:
        assert "log" not in record.held_by and "log" not in record.grew, history
    pop(ip, "log", "_hidden", "step")


def test_the_resets_note_names_only_the_holders_still_there(ip, run_cell):
    """Rerun leaks held by a list and by the output history: a dry run's note recalls both;
    the reset that drops the list and the output history keeps the flagged cells in its
    note but names neither holder (they hold nothing now), saying they are gone; a later
    reset says nothing more of those cells (it said so once)."""
    run_cell("import torch\nkept_n = []")
    cell = "kept_n.append(torch.ones(5_000_000))\ntorch.ones(1_000_000)"
    with capture_output():
        runs = [run_cell(cell).execution_count for _ in range(3)]
    flagged = [record for record in records(*runs) if record.rerun_leak]
    assert flagged, format_history(memory_history())
    holders = flagged[-1].holders
    assert [(holder.kind, holder.name) for holder in holders] == [
        ("variable", "kept_n"),
        ("output", f"Out[{runs[-2]}]"),
    ], flagged[-1].held_by
    assert flagged[-1].held_by == (
        f"`kept_n` (grew by 1 item; {START_AFRESH}), "
        f"`Out[{runs[-2]}]` (output history: %gpu_reset releases it)"
    )
    from colab_gpu_guard import gpu_reset

    dry = "\n".join(gpu_reset(dry_run=True).notes)
    assert f"`kept_n` (grew by 1 item; {START_AFRESH})" in dry and f"`Out[{runs[-2]}]`" in dry
    notes = "\n".join(gpu_reset("kept_n").notes)
    cells = ", ".join(f"[{record.cell}]" for record in flagged)
    assert f"cells flagged for keeping memory again when rerun: {cells}" in notes, notes
    assert "held by" not in notes and "kept_n" not in notes and "Out[" not in notes, notes
    assert f"holding the memory of {cells} is gone now" in notes, notes
    assert "kept_n" not in ip.user_ns
    for later in (gpu_reset(), gpu_reset(dry_run=True), gpu_reset()):
        notes = "\n".join(later.notes)
        assert not any(f"[{record.cell}]" in notes for record in flagged), notes


def test_a_list_a_called_function_fills_is_named_not_the_list_the_cell_names(ip, run_cell):
    """``losses.append(torch.randn(1)); step()`` rerun, where ``step`` fills a global list
    the cell does not name: that list holds the 20 MB each run keeps, not `losses` (4 B a
    run), and the LEAK line names it."""
    run_cell(
        "import torch, weakref\ncache_f = []\nlosses_f = []\n"
        "def step_f():\n    cache_f.append(torch.ones(5_000_000))"
    )
    flagged, history = reruns(run_cell, "losses_f.append(torch.randn(1)); step_f()")
    for record in flagged:
        assert record.rerun_leak and record.leak_bytes >= X_BYTES - SLACK, history
        assert record.held_by == f"`cache_f` (grew by 1 item; {START_AFRESH})", history
        assert record.grew == ("cache_f",)
    refs = [weakref.ref(item) for item in ip.user_ns["cache_f"]]
    ip.user_ns["cache_f"].clear()
    assert all(ref() is None for ref in refs)  # the list named was what held them
    pop(ip, "cache_f", "losses_f", "step_f")


@pytest.mark.parametrize(
    "functions, call",
    [
        (  # train() -> epoch() -> step(), which fills the list
            "def step_d():\n    cache_d.append(torch.ones(5_000_000))\n"
            "def epoch_d():\n    step_d()\n"
            "def train_d():\n    epoch_d()",
            "train_d()",
        ),
        (  # functions calling each other: each looked into once
            "def ping_d(n):\n"
            "    cache_d.append(torch.ones(5_000_000)) if n == 0 else pong_d(n - 1)\n"
            "def pong_d(n):\n    ping_d(n)",
            "ping_d(2)",
        ),
    ],
    ids=["two calls down", "recursive"],
)
def test_a_list_a_function_fills_calls_down_is_named(ip, run_cell, functions, call):
    """The cell calls a function that calls the one filling a global list neither the
    cell nor the first function names: the LEAK line names that list (the functions a
    called function calls are looked into too, each once), and clearing it frees what
    each run kept."""
    run_cell("import torch\ncache_d = []\n" + functions)
    flagged, history = reruns(run_cell, call)
    for record in flagged:
        assert record.rerun_leak and record.leak_bytes >= X_BYTES - SLACK, history
        assert record.held_by == f"`cache_d` (grew by 1 item; {START_AFRESH})", history
    refs = [weakref.ref(item.untyped_storage()) for item in ip.user_ns["cache_d"]]
    ip.user_ns["cache_d"].clear()
    assert all(ref() is None for ref in refs)
    pop(ip, "cache_d", "step_d", "epoch_d", "train_d", "ping_d", "pong_d")


def test_a_holder_that_holds_little_of_the_kept_memory_is_not_named_as_holding_it(
    ip, run_cell, monkeypatch
):
    """The same cell, but ``step`` keeps its 20 MB in a class attribute no holder check
    reaches: the LEAK line says `losses` holds 4 B of it and the rest is held by something
    else, the list is not shown as a rerun leak, and the recall (the reset's note, the CUDA
    advisor's) names no holder for it. Malloc's exact figures are what flag it (no holder
    is found): reads are made cheap here, as on a heap that is not fragmented (a costly
    read on a fragmented heap leaves the resident size, which a reused block does not
    move)."""
    from colab_gpu_guard import gpu_reset
    from colab_gpu_guard.cells import past_leaks as rerun_notes

    monkeypatch.setattr(tracker.active_tracker(ip)._reruns.malloc, "cheap_read_s", 1e9)

    run_cell(
        "import torch\nlosses_u = []\nclass Store_u:\n    items = []\n"
        "def step_u():\n    Store_u.items.append(torch.ones(5_000_000))"
    )
    flagged, history = reruns(run_cell, "losses_u.append(torch.randn(1)); step_u()")
    for record in flagged:
        assert record.rerun_leak and record.leak_bytes >= X_BYTES - SLACK, history
        assert record.held_by == (
            "`losses_u` (grew by 1 item; 4 B of it); the rest by something else: "
            "find_leftovers() lists what is alive"
        ), history
        assert record.grew == ()
    assert "held by `losses_u` (grew by 1 item; 4 B of it); the rest by something else" in (history)
    assert "losses_u" not in tracker.grown_on_rerun()
    (holder,) = flagged[-1].holders
    assert not flagged[-1].explained and holder.name == "losses_u"
    assert holder.share(flagged[-1].leaks) == 4
    cells = ", ".join(f"[{record.cell}]" for record in flagged)
    assert rerun_notes.holders_now(flagged, ip, ip.user_ns) == [(cells, "")]
    note = "\n".join(gpu_reset(dry_run=True).notes)
    assert f"when rerun: {cells} (see %gpu_history)" in note and "losses_u" not in note, note
    assert len(ip.user_ns["Store_u"].items) == 3  # where the memory really is
    pop(ip, "losses_u", "Store_u", "step_u")


def test_holders_are_worded_at_the_edge():
    """Each kind of holder record in words, as a LEAK line joins them; a line whose holders
    hold little of what was kept gives each one's bytes and says the rest is elsewhere."""
    from colab_gpu_guard.cells import rerun_holders as rh
    from colab_gpu_guard.cells.history_text import held_by_text

    holders = (
        rh.Holder(rh.VARIABLE, "losses", None, rh.Growth(5, rh.GRAPHS, 5, 480 * MiB)),
        rh.Holder(rh.OUTPUT, "Out[3]", (("cpu", MiB),), cell=3),
        rh.Holder(
            rh.TRACEBACK,
            "",
            (("cpu", MiB),),
            cell=2,
            locals=("<traceback: step() local 'x'>", "<traceback: step() local 'y'>"),
            alive=rh.LAST_ERROR,
        ),
        rh.Holder(
            rh.VARIABLE,
            "errs",
            (("cpu", MiB),),
            rh.Growth(2, rh.EXCEPTIONS, 0, None, locals=("<traceback: f() local 'a'>",)),
        ),
    )
    assert held_by_text(holders, True, (("cpu", 4 * MiB),)) == (
        f"`losses` (grew by 5 autograd graphs, 480 MiB saved; {GRAPH_FIX}), `Out[3]` (output "
        "history: %gpu_reset releases it), "
        "<traceback: step() local 'x'>, <traceback: step() local 'y'> (the last error's "
        "traceback: %gpu_reset releases it), `errs` (grew by 2 exceptions: <traceback: "
        "f() local 'a'>)"
    )
    assert held_by_text(holders[1:2], False, (("cpu", 4 * MiB),)) == (
        "`Out[3]` (output history; 1 MiB of it: %gpu_reset releases it); the rest by something "
        "else: "
        "find_leftovers() lists what is alive"
    )
    assert held_by_text((), True, ()) == ""


def test_a_dry_run_names_what_earlier_failed_runs_tracebacks_hold(ip, run_cell, monkeypatch):
    """Three failed runs of one cell: the last error is counted in the estimate; the two
    before it are in reference cycles no name reaches, so the estimate leaves them out and
    a note says what they hold (their bytes: the storages that die in the real reset)."""
    from colab_gpu_guard import gpu_reset
    from colab_gpu_guard.cells import failed_runs

    run_cell("import torch, weakref\ncycle_refs = []")
    cell = (
        "def fail_c():\n"
        "    x = torch.ones(5_000_000)\n"
        "    cycle_refs.append(weakref.ref(x.untyped_storage()))\n"
        "    raise ValueError('after allocating')\n"
        "fail_c()"
    )
    with collector_off(), capture_output():
        runs = [run_cell(cell).execution_count for _ in range(3)]
        dry = gpu_reset(dry_run=True)
        refs = ip.user_ns["cycle_refs"]
        assert all(ref() is not None for ref in refs)
        assert dry.estimated_bytes == X_BYTES, str(dry)
        note = (
            f"not in this estimate: the tracebacks of 2 earlier failed runs ([{runs[0]}], "
            f"[{runs[1]}]) hold {format_bytes(2 * X_BYTES)} in <traceback: fail_c() local "
            "'x'>, in reference cycles with IPython's records of those runs: the reset's "
            "gc.collect() frees them unless something else holds them"
        )
        assert note in dry.notes, str(dry)
        gpu_reset()
    assert all(ref() is None for ref in refs)  # what the note counted did die
    # no cell failed since the reset's full collection: the dry run does not look (its
    # look goes over every object the collector tracks)
    looked: list = []
    monkeypatch.setattr(failed_runs, "earlier_failures", lambda *args: looked.append(1) or [])
    after = gpu_reset(dry_run=True)
    assert not any("earlier failed run" in text for text in after.notes), str(after)
    assert looked == []
    with capture_output():
        run_cell(cell)
    gpu_reset(dry_run=True)
    assert looked == [1]
    ip.run_line_magic("gpu_reset", "")
    pop(ip, "cycle_refs", "fail_c")
