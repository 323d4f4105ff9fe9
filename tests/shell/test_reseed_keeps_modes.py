"""Reseeding keeps every mode in force: `%seed_all 5` after `%seed_all 42 --deterministic`
(or --warn-only, --strict, --every-cell) changes the seed and nothing else. A mode ends only
when asked (--no-deterministic, --no-strict, --no-every-cell; --deterministic without
--warn-only raises again), and the mode in force is read from torch itself where it can be
(a user may switch it on by hand)."""

from __future__ import annotations

import os
import random

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from IPython.core.error import UsageError

from colab_gpu_guard import seed_all, units
from colab_gpu_guard.ipython.magics import usage_lines
from colab_gpu_guard.seeding import DETERMINISM_ENV, determinism, precision


@pytest.fixture(autouse=True)
def modes_off():
    """Every test starts and ends with every mode off."""
    seed_all(0, deterministic=False)
    torch.use_deterministic_algorithms(False)
    yield
    seed_all(0, deterministic=False)
    torch.use_deterministic_algorithms(False)


def line_of(ip, capsys, line: str) -> str:
    ip.run_line_magic("seed_all", line)
    return capsys.readouterr().out.strip()


def warn_only() -> bool:
    return torch.is_deterministic_algorithms_warn_only_enabled()


def full_fp32() -> bool:
    flags = precision.read_precision(torch)
    return flags.tf32_uses() == [] and flags.cpu_reduced() == []


def test_reseeding_keeps_deterministic_mode(ip, capsys):
    line_of(ip, capsys, "42 --deterministic")
    out = line_of(ip, capsys, "5")
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic is True
    for name, (value, _reader) in DETERMINISM_ENV.items():
        assert os.environ.get(name) == value, name
    assert "deterministic on (kept)" in out, out
    assert out.startswith("seed 5: random, numpy, torch (cpu) seeded; deterministic on (kept)")
    assert units.jargon_in(out) == []
    full = line_of(ip, capsys, "6 -v")  # the full report says so too: no flag changed to show it
    assert "\n  modes    deterministic on (kept)" in full, full


def test_reseeding_keeps_warn_only(ip, capsys):
    line_of(ip, capsys, "42 --warn-only")
    out = line_of(ip, capsys, "5")
    assert torch.are_deterministic_algorithms_enabled() and warn_only()
    assert "deterministic on (warn-only, kept)" in out, out


def test_reseeding_keeps_strict(ip, capsys):
    line_of(ip, capsys, "42 --strict")
    assert full_fp32()
    out = line_of(ip, capsys, "5")
    assert torch.are_deterministic_algorithms_enabled() and full_fp32()
    assert "deterministic on (kept), full fp32 (TF32 off)" in out, out


def test_a_new_mode_adds_to_those_in_force(ip, capsys):
    line_of(ip, capsys, "42 --warn-only")
    out = line_of(ip, capsys, "5 --strict")  # warn-only stays: it is not switched off
    assert warn_only() and full_fp32()
    assert "(kept)" not in out  # a mode was named: the line says what is on, not "kept"
    assert "deterministic on (warn-only), full fp32 (TF32 off)" in out, out


def test_reseeding_keeps_every_cell_and_the_modes(ip, run_cell, capsys):
    line_of(ip, capsys, "42 --deterministic --every-cell")
    try:
        out = line_of(ip, capsys, "5")
        assert "deterministic on (kept)" in out and "every cell reseeded from 5" in out, out
        assert torch.are_deterministic_algorithms_enabled()
    finally:
        ip.run_line_magic("seed_all", "--no-every-cell")


def test_no_deterministic_switches_it_off_and_ends_strict(ip, capsys):
    before = precision.read_precision(torch)
    line_of(ip, capsys, "42 --strict")
    out = line_of(ip, capsys, "5 --no-deterministic")
    assert not torch.are_deterministic_algorithms_enabled()
    assert precision.read_precision(torch) == before
    for name in DETERMINISM_ENV:
        assert name not in os.environ, name
    assert "deterministic off" in out, out
    assert "deterministic off" in line_of(ip, capsys, "6")  # and stays off on a reseed


