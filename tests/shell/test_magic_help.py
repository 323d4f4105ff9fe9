"""Each `%magic?` fits a screen, in plain words, and its usage line is the same in its help,
in its error messages and in docs/reference.md: one source, `usage_lines()`."""

from __future__ import annotations

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from colab_gpu_guard import units
from colab_gpu_guard.ipython.magics import line_magics, usage_lines
from colab_gpu_guard.ipython.magics import reference as magic_text
from tests.bad_input import BAD_INPUT
from tools import magic_reference

SCREEN = 25  # lines: the most `%magic?` may print
WIDTH = 100  # characters a line

NAMES = list(usage_lines())


def test_every_magic_is_covered():
    assert sorted(BAD_INPUT) == sorted(NAMES)


def pager_text(ip, name: str) -> str:
    """What `%name?` prints in a real IPython shell."""
    with capture_output() as captured:
        result = ip.run_cell(f"%{name}?")
    assert result.success
    return captured.stdout


@pytest.mark.parametrize("name", NAMES)
def test_help_fits_a_screen(ip, name):
    text = pager_text(ip, name)
    lines = text.rstrip("\n").splitlines()
    assert len(lines) <= SCREEN, text
    assert max(len(line) for line in lines) <= WIDTH, text


@pytest.mark.parametrize("name", NAMES)
def test_help_is_usage_options_one_example_and_the_reference(ip, name):
    text = pager_text(ip, name)
    assert f"\n  {usage_lines()[name]}\n" in text  # the usage line, as `::` code
    examples = [line for line in text.splitlines() if line.startswith("Example")]
    assert len(examples) == 1 and examples[0].startswith(f"Example: %{name}"), text
    assert f"colab_gpu_guard.reference('{name}')" in text
    # one line per option: each option's help follows it on its line
    parser = line_magics()[name].parser
    for action in parser._actions:
        names = action.option_strings or [action.metavar or action.dest]
        line = next(line for line in text.splitlines() if line.startswith(f"  {names[0]}"))
        assert action.help and line.rstrip().endswith(action.help), line


@pytest.mark.parametrize("name", NAMES)
def test_help_uses_no_jargon(ip, name):
    assert units.jargon_in(pager_text(ip, name)) == []


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["unknown option", "bad value"])
def test_errors_end_with_the_helps_usage_line(ip, name, kind):
    line, message = ("--bogus", "unrecognized arguments: --bogus")
    if name == "gpu_advice":  # it says what it takes, whatever it got
        message = "expected 'on' or 'off', got '--bogus'"
    if kind == "bad value":
        line, message = BAD_INPUT[name]
    with pytest.raises(UsageError) as raised:
        ip.run_line_magic(name, line)
    text = str(raised.value)
    assert message in text
    assert text.endswith(f"\nUsage: {usage_lines()[name]}"), text
    assert f"\n  {usage_lines()[name]}\n" in ip.find_line_magic(name).__doc__


@pytest.mark.parametrize("name", NAMES)
def test_the_reference_shows_the_help_and_the_usage_line(name):
    reference = magic_reference.REFERENCE_MD.read_text(encoding="utf-8")
    help_text = magic_text.help_text(line_magics()[name])
    assert help_text.startswith(usage_lines()[name] + "\n")
    assert f"## `%{name}`\n\n```text\n{help_text}\n```\n" in reference


def test_the_reference_is_up_to_date():
    reference = magic_reference.REFERENCE_MD.read_text(encoding="utf-8")
    assert reference == magic_reference.reference(), "run: python tools/magic_reference.py"
    assert magic_reference.main(["--check"]) == 0


def test_the_glossary_is_in_the_reference_and_uses_no_jargon():
    reference = magic_reference.REFERENCE_MD.read_text(encoding="utf-8")
    for term, meaning in magic_text.GLOSSARY:
        assert f"- **{term}**: {meaning}" in reference
        assert units.jargon_in(f"{term} {meaning}") == [], term


def test_the_reference_is_in_the_package_for_a_notebook(ip):
    """`colab_gpu_guard.reference('gpu_history')`, the help's pointer, shows that magic's part
    of docs/reference.md as Markdown in a notebook (also where the package came from a wheel
    without docs/); no argument shows all of it; a name that is not a magic's says which are."""
    page = magic_reference.REFERENCE_MD.read_text(encoding="utf-8")
    with capture_output() as captured:
        result = ip.run_cell("import colab_gpu_guard\ncolab_gpu_guard.reference('gpu_history')")
    assert result.success
    shown = result.result
    markdown = ip.display_formatter.formatters["text/markdown"]
    enabled, markdown.enabled = markdown.enabled, True  # on in a kernel, off in a terminal
    try:
        formatted, _metadata = ip.display_formatter.format(shown)
    finally:
        markdown.enabled = enabled
    assert formatted["text/markdown"] == str(shown)
    assert formatted["text/plain"] == str(shown).rstrip("\n")  # IPython drops the last newline
    assert str(shown).startswith("## `%gpu_history`\n\n```text\n%gpu_history ")
    assert str(shown) in page and "## `%gpu_reset`" not in str(shown)
    assert captured.stdout.startswith("Out[")  # the text form, in a terminal
    import colab_gpu_guard

    assert colab_gpu_guard.reference("%gpu_history") == shown
    assert page.endswith(colab_gpu_guard.reference())
    with pytest.raises(ValueError) as raised:
        colab_gpu_guard.reference("gpu_histroy")
    assert "'gpu_history'" in str(raised.value) and "'seed_all'" in str(raised.value)
