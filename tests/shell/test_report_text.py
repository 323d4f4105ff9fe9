"""Every report a user can leave as a cell's last expression shows as its text in a
terminal, nbconvert's text output or a front end without HTML (IPython's plain-text
formatter), not as the dataclass repr."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("torch")

import colab_gpu_guard as guard  # noqa: E402


def reports() -> list:
    record = guard.repro_record()
    other = dataclasses.replace(record, seeding=dataclasses.replace(record.seeding, seed=12345))
    return [guard.seed_all(7), guard.rng_state(), record, guard.repro_diff(other, record)]


def test_plain_text_of_each_report_is_its_text(ip):
    formatter = ip.display_formatter.formatters["text/plain"]
    for report in reports():
        text = formatter(report)
        assert text == str(report), type(report).__name__
        assert not text.startswith(type(report).__name__ + "(")
