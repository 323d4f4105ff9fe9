"""seed_all called from Python while %seed_all --every-cell is on takes over as the base
(as the magic does) and says so; --no-warn-only switches warn-only off explicitly;
%repro records the base seed in force."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from IPython.core.error import UsageError

from colab_gpu_guard import seed_all, seeding

CELL = "cell_draw = (random.random(), float(numpy.random.rand()), torch.rand(2).tolist())"


def cell_draw(ip, run_cell) -> tuple:
    run_cell(CELL)
    return ip.user_ns["cell_draw"]


@pytest.fixture(autouse=True)
def modes_off():
    seed_all(0, deterministic=False)
    yield
    seed_all(0, deterministic=False)


def test_seed_all_from_python_takes_over_every_cell(ip, run_cell, capsys):
    run_cell("import random, numpy, torch")
    run_cell("%seed_all 7 --every-cell")
    from_7 = cell_draw(ip, run_cell)
    run_cell("%seed_all 5 --every-cell")
    capsys.readouterr()

    run_cell("from colab_gpu_guard import seed_all\nreport = seed_all(7)")
    report = ip.user_ns["report"]
    assert report.every_cell is True
    assert report.summary().endswith("; every cell reseeded from 7"), report.summary()
    assert cell_draw(ip, run_cell) == from_7  # the next cells: reseeded from 7, not 5
    assert cell_draw(ip, run_cell) == from_7
    run_cell("%repro --json")
    assert '"every_cell": 7' in capsys.readouterr().out

    run_cell("%seed_all --no-every-cell")
    report = seed_all(8)  # per-cell reseeding off: seed_all says nothing of it
    assert report.every_cell is None and "every cell" not in report.summary()
    assert cell_draw(ip, run_cell) != cell_draw(ip, run_cell)


def test_unload_stops_following_seed_all(ip, run_cell):
    run_cell("%seed_all 7 --every-cell")
    ip.run_line_magic("unload_ext", "colab_gpu_guard")
    try:
        assert seeding.every_cell.active_reseeder() is None
        assert seed_all(3).every_cell is None
    finally:
        ip.run_line_magic("load_ext", "colab_gpu_guard")


def test_no_warn_only_switches_warn_only_off_and_keeps_deterministic(ip, capsys):
    ip.run_line_magic("seed_all", "42 --warn-only")
    assert torch.is_deterministic_algorithms_warn_only_enabled()
    capsys.readouterr()
    ip.run_line_magic("seed_all", "5 --no-warn-only")
    out = capsys.readouterr().out
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert "deterministic on" in out and "warn-only" not in out, out
    before = (seeding.last_seed(), torch.is_deterministic_algorithms_warn_only_enabled())
    with pytest.raises(UsageError, match="--warn-only and --no-warn-only contradict"):
        ip.run_line_magic("seed_all", "9 --warn-only --no-warn-only")
    assert (seeding.last_seed(), torch.is_deterministic_algorithms_warn_only_enabled()) == before