def test_no_strict_keeps_deterministic(ip, capsys):
    before = precision.read_precision(torch)
    line_of(ip, capsys, "42 --strict")
    out = line_of(ip, capsys, "5 --no-strict")
    assert torch.are_deterministic_algorithms_enabled()
    assert precision.read_precision(torch) == before
    assert "deterministic on" in out and "full fp32" not in out, out


def test_deterministic_after_warn_only_raises_again(ip, capsys):
    line_of(ip, capsys, "42 --warn-only --strict")
    out = line_of(ip, capsys, "5 --deterministic")  # --warn-only is its warning variant
    assert full_fp32()  # strict is kept: it ends only with --no-strict
    assert torch.are_deterministic_algorithms_enabled() and not warn_only()
    assert "deterministic on" in out and "warn-only" not in out, out


def test_a_mode_switched_on_by_hand_is_kept(ip, capsys):
    torch.use_deterministic_algorithms(True, warn_only=True)
    out = line_of(ip, capsys, "5")
    assert torch.are_deterministic_algorithms_enabled() and warn_only()
    assert "deterministic on (warn-only, kept)" in out, out
    line_of(ip, capsys, "5 --no-deterministic")
    assert not torch.are_deterministic_algorithms_enabled()


def test_a_mode_switched_off_by_hand_stays_off(ip, capsys):
    line_of(ip, capsys, "42 --deterministic")
    torch.use_deterministic_algorithms(False)
    out = line_of(ip, capsys, "5")
    assert not torch.are_deterministic_algorithms_enabled()
    assert "deterministic off" in out, out


def state() -> tuple:
    return (
        random.getstate(),
        repr(np.random.get_state()),
        torch.get_rng_state().tolist(),
        dict(os.environ),
        determinism.read_flags(torch),
        precision.read_precision(torch),
    )


@pytest.mark.parametrize(
    "line",
    [
        "5 --deterministic --no-deterministic",
        "5 --strict --no-strict",
        "5 --no-deterministic --strict",
        "5 --no-deterministic --warn-only",
        "--no-deterministic --deterministic",
    ],
)
def test_contradicting_flags_are_a_usage_error_that_changes_nothing(ip, line):
    ip.run_line_magic("seed_all", "42 --warn-only")
    before = state()
    with pytest.raises(UsageError) as raised:
        ip.run_line_magic("seed_all", line)
    text = str(raised.value)
    assert "contradict each other" in text, text
    assert text.endswith(f"\nUsage: {usage_lines()['seed_all']}"), text
    assert state() == before


def test_the_usage_line_names_every_option():
    usage = usage_lines()["seed_all"]
    for option in ("--deterministic", "--strict", "--every-cell"):
        assert f"[--[no-]{option[2:]}]" in usage, usage
    assert "[--warn-only]" in usage and "[-v]" in usage and "[SEED]" in usage


def test_the_api_keeps_modes_unless_told():
    seed_all(1, strict=True)
    report = seed_all(2)
    assert report.deterministic and report.strict and full_fp32()
    report = seed_all(3, strict=False)
    assert report.deterministic and not report.strict and not full_fp32()
    assert torch.are_deterministic_algorithms_enabled()
    report = seed_all(4, deterministic=False)
    assert not report.deterministic and not torch.are_deterministic_algorithms_enabled()


def test_the_api_refuses_switching_on_and_off_at_once_and_changes_nothing():
    seed_all(1, warn_only=True)
    before = state()
    for kwargs in (
        dict(deterministic=False, strict=True),
        dict(deterministic=False, warn_only=True),
    ):
        with pytest.raises(ValueError, match="contradict"):
            seed_all(2, **kwargs)
        assert state() == before
