"""The README's magics reference is generated from the magics' docstrings: never stale."""

from __future__ import annotations

from tools.magic_reference import README, render


def test_readme_magics_reference_matches_the_docstrings():
    current = README.read_text(encoding="utf-8")
    assert render(current) == current, "run: python tools/magic_reference.py"


def test_readme_shows_both_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert "make demo" in text and "make test" in text
