"""%seed_all's one-line report, its full report (-v, str, HTML), and per-cell reseeding
taken over by a new seed, in a real IPython shell with real random, NumPy and torch."""

from __future__ import annotations

import os
import random
import re

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from IPython.core.error import UsageError

from colab_gpu_guard import seed_all, seeding
from colab_gpu_guard.ipython.magics import usage_lines
from colab_gpu_guard.seeding import determinism, precision


@pytest.fixture(autouse=True)
def modes_off():
    """Each test starts and ends with deterministic mode off (a new seed keeps it)."""
    seed_all(0, deterministic=False)
    yield
    seed_all(0, deterministic=False)


LINE = re.compile(r"seed (?P<seed>\d+)(?: \([^)]*\))?: (?P<seeded>.+?) seeded(?P<rest>;.*)$")


def states_after_seeding(seed: int) -> tuple:
    """Each stream's state right after seeding it by hand with `seed`."""
    random.seed(seed)
    python = random.getstate()
    np.random.seed(seed)
    numpy = np.random.get_state()
    torch.manual_seed(seed)
    return python, numpy, torch.get_rng_state()


def check_line_against_the_streams(line: str) -> int:
    """Every claim of the one line, checked against the real objects; returns the seed."""
    match = LINE.fullmatch(line)
    assert match, line
    seed = int(match["seed"])
    python, numpy, torch_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    expected = states_after_seeding(seed)
    seeded = match["seeded"]
    assert ("random" in seeded) == (python == expected[0])
    assert ("numpy" in seeded) == (
        numpy[0] == expected[1][0] and (numpy[1] == expected[1][1]).all()
    )
    assert ("torch (cpu" in seeded) == torch.equal(torch_state, expected[2])
    assert ("cuda" in seeded) == (torch.cuda.is_available())
    on = torch.are_deterministic_algorithms_enabled()
    assert ("deterministic on" in match["rest"]) == on
    assert ("deterministic off" in match["rest"]) == (not on)
    assert torch.backends.cudnn.deterministic == on
    return seed


# ---------------------------------------------------------------- the quiet default


def test_default_is_one_true_line_without_the_notes(ip, capsys):
    ip.run_line_magic("seed_all", "42")
    out = capsys.readouterr().out
    assert out == "seed 42: random, numpy, torch (cpu) seeded; deterministic off\n"
    assert check_line_against_the_streams(out.strip()) == 42
    assert "default_rng" not in out and "PYTHONHASHSEED" not in out


def test_repeating_seed_all_repeats_no_note(ip, capsys):
    for _ in range(3):
        ip.run_line_magic("seed_all", "42")
    out = capsys.readouterr().out
    assert out.count("\n") == 3 and "note" not in out


def test_drawn_seed_line_says_how_to_reproduce(ip, capsys):
    ip.run_line_magic("seed_all", "")
    line = capsys.readouterr().out.strip()
    seed = check_line_against_the_streams(line)
    assert f"(drawn from the OS: %seed_all {seed} reproduces this run)" in line


def test_a_drawn_seeds_command_keeps_its_flags_and_does_the_same_again(ip, capsys):
    """`%seed_all --strict` with a drawn seed: the command it prints has --strict (in a
    fresh runtime no mode is on for a plain `%seed_all N` to keep); run in this kernel, it
    leaves torch's flags as they are. A later mode adds to those in force."""
    try:
        ip.run_line_magic("seed_all", "--strict --every-cell")
        line = capsys.readouterr().out.strip().splitlines()[0]
        seed = int(line.split()[1])
        command = f"%seed_all {seed} --strict --every-cell"
        assert f"(drawn from the OS: {command} reproduces this run)" in line, line
        flags = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.allow_tf32)
        draws = torch.rand(3).tolist()
        ip.run_line_magic("seed_all", command.split(" ", 1)[1])
        assert (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.allow_tf32) == (
            flags
        )
        assert torch.rand(3).tolist() == draws
        capsys.readouterr()
        ip.run_line_magic("seed_all", "-v --warn-only")
        first = capsys.readouterr().out.strip().splitlines()[0]  # "seed_all: seed N (...)"
        drawn = int(first.split()[2])
        command = f"%seed_all {drawn} --warn-only --strict --every-cell"  # strict was kept
        assert f"rerun with {command} to reproduce" in first, first
    finally:
        ip.run_line_magic("seed_all", "0 --no-every-cell --no-deterministic")
        capsys.readouterr()


