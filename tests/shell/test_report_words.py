"""The default reports a notebook user reads after a training loop that leaks (issue 30,
"reports in the user's words"): `%gpu_status`, the printed `find_leftovers()` and
`%gpu_history`, run as magics and cells in the real IPython shell, use no word of
`units.JARGON`, in their text and in their HTML; a tensor held by one variable is listed
once; the LEAK lines name the holders by the names the user types."""

from __future__ import annotations

import html
import re

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard.units import jargon_in

pytest.importorskip("torch")

STEP = "loss_w = model_w(torch.randn(2000, 1000)).pow(2).mean()\nlosses_w.append(loss_w)"
OUTPUT = "torch.ones(2_000_000)"  # rerun: each run's result stays in Out[N]


def page_text(page: str) -> str:
    """An HTML report as the reader sees it (class names and tags are not read)."""
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


@pytest.fixture
def leaky(shell, run_cell):
    """A notebook whose loss list keeps each run's autograd graph (rerun three times), whose
    output history keeps a tensor per run, and a tensor held by one variable only."""
    run_cell(
        "model_w = torch.nn.Linear(1000, 1000)\nlosses_w = []\nonly_w = torch.ones(300_000)\n"
        "from colab_gpu_guard import find_leftovers"
    )
    with capture_output():
        steps = [run_cell(STEP).execution_count for _ in range(3)]
        outputs = [run_cell(OUTPUT).execution_count for _ in range(3)]
    return shell, steps, outputs


def shown(shell, line: str, kind: str = "text/plain") -> str:
    """What running `line` shows: its printed text and each display's `kind` (a magic
    displays its report as text and HTML, for the front end to choose)."""
    with capture_output() as captured:
        shell.run_cell(line, store_history=False)
    displayed = [output.data[kind] for output in captured.outputs if kind in output.data]
    return captured.stdout + "".join(displayed)


def test_gpu_status_speaks_plainly_and_lists_a_tensor_once(leaky):
    shell, _, outputs = leaky
    text = shown(shell, "%gpu_status")
    assert "leftovers: " in text and "by what holds them" in text, text
    assert jargon_in(text) == [], text
    # one variable, one tensor: one line (not a holder's line and then its member's)
    assert len(re.findall(r"\bonly_w\b", text)) == 1, text
    assert f"Out[{outputs[-2]}]" in text and "%gpu_reset releases" in text
    assert "to free: `del name` for your own variables" in text
    with_history = shown(shell, "%gpu_status --history")
    assert "LEAK: rerun of [" in with_history and jargon_in(with_history) == [], with_history


def test_the_printed_leftovers_speak_plainly_and_list_a_tensor_once(leaky):
    shell, _, outputs = leaky
    text = shown(shell, "print(find_leftovers())")
    assert text.startswith("leftovers: ") and jargon_in(text) == [], text
    assert len(re.findall(r"\bonly_w\b", text)) == 1, text
    # the loss list is named by its variable, with what to do about its graphs
    assert "  losses_w  list: " in text and "fix: .item()" in text, text
    # an output kept in the history: one line, that tensor's, marked for %gpu_reset
    (out_line,) = [line for line in text.splitlines() if f"  Out[{outputs[0]}]  " in line]
    assert "(output history)" in out_line and out_line.endswith("[%gpu_reset releases it]")
    shell.run_cell("_leftovers_page = find_leftovers()._repr_html_()", store_history=False)
    page = shell.user_ns.pop("_leftovers_page")
    assert jargon_in(page_text(page)) == [], page_text(page)
    assert page.count("<code>only_w</code>") == 1 and "only_w</td>" not in page


def test_the_status_html_speaks_plainly(leaky):
    page = shown(leaky[0], "%gpu_status", "text/html")
    assert "by what holds them" in page
    assert jargon_in(page_text(page)) == [], page_text(page)
    assert page.count("<code>only_w</code>") == 1


def test_gpu_history_names_the_holders_and_what_to_do(leaky):
    shell, steps, outputs = leaky
    text = shown(shell, "%gpu_history")
    assert jargon_in(text) == [], text
    leaks = {
        int(cell): line for cell, line in re.findall(r"^\[(\d+)\]\s.*?(LEAK: .*)$", text, re.M)
    }
    for previous, cell in zip(steps, steps[1:]):
        assert leaks[cell].startswith(f"LEAK: rerun of [{previous}] kept +"), text
        assert "held by `losses_w` (grew by 1 autograd graph" in leaks[cell]
        assert "fix: .item() for a loss you only log" in leaks[cell]
    for previous, cell in zip(outputs, outputs[1:]):
        assert leaks[cell].endswith(
            f"held by `Out[{previous}]` (output history: %gpu_reset releases it)"
        ), text


