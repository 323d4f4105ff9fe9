"""The README starts where a user is: install, load, the four everyday commands, in plain
words, on its first screen; its links stay in the repository; its outputs come from a run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from colab_gpu_guard import units
from tools import readme_outputs

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIRST_SCREEN = 60
PUBLIC_DOCUMENTATION = ("https://pytorch.org/docs/", "https://pytorch.org/get-started/")


def _readme() -> str:
    return README.read_text(encoding="utf-8")


def _first_screen() -> str:
    return "\n".join(_readme().splitlines()[:FIRST_SCREEN])


def test_the_first_screen_says_how_to_install_and_load_it():
    head = _first_screen()
    assert "!pip install colab_gpu_guard-" in head and "pip install ." in head
    assert "make wheel" in head
    assert "%load_ext colab_gpu_guard" in head


@pytest.mark.parametrize("command", ["%seed_all 42", "%gpu_status", "%gpu_reset", "%gpu_panel"])
def test_the_first_screen_shows_the_everyday_commands(command):
    assert command in _first_screen()


def test_the_first_screen_uses_no_jargon():
    assert units.jargon_in(_first_screen()) == []


def test_readme_is_short():
    """About 200 lines: the rest is in docs/reference.md and CONTRIBUTING.md (the slack is
    for the generated outputs, whose length follows the reports')."""
    assert len(_readme().splitlines()) <= 225


def test_readme_shows_both_setup_commands():
    text = _readme()
    assert "make demo" in text and "make test" in text


def test_the_magics_reference_lives_in_docs():
    text = _readme()
    assert "(docs/reference.md)" in text
    assert "magics-reference" not in text  # the generated block moved there


def test_every_link_stays_in_the_repository_or_is_public_documentation():
    text = _readme()
    links = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"https?://[^\s)>`\"]+", text)
    assert links
    for link in links:
        if link.startswith(("http://", "https://")):
            assert link.startswith(PUBLIC_DOCUMENTATION), link
        else:
            assert (ROOT / link.split("#")[0]).exists(), link
    assert "colab-gpu-guard/" not in text  # no address the repository never stated


def test_every_output_block_is_generated():
    """Each `<!-- output: NAME -->` block is one tools/readme_outputs.py writes, and it has
    been written (CI runs `tools/readme_outputs.py --check` to compare it with a run)."""
    blocks = {m.group(2): m.group(3) for m in readme_outputs.BLOCK.finditer(_readme())}
    names = {cell.block for cells in readme_outputs.SESSIONS.values() for cell in cells}
    assert set(blocks) == (names - {None}) | {"oom_advice"}
    assert all(text.strip() for text in blocks.values()), "run: python tools/readme_outputs.py"


def test_the_oom_message_shown_is_a_real_one():
    """The advisor example reads the first torch OutOfMemoryError of the fixtures, whose
    text is PyTorch's (each entry there names its source)."""
    message = readme_outputs._oom_message()
    assert message.startswith("CUDA out of memory. Tried to allocate ")
    assert message in _readme()


def test_make_wheel_builds_the_wheel_the_readme_installs():
    """README: `make wheel` (or `pip wheel --no-deps -w dist .`) writes the wheel that
    `!pip install colab_gpu_guard-*.whl` installs (dry run: the command, not the build)."""
    import shutil
    import subprocess

    if shutil.which("make") is None:
        pytest.skip("make is not installed here")
    done = subprocess.run(
        ["make", "-n", "wheel"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert "-m pip wheel --no-deps -w dist ." in done.stdout
    assert "pip wheel --no-deps -w dist ." in _first_screen()


GPU_CAPTURES = ROOT / "docs" / "gpu-outputs.md"


def _on_cpu(source: str) -> str:
    return source.replace(".cuda()", "").replace(', device="cuda"', "")


def test_the_gpu_stories_are_the_readmes_with_the_tensors_on_the_gpu():
    """`--gpu` runs the README's stories as they are, with `.cuda()` and `device="cuda"`
    added (and one story of its own), so the two pages tell the same story."""
    for name, cells in readme_outputs.SESSIONS.items():
        gpu = readme_outputs.GPU_SESSIONS[name]
        assert [_on_cpu(cell.source) for cell in gpu] == [cell.source for cell in cells]
        assert [cell._replace(source="") for cell in gpu] == [
            cell._replace(source="") for cell in cells
        ]
        assert any(".cuda()" in cell.source for cell in gpu)
    assert set(readme_outputs.GPU_SESSIONS) - set(readme_outputs.SESSIONS) == {"trace"}


def test_the_gpu_page_shows_every_block_under_the_label_it_ran_on():
    blocks = {
        name: {cell.block: f"<{cell.block} output>\n" for cell in cells if cell.block}
        for name, cells in readme_outputs.GPU_SESSIONS.items()
    }
    page = readme_outputs.gpu_page("an NVIDIA H200 (driver 580.159.04, ...)", blocks)
    assert "as they ran on an NVIDIA H200 (driver 580.159.04, ...)" in page
    shown = [m.group(2) for m in readme_outputs.BLOCK.finditer(page)]
    assert shown == [name for _, name in readme_outputs.GPU_PAGE]
    assert set(shown) == {block for made in blocks.values() for block in made}
    for name in shown:
        assert f"<!-- output: {name} -->\n<{name} output>\n<!-- /output -->" in page


def test_without_a_gpu_the_capture_says_so_in_one_line(tmp_path):
    import subprocess
    import sys

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible here")
    page = tmp_path / "gpu-outputs.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "readme_outputs.py"), "--gpu", str(page)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2 and not page.exists()
    assert done.stderr == ""
    assert done.stdout.startswith("--gpu needs a CUDA GPU") and done.stdout.count("\n") == 1


def test_the_gpu_captures_show_the_cells_the_tool_runs():
    """docs/gpu-outputs.md, once a GPU run wrote it, shows the cells `--gpu` runs today: a
    story changed since must be captured again (or the page removed)."""
    if not GPU_CAPTURES.exists():
        pytest.skip("no GPU capture yet: tools/readme_outputs.py --gpu on a GPU writes it")
    page = GPU_CAPTURES.read_text(encoding="utf-8")
    shown = re.findall(r"```python\n(.*?)\n```", page, re.DOTALL)
    ran = [
        cell.source
        for cells in readme_outputs.GPU_SESSIONS.values()
        for cell in cells
        if cell.block and cell.shown and not cell.is_line_magic
    ]
    assert shown == ran
