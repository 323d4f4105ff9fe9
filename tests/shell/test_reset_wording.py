"""%gpu_reset's wording, as the magic prints it in the real IPython shell: a mistyped name
gets the closest of the user's own variables, a name given twice or IPython's own name is
named in the error (singular or plural by count), nothing changing; the note on memory a
named variable shares agrees with how many hold it; the "dropped" line counts what its
names line shows; a flagged rerun whose holder a reset removed is said once."""

from __future__ import annotations

import re

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.units import jargon_in  # noqa: E402


def printed(ip, line: str) -> str:
    with capture_output() as captured:
        ip.run_line_magic("gpu_reset", line)
    return captured.stdout


def refused(ip, line: str) -> str:
    before = set(ip.user_ns)
    with pytest.raises(UsageError) as raised:
        ip.run_line_magic("gpu_reset", line)
    assert set(ip.user_ns) == before  # nothing changed
    message = str(raised.value)
    assert "nothing was changed" in message and "Usage: %gpu_reset" in message, message
    assert jargon_in(message) == [], message
    return message.splitlines()[0]


def test_a_mistyped_name_gets_the_closest_user_variable(shell, run_cell):
    run_cell("val_losses = [torch.ones(10)]; refs['v'] = weakref.ref(val_losses[0])")
    assert refused(shell, "val_loses") == (
        "no such variable: val_loses (did you mean `val_losses`?) (nothing was changed)"
    )
    assert shell.user_ns["refs"]["v"]() is not None
    # IPython's hidden names (`Out`, `_i3`, `_oh`) and Python's are never offered
    for typed in ("Outt", "_i99999", "_ohh", "__nam__x"):
        first = refused(shell, typed)
        assert first == f"no such variable: {typed} (nothing was changed)", first
    # no close name: the plain error
    assert refused(shell, "zzzz") == "no such variable: zzzz (nothing was changed)"


def test_a_name_given_twice_is_named(shell, run_cell):
    run_cell("model = torch.nn.Linear(2, 2); opt = 1")
    assert refused(shell, "model opt model") == (
        "model: named more than once; give each variable once (nothing was changed)"
    )
    assert "model" in shell.user_ns


@pytest.mark.parametrize(
    "line, words",
    [
        ("_", "_: IPython's own name, not a user variable;"),
        ("In", "In: IPython's own name, not a user variable;"),
        ("_ In", "_, In: IPython's own names, not user variables;"),
    ],
)
def test_ipythons_own_names_agree_in_number(shell, run_cell, line, words):
    run_cell("1 + 1")  # `_` is IPython's
    assert refused(shell, line).startswith(words)


def test_the_note_on_shared_memory_agrees_with_how_many_hold_it(shell, run_cell):
    run_cell("val_losses = torch.ones(1000); loss = val_losses")
    dry = printed(shell, "val_losses --dry-run")
    assert "still held by `loss` (it keeps that memory alive: delete it too to free it)" in dry, dry
    run_cell("also = val_losses")
    dry = printed(shell, "val_losses --dry-run")
    assert "still held by `loss`, `also` (they keep it alive: delete them too to free it)" in dry
    assert jargon_in(dry) == [], dry


def test_the_dropped_line_counts_what_the_names_line_shows(shell, run_cell):
    """An output kept in Out[N], `_` and `_N`, and by IPython on its own (its display
    hook's copy, the last cell's result): the default line counts the names shown, and
    says IPython's own copies in one phrase; -v counts each kind."""
    with capture_output():
        number = run_cell("torch.ones(1000)").execution_count
    dry = printed(shell, "--dry-run")
    names = re.search(r"names: (.*)", dry)[1].split(", ")
    assert names == [f"Out[{number}]", "_", f"_{number}"], dry
    assert (
        "would drop: 1 output history entry, 2 references to outputs, IPython's own copies "
        "of outputs" in dry
    ), dry
    assert jargon_in(dry) == [], dry
    verbose = printed(shell, "--dry-run -v")
    assert "would drop: 1 output history entry, 3 references to outputs, 1 last cell result" in (
        verbose
    ), verbose
    assert "also would drop: 2 references IPython or Python keeps on its own" in verbose


def test_a_flagged_reruns_gone_holder_is_said_once(shell, run_cell):
    """The walkthrough: %gpu_history flags a cell whose list keeps each run's tensor;
    `%gpu_reset val_losses` removes the list and says so; the resets after it say nothing
    more of that cell."""
    run_cell("val_losses = []")
    with capture_output():
        runs = [
            run_cell("val_losses.append(torch.ones(5_000_000))").execution_count for _ in range(3)
        ]
    history = printed(shell, "--dry-run")
    assert "cells flagged for keeping memory again when rerun: " in history, history
    flagged = re.search(r"rerun: ([\[\]\d, ]+) \(see", history)[1]
    assert set(re.findall(r"\d+", flagged)) <= {str(run) for run in runs}, history
    done = printed(shell, "val_losses")
    assert f"what %gpu_history named as holding the memory of {flagged} is gone now" in done
    for line in ("", "--dry-run", ""):
        later = printed(shell, line)
        assert "flagged for keeping memory again" not in later, later


def test_what_is_freed_is_named_by_what_it_was(shell, run_cell):
    """The amount freed is "of tensors" for torch's, "of arrays" for NumPy's and pandas'
    (a DataFrame in the output history is no tensor), and both where both went; the figure
    is what the weakrefs saw go."""
    pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    run_cell("import numpy as np, pandas as pd")
    run_cell("pd.DataFrame({'x': np.arange(100_000.0)})")  # in Out only
    frame = shell.user_ns["Out"][max(shell.user_ns["Out"])]
    nbytes = frame["x"].values.nbytes
    assert isinstance(frame, pd.DataFrame) and nbytes == 800_000
    del frame
    text = printed(shell, "--dry-run")
    assert re.search(r"would free about 781 KiB of arrays$", text, re.M), text
    text = printed(shell, "")
    assert re.search(r"^  freed: 781 KiB of arrays$", text, re.M), text
    run_cell("(torch.ones(1000), np.ones(1000))")
    assert "freed: 11.7 KiB of tensors and arrays" in printed(shell, "")
    run_cell("torch.ones(1000)")
    assert "freed: 3.91 KiB of tensors" in printed(shell, "")