def test_a_model_shown_as_a_cells_last_line_is_held_by_the_output_history_too(shell, run_cell):
    """`model` as a cell's last line: Out[N] keeps the same module, so `del model` frees
    nothing. The status says so (Out[N] shares the model's tensors, and a plain %gpu_reset
    releases the output history) after the rows that hold memory; weakrefs prove it."""
    import weakref

    with capture_output():
        shown_at = run_cell(
            "model_o = torch.nn.Sequential(torch.nn.Linear(300, 300), torch.nn.Linear(300, 3))"
            "\nmodel_o"
        ).execution_count
    weight = weakref.ref(shell.user_ns["model_o"][0].weight)
    text = shown(shell, "%gpu_status")
    rows = [line.strip() for line in text.splitlines()]
    out_row = next(row for row in rows if row.split()[2:3] == [f"Out[{shown_at}]"])
    assert "output history: no array of its own; shares 4 arrays with model_o" in out_row
    model_row = next(row for row in rows if "  model_o  Sequential" in row)
    assert rows.index(model_row) < rows.index(out_row), text  # memory first, sharers last
    assert "%gpu_reset releases output history" in text, text
    from colab_gpu_guard.status import compact, gpu_status

    held = compact.held_text(gpu_status(leftovers=True))  # the panel's line: memory holders
    assert "`model_o` " in held and " 0 B" not in held, held
    run_cell("del model_o")
    assert weight() is not None  # what the status said: the output history keeps it
    with capture_output():
        run_cell("%gpu_reset")
    assert weight() is None


def test_a_model_a_failed_call_still_holds_is_named_by_its_traceback_local(shell, run_cell):
    """A cell that failed inside `train(model)`: the traceback's frame keeps `m`, the same
    module, so `del model` alone frees nothing. The status names that local (not another
    of the frame's) as sharing the model's tensors, and says a plain %gpu_reset releases
    the last error; weakrefs prove both."""
    import weakref

    with capture_output():
        run_cell(
            "model_t = torch.nn.Linear(200, 200)\n"
            "def train_t(m):\n    batch = torch.ones(7)\n    raise ValueError('stop')\n"
            "train_t(model_t)"
        )
    weight = weakref.ref(shell.user_ns["model_t"].weight)
    text = shown(shell, "%gpu_status")
    rows = [line.strip() for line in text.splitlines()]
    local = next(row for row in rows if "<traceback: train_t() local 'm'>" in row)
    assert "no array of its own; shares 2 arrays with model_t" in local, text
    other = next(row for row in rows if "<traceback: train_t() local 'batch'>" in row)
    assert "model_t" not in other, text
    assert "%gpu_reset releases the last error" in text, text
    run_cell("del model_t")
    assert weight() is not None  # the traceback's frame keeps it, as the status said
    with capture_output():
        run_cell("%gpu_reset")
    assert weight() is None


def test_a_name_an_arrays_row_already_names_gets_no_row_of_its_own(shell, run_cell):
    """`b = a`, `c = [a]`, `t = torch.from_numpy(arr)`, a tensor shown as a cell's last
    line: the array's row says "also: b, c[0]" (or "also: Out[N]"); a second row for `b`
    saying it has no array of its own lists the tensor twice. What frees it still names
    the output history (`del x` alone frees nothing: weakrefs)."""
    import weakref

    with capture_output():
        run_cell(
            "import numpy as np\na_s = torch.zeros(100_000); b_s = a_s; c_s = [a_s]\n"
            "arr_s = np.zeros(1000); t_s = torch.from_numpy(arr_s)\nx_s = torch.ones(1000)"
        )
        out = run_cell("x_s").execution_count
    text = shown(shell, "%gpu_status")
    rows = [line.strip() for line in text.splitlines()]
    a_row = next(row for row in rows if row.split()[2:3] == ["a_s"])
    assert a_row.endswith("also: b_s, c_s[0]"), text
    assert any(row.split()[2:3] == ["arr_s"] and row.endswith("also: t_s") for row in rows)
    x_row = next(row for row in rows if row.split()[2:3] == ["x_s"])
    assert f"also: Out[{out}]" in x_row, text
    for name in ("b_s", "c_s", "t_s", f"Out[{out}]"):
        assert not any(row.split()[2:3] == [name] for row in rows), (name, text)
    assert "no array of its own" not in text, text
    assert "%gpu_reset releases output history" in text, text
    x = weakref.ref(shell.user_ns["x_s"])
    run_cell("del x_s, a_s, b_s, c_s, arr_s, t_s")
    assert x() is not None  # Out[N] keeps it, as the status said
    with capture_output():
        run_cell("%gpu_reset")
    assert x() is None


