"""`colab_gpu_guard.reference('gpu_reset')` in a real kernel (nbclient): the reference of one
magic shown as Markdown, the same text docs/reference.md holds, without %load_ext."""

from __future__ import annotations

import pytest

from tests.kernel.cells import run_cells
from tools import magic_reference


@pytest.mark.slow
def test_the_reference_renders_as_markdown_in_a_kernel(tmp_path):
    shown, error = run_cells(
        [
            "import colab_gpu_guard\ncolab_gpu_guard.reference('gpu_reset')",
            "colab_gpu_guard.reference('nope')",
        ],
        tmp_path,
    )
    [result] = [output for output in shown if output.output_type == "execute_result"]
    markdown = result.data["text/markdown"]
    assert markdown.startswith("## `%gpu_reset`\n\n```text\n%gpu_reset ")
    assert markdown in magic_reference.REFERENCE_MD.read_text(encoding="utf-8")
    [failed] = error
    assert failed.output_type == "error" and failed.ename == "ValueError"
    assert "no such magic; one of 'seed_all'" in failed.evalue
