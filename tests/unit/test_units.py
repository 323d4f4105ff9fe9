"""The one way sizes and CUDA versions are written, in every report and view."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from colab_gpu_guard.units import (
    counted,
    cuda_version_text,
    format_bytes,
    jargon_in,
    signed_bytes,
)

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "n/a"),
        (0, "0 B"),
        (512, "512 B"),
        (1023, "1023 B"),
        (1024, "1 KiB"),
        (1536, "1.5 KiB"),
        (4000, "3.91 KiB"),
        (360_000, "352 KiB"),
        (12 * GiB, "12 GiB"),
        (1.06 * GiB, "1.06 GiB"),
        (14.75 * GiB, "14.8 GiB"),
        (382.9 * MiB, "383 MiB"),
        (-3 * MiB, "-3 MiB"),
        (-2048, "-2 KiB"),
        (5 * 1024**5, "5120 TiB"),
    ],
)
def test_sizes_have_three_significant_digits_and_no_trailing_zeros(value, text):
    assert format_bytes(value) == text


@given(st.integers(min_value=0, max_value=2**62))
def test_a_size_reads_back_within_half_a_percent(value):
    number, unit = format_bytes(value).split()
    scale = {"B": 1, "KiB": KiB, "MiB": MiB, "GiB": GiB, "TiB": 1024 * GiB}[unit]
    assert abs(float(number) * scale - value) <= max(0.005 * value, scale * 0.005, 1)


def test_changes_carry_their_sign():
    assert signed_bytes(1536) == "+1.5 KiB"
    assert signed_bytes(-2 * MiB) == "-2 MiB"
    assert signed_bytes(0) == "0 B"


def test_cuda_versions():
    assert cuda_version_text(12040) == "12.4"
    assert cuda_version_text(11080) == "11.8"
    assert cuda_version_text(None) is None


def test_counts_are_said_in_words_never_as_noun_s():
    assert counted(1, "cell") == "1 cell"
    assert counted(0, "cell") == "0 cells"
    assert counted(1024, "array") == "1,024 arrays"
    assert counted(2, "process", "processes") == "2 processes"
    # the word check the reports are held to finds every 'noun(s)', listed or not
    text = "memory history: 3 cell(s), 1 OOM(s); an (s) alone, and cells"
    assert jargon_in(text) == ["cell(s)", "OOM(s)"]
