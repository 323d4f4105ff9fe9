"""Every magic x every pair of its options that contradict each other, in the real shell:
a usage error naming the valid form (the magic's usage line) that changes nothing - no
variable, RNG, deterministic mode or environment variable, no panel opened or closed, no
file written, no magic's state (tracing, per-cell reseeding, history settings), nothing
printed. Then an unknown option and a bad value for each magic (tests/shell/
test_magic_help.py has their wording), held to the same: nothing changed.

The magics are read from the extension's magics classes, each one's conflicts from its
declaration (`base.conflicts`, checked against its usage line), so a new magic or option
joins the matrix by itself."""

from __future__ import annotations

import os
import random
import re

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from colab_gpu_guard.ipython.magics import MAGIC_CLASSES, usage_line, usage_lines
from tests.bad_input import BAD_INPUT

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

CELL_BODY = "cell_body_ran = True"


def magics() -> list[tuple[str, str, object]]:
    """(kind, name, function) of every magic the extension registers ('line', 'cell')."""
    return [
        (kind, name, getattr(cls, method))
        for cls in MAGIC_CLASSES
        for kind, table in cls.magics.items()
        for name, method in table.items()
    ]


def usage_forms(usage: str) -> set[str]:
    """What the usage line lets a user type: each option (``--[no-]strict`` as both
    ``--strict`` and ``--no-strict``), each positional's metavar and its values
    (``on|off``)."""
    words = re.sub(r"--\[no-\]([\w-]+)", r"--\1 --no-\1", usage).split()[1:]
    return {form for word in words for form in word.strip("[]").split("|") if form}


def option_forms(function) -> set[str]:
    """Every option string and positional value or metavar of the magic's parser."""
    forms = set()
    for action in function.parser._actions:
        forms |= set(action.option_strings)
        if not action.option_strings:
            forms |= set(action.choices or ()) | {action.metavar}
    return forms


CONFLICTS = [
    (kind, name, pair)
    for kind, name, function in magics()
    for pair in getattr(function, "conflicts", ())
]


def test_every_magic_is_enumerated():
    names = {name for _, name, _ in magics()}
    assert set(usage_lines()) <= names and ("cell", "gpu_trace") in {
        (kind, name) for kind, name, _ in magics()
    }
    assert len(CONFLICTS) >= 10  # the matrix is not empty by accident


@pytest.mark.parametrize("kind, name, function", magics(), ids=lambda x: str(x))
def test_the_conflicts_are_the_usage_lines_options(kind, name, function):
    """Each declared conflict names what the usage line (or its options list) offers; each
    ``--[no-]X`` of the usage line is declared a conflict (the mode and its --no- form)."""
    usage = usage_line(function)
    offered = usage_forms(usage) | option_forms(function)
    declared = set(getattr(function, "conflicts", ()))
    for first, second in declared:
        assert {first, second} <= offered, (first, second, usage)
    for option in re.findall(r"--\[no-\]([\w-]+)", usage):
        assert (f"--{option}", f"--no-{option}") in declared, (option, usage)


# ---------------------------------------------------------------- what must not change


def magics_state(shell) -> dict:
    """Each of our magics objects' attributes, and one level into our own objects they
    hold (the tracker's settings, the tracer, the reseeder), by value or identity."""

    def shallow(obj) -> dict:
        return {
            key: value if isinstance(value, (bool, int, float, str, type(None))) else id(value)
            for key, value in vars(obj).items()
        }

    state = {}
    for instance in shell.magics_manager.registry.values():
        if not type(instance).__module__.startswith("colab_gpu_guard"):
            continue
        for key, value in vars(instance).items():
            if key in ("shell", "magics", "options_table", "registration"):
                continue
            state[(type(instance).__name__, key)] = id(value)
            if type(value).__module__.startswith("colab_gpu_guard") and hasattr(value, "__dict__"):
                state[(type(instance).__name__, key, "vars")] = shallow(value)
    return state


def snapshot(shell, folder) -> dict:
    from colab_gpu_guard.ipython import panel as panel_module
    from colab_gpu_guard.seeding import determinism, every_cell, precision

    current = panel_module.current_panel(shell)
    return {
        "namespace": {key: id(value) for key, value in shell.user_ns.items()},
        "rng": (random.getstate(), repr(np.random.get_state()), torch.get_rng_state().tolist()),
        "modes": (determinism.read_flags(torch), precision.read_precision(torch)),
        "reseeder": id(every_cell.active_reseeder()),
        "environ": dict(os.environ),
        "panel": (id(current), getattr(current, "closed", None)),
        "files": sorted(os.listdir(folder)),
        "cwd files": sorted(os.listdir(".")),
        "magics": magics_state(shell),
        "exception hook": (shell.custom_exceptions, shell.CustomTB),
    }


@pytest.fixture
def world(ip, tmp_path, monkeypatch):
    """The shell in a state each refused line could change: a variable, deterministic
    warn-only mode and per-cell reseeding on, a panel open (where ipywidgets is), a record
    saved for --diff; the test's folder the working directory."""
    from colab_gpu_guard import nvml
    from colab_gpu_guard.ipython import panel as panel_module
    from tests import fake_pynvml

    monkeypatch.chdir(tmp_path)
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    ip.user_ns["keep"] = torch.ones(8)
    with capture_output():
        ip.run_line_magic("seed_all", "42 --warn-only --every-cell")
        ip.run_line_magic("repro", f"--save {tmp_path / 'saved.json'}")
        try:
            import ipywidgets  # noqa: F401
        except ImportError:
            pass
        else:
            ip.run_line_magic("gpu_panel", "")
    yield ip
    ip.user_ns.pop("keep", None)
    ip.user_ns.pop("cell_body_ran", None)
    with capture_output():
        ip.run_line_magic("seed_all", "0 --no-deterministic --no-every-cell")
    for instance in list(panel_module._panels.values()):
        instance.close()
    panel_module._panels.clear()
    nvml.set_pynvml(None)