def test_a_failed_forward_lists_torchs_frames_together_and_each_call_apart(shell, run_cell):
    """A shape error inside `model(batch)`: the traceback keeps the user's locals and a
    dozen of torch's own. Torch's are one group, `<traceback: inside torch>`; the user's
    function's locals have rows of their own; one function met twice on the traceback
    (`Module._call_impl`, for the Sequential and for the Linear) is numbered, so no two
    arrays share a label; the figures add up, and a plain %gpu_reset frees them all."""
    from colab_gpu_guard import find_leftovers

    run_cell(
        "import weakref\nfrom torch import nn\n"
        "model_f = nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1000, 10))\n"
        "refs_f = []\n"
        "def train_step_f(batch):\n"
        "    h = torch.randn(4096, 512)\n"
        "    refs_f.append(weakref.ref(h))\n"
        "    return model_f(batch + 0)\n"
        "batch_f = torch.randn(2048, 512)"
    )
    with capture_output():
        assert not run_cell("train_step_f(batch_f)").success
    found = find_leftovers()
    groups = {group.name: group for group in found.groups(None)}
    torch_group = groups["<traceback: inside torch>"]
    assert torch_group.kind == "traceback frame" and torch_group.count == 2
    assert torch_group.nbytes == (2048 * 1024 + 2048 * 512) * 4
    assert [(s.owner, s.count) for s in torch_group.shares] == [("model_f", 4)]
    assert groups["<traceback: train_step_f() local 'h'>"].nbytes == 4096 * 512 * 4
    names = [entry.name for entry in found] + [n for entry in found for n in entry.shared_with]
    assert len(names) == len(set(names)), names  # one label, one array
    assert "<traceback: Module._call_impl() #2 local 'args'>[0]" in names
    text = shown(shell, "%gpu_status")
    assert text.count("<traceback: inside torch>  traceback frame: 2 arrays on cpu") == 1, text
    assert "local 'forward_call'" not in text  # torch's 0 B locals: in the group's shares
    (h,) = shell.user_ns.pop("refs_f")
    del found, groups, torch_group
    assert h() is not None  # the traceback keeps it
    with capture_output():
        run_cell("%gpu_reset model_f batch_f")
    assert h() is None


def test_a_long_row_puts_what_else_names_it_and_its_graph_under_its_name(shell, run_cell):
    """A row that fits 100 characters stays one line; a longer one (a shown loss: output
    history, three other names, its autograd graph) keeps what it is on its line and puts
    each addition on a line of its own, under its name."""
    with capture_output():
        run_cell("w_r = torch.nn.Linear(256, 256); short_r = torch.ones(10); alias_r = short_r")
        out = run_cell("w_r(torch.randn(64, 256)).pow(2).mean()").execution_count
    lines = shown(shell, "%gpu_status").splitlines()
    short = next(line for line in lines if "  short_r  " in line)
    assert short.endswith("(user variable)  also: alias_r") and len(short) <= 100
    row = next(i for i, line in enumerate(lines) if f"  Out[{out}]  float32 [scalar]" in line)
    assert lines[row].endswith("(output history)  [%gpu_reset releases it]"), lines
    column = lines[row].index(f"Out[{out}]") + 2  # under the name, 2 in
    under = lines[row + 1 : row + 3]
    assert under[0][column:].startswith(f"also: _, _{out}"), under
    assert under[1][column:].startswith("autograd graph: 2 saved tensors"), under
    assert all(line[:column].strip() == "" for line in under)
    with capture_output():
        run_cell("%gpu_reset w_r short_r alias_r")