def test_deterministic_line_matches_torch(ip, capsys):
    ip.run_line_magic("seed_all", "42 --deterministic")
    line = capsys.readouterr().out.strip()
    check_line_against_the_streams(line)
    conv_tf32 = torch.backends.cudnn.conv.fp32_precision == "tf32"
    rnn_tf32 = torch.backends.cudnn.rnn.fp32_precision == "tf32"
    words = " and ".join(
        what for what, used in (("cuDNN convolutions", conv_tf32), ("cuDNN RNNs", rnn_tf32)) if used
    )
    # said in the one line only where a CUDA GPU is here that lacks TF32 (a T4): without
    # one it is off-topic there, and -v says it
    gpus = precision.gpu_archs(torch)
    assert (f"{words} would use TF32 on an A100/L4/H100 (not here)" in line) == (
        bool(words) and bool(gpus) and not any(gpu.has_tf32 for gpu in gpus)
    )
    if not gpus:
        assert line.endswith("; deterministic on"), line
    ip.run_line_magic("seed_all", "42 --warn-only")
    line = capsys.readouterr().out.strip()
    assert "deterministic on (warn-only)" in line
    assert torch.is_deterministic_algorithms_warn_only_enabled()


def test_verbose_prints_the_full_report(ip, capsys):
    ip.run_line_magic("seed_all", "42 -v")
    out = capsys.readouterr().out
    assert out.startswith("seed_all: seed 42 (given)\n")
    assert "numpy.random.default_rng() generators do not use the global RNG" in out
    assert "PYTHONHASHSEED=42 applies to Python processes started from now on" in out
    ip.run_line_magic("seed_all", "42 --verbose")
    assert "default_rng" in capsys.readouterr().out


def test_warnings_get_lines_of_their_own(ip, capsys, monkeypatch):
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":bogus")
    monkeypatch.setattr(
        determinism,
        "cublas_requirement",
        lambda torch: determinism.CublasRequirement(True, "a torch that checks"),
    )
    ip.run_line_magic("seed_all", "42 --deterministic")
    first, second, *rest = capsys.readouterr().out.splitlines()
    check_line_against_the_streams(first)
    assert second.startswith("  WARNING  CUBLAS_WORKSPACE_CONFIG=':bogus'")
    assert rest == []


def test_returned_report_is_full_and_its_html_collapses_it():
    report = seed_all(42)
    text = str(report)
    assert "note     numpy.random.default_rng()" in text
    assert "note     PYTHONHASHSEED=42 applies to Python processes started from now on" in text
    html = report._repr_html_()
    line = report.summary()
    assert line in html
    head, details = html.split("<details>", 1)
    assert line in head and "default_rng" not in head
    assert "default_rng" in details and "PYTHONHASHSEED" in details
    assert "<summary" in details and "open" not in details.split(">", 1)[0]


def test_html_escapes_the_summary_and_warnings():
    report = seed_all(3)
    report.warnings.append("<script>alert(1)</script>")
    report.skipped.append(seeding.SkippedRng("<b>x</b>", "<i>why</i>"))
    html = report._repr_html_()
    assert "<script>" not in html and "<b>x</b>" not in html and "<i>why</i>" not in html
    assert "&lt;script&gt;" in html.split("<details>")[0]


def test_line_names_what_was_skipped_and_why(monkeypatch):
    from colab_gpu_guard.frameworks import tensorflow as tensorflow_support

    monkeypatch.setattr(tensorflow_support, "loaded", lambda: None)
    monkeypatch.setattr(tensorflow_support, "installed", lambda: True)
    line = seed_all(1).summary()
    assert "; not seeded: TensorFlow (installed but not imported);" in line
    assert "PyTorch CUDA" not in line  # "torch (cpu)" says it already


# ---------------------------------------------------------------- per-cell reseeding

CELL = "cell_draw = (random.random(), float(numpy.random.rand()), torch.rand(2).tolist())"


def cell_draw(ip, run_cell) -> tuple:
    run_cell(CELL)
    return ip.user_ns["cell_draw"]