def typed(function, form: str, folder) -> list[str]:
    """How a user types `form` with a valid value: ``--live 2``, ``--diff saved.json``,
    ``--save new.json``, ``NAME`` as a variable that exists."""
    for action in function.parser._actions:
        if form in action.option_strings:
            if action.nargs == 0:  # a flag
                return [form]
            value = {"SECONDS": "2", "N": "5"}.get(action.metavar)
            if action.metavar == "FILE":
                value = str(folder / ("saved.json" if form == "--diff" else "new.json"))
            assert value is not None, (form, action.metavar)
            return [form, value]
    return ["keep"] if form == "NAME" else [form]


def refused(shell, kind: str, name: str, line: str) -> str:
    """Run the line; the UsageError's message (nothing may be printed on the way)."""
    with capture_output() as captured, pytest.raises(UsageError) as raised:
        if kind == "line":
            shell.run_line_magic(name, line)
        else:
            shell.run_cell_magic(name, line, CELL_BODY)
    assert captured.stdout == "" and not captured.outputs, captured.stdout
    return str(raised.value)


@pytest.mark.parametrize(
    "kind, name, pair, order",
    [(*conflict, order) for conflict in CONFLICTS for order in ("as declared", "reversed")],
    ids=lambda x: " ".join(x) if isinstance(x, tuple) else str(x),
)
def test_conflicting_options_are_a_usage_error_that_changes_nothing(
    world, tmp_path, kind, name, pair, order
):
    if name == "gpu_panel":
        pytest.importorskip("ipywidgets")
    function = dict(((k, n), f) for k, n, f in magics())[(kind, name)]
    first, second = pair if order == "as declared" else pair[::-1]
    words = typed(function, first, tmp_path) + typed(function, second, tmp_path)
    if name == "seed_all":
        words.append("5")  # a seed: refused all the same, nothing reseeded
    before = snapshot(world, tmp_path)
    message = refused(world, kind, name, " ".join(words))
    assert message.startswith(f"{pair[0]} and {pair[1]} contradict each other: give one")
    assert message.endswith(f"\nUsage: {usage_line(function)}"), message
    assert snapshot(world, tmp_path) == before
    assert "cell_body_ran" not in world.user_ns


def unknown_and_bad() -> list[tuple[str, str, str]]:
    rows = []
    for kind, name, _ in magics():
        rows.append((kind, name, "--bogus"))
        if name in BAD_INPUT:
            rows.append((kind, name, BAD_INPUT[name][0]))
    return rows


@pytest.mark.parametrize("kind, name, line", unknown_and_bad(), ids=lambda x: str(x))
def test_an_unknown_option_or_a_bad_value_changes_nothing(world, tmp_path, kind, name, line):
    if kind == "cell" and line == BAD_INPUT.get(name, ("",))[0]:
        line = "--max-entries 0"
    before = snapshot(world, tmp_path)
    message = refused(world, kind, name, line)
    function = dict(((k, n), f) for k, n, f in magics())[(kind, name)]
    assert message.endswith(f"\nUsage: {usage_line(function)}"), message
    assert snapshot(world, tmp_path) == before
    assert "cell_body_ran" not in world.user_ns


# ---------------------------------------------------------------- pairs that were dropped


def test_trace_options_without_on_are_refused_not_dropped(world, tmp_path):
    for line in ("--names", "--max-entries 5"):
        before = snapshot(world, tmp_path)
        message = refused(world, "line", "gpu_trace", line)
        option = line.split()[0]
        assert f"{option} applies to tracing: %gpu_trace on {option}" in message, message
        assert snapshot(world, tmp_path) == before


def test_history_settings_and_limit_all_apply(world):
    from colab_gpu_guard.ipython.magics import HistoryMagics

    history = next(
        m for m in world.magics_manager.registry.values() if isinstance(m, HistoryMagics)
    )
    saved = history.tracker.reset_peaks, history.output_warning.threshold
    try:
        with capture_output() as captured:
            world.run_line_magic("gpu_history", "--reset-peaks on --warn-output 1GiB --limit 2")
        out = captured.stdout
        assert history.tracker.reset_peaks is True
        assert history.output_warning.threshold == 1 << 30
        lines = out.splitlines()
        assert len(lines) >= 3, out  # the warning's line, the peaks' line, then the history
        assert "peak" in lines[1].lower(), out
        with capture_output() as captured:
            world.run_line_magic("gpu_history", "--limit 2")
        assert out.endswith(captured.stdout), (out, captured.stdout)  # the same history
    finally:
        history.tracker.reset_peaks, history.output_warning.threshold = saved


@pytest.mark.parametrize(
    "kind, name, pair", CONFLICTS, ids=lambda x: " ".join(x) if isinstance(x, tuple) else x
)
def test_each_pair_alone_is_accepted(kind, name, pair):
    """What makes the pair a conflict is the two together: each alone parses."""
    from IPython.core.magic_arguments import parse_argstring

    from colab_gpu_guard.ipython.magics.base import given

    function = dict(((k, n), f) for k, n, f in magics())[(kind, name)]
    for form in pair:
        args = parse_argstring(function, " ".join(typed(function, form, _Folder())))
        assert given(function, args, form)
        assert not given(function, args, next(other for other in pair if other != form))


class _Folder:
    def __truediv__(self, name: str) -> str:
        return name