def test_new_seed_takes_over_the_per_cell_base(ip, run_cell, capsys):
    run_cell("import random, numpy, torch")
    run_cell("%seed_all 5 --every-cell")
    from_5 = cell_draw(ip, run_cell)
    run_cell("%seed_all 42 --every-cell")
    from_42 = cell_draw(ip, run_cell)
    assert from_42 != from_5
    capsys.readouterr()

    run_cell("%seed_all 5")  # no flag: per-cell reseeding goes on, from 5 now
    assert "; every cell reseeded from 5" in capsys.readouterr().out
    assert cell_draw(ip, run_cell) == from_5
    # draws between cells (not into `_`: a user's `_` would stop IPython's output history)
    run_cell("drawn = [random.random() for _ in range(9)]\ndel drawn")
    assert cell_draw(ip, run_cell) == from_5

    run_cell("%seed_all 6 --no-every-cell")
    out = capsys.readouterr().out
    assert out.startswith("seed 6: ") and "; per-cell reseeding off" in out
    first, second = cell_draw(ip, run_cell), cell_draw(ip, run_cell)
    assert first != second  # no longer reseeded before each cell


def test_conflicting_every_cell_flags_change_nothing(ip, run_cell):
    run_cell("import random, numpy, torch")
    run_cell("%seed_all 5 --every-cell")
    from_5 = cell_draw(ip, run_cell)
    before = (random.getstate(), torch.get_rng_state().tolist(), seeding.last_seed())
    with pytest.raises(UsageError) as caught:
        ip.run_line_magic("seed_all", "7 --every-cell --no-every-cell")
    message = str(caught.value)
    assert "--every-cell and --no-every-cell contradict each other" in message
    assert f"Usage: {usage_lines()['seed_all']}" in message
    assert (random.getstate(), torch.get_rng_state().tolist(), seeding.last_seed()) == before
    assert cell_draw(ip, run_cell) == from_5  # still reseeding from 5
    run_cell("%seed_all --no-every-cell")


@pytest.mark.parametrize("line", ["٤٢", "４２", "4２", "42 --every-cell --no-every-cell"])
def test_non_ascii_and_conflicts_leave_per_cell_base_alone(ip, run_cell, line):
    run_cell("import random, numpy, torch")
    run_cell("%seed_all 5 --every-cell")
    from_5 = cell_draw(ip, run_cell)
    with pytest.raises(UsageError, match="Usage: %seed_all"):
        ip.run_line_magic("seed_all", line)
    assert cell_draw(ip, run_cell) == from_5
    run_cell("%seed_all --no-every-cell")


@pytest.mark.parametrize(
    ("flags", "start", "words", "seeded"),
    [
        ((), None, "stay random (PYTHONHASHSEED was unset when it started)", False),
        ((), "", "stay random (PYTHONHASHSEED was empty when it started)", False),
        ((), "random", "stay random (PYTHONHASHSEED=random when it started)", False),
        ((), "7", "stay seeded with 7 (PYTHONHASHSEED=7 when it started)", True),
        ((), "0", "are not randomized (PYTHONHASHSEED=0 when it started)", True),
        (("-E",), "7", "stay random (Python started with -E or -I, which ignore", False),
    ],
)
def test_the_hash_seed_note_says_what_the_interpreter_started_with(flags, start, words, seeded):
    """Each way an interpreter can start, said as it is: the note's claim is checked against
    str hashes in two processes started alike (equal only where the hash seed is fixed)."""
    import subprocess
    import sys
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])  # -E ignores PYTHONPATH
    code = (
        f"import sys; sys.path.insert(0, {root!r})\n"
        # the note is the interpreter's alone: seeding torch (3 s to import) adds nothing
        "sys.modules['torch'] = None\n"
        "from colab_gpu_guard import seed_all\n"
        "print([n for n in seed_all(5).notes if n.startswith('PYTHONHASHSEED')][0])\n"
        "print(hash('colab_gpu_guard'))"
    )
    env = {key: value for key, value in os.environ.items() if key != "PYTHONHASHSEED"}
    if start is not None:
        env["PYTHONHASHSEED"] = start
    runs = []
    # the second process started alike only hashes (the note is the first's)
    for body in (code, "print('-')\nprint(hash('colab_gpu_guard'))"):
        done = subprocess.run(
            [sys.executable, *flags, "-c", body],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(done.stdout.strip().splitlines())
    note = runs[0][0]
    assert note.startswith(
        "PYTHONHASHSEED=5 applies to Python processes started from now on (subprocess, spawn "
        f"workers); this kernel's str hashes {words}"
    ), note
    assert note.endswith("; forked workers inherit that"), note
    assert (runs[0][1] == runs[1][1]) is seeded
