"""Which notebook cell a code file name is, as the user sees it (``[5]``), and the text of
its lines.

IPython compiles each cell under a file name of its compiler's making: IPython's own
``<ipython-input-5-1a2b3c4d5e6f>`` (a plain shell, any version; Colab's kernel names its
files ``ipython-input-5-...`` too), or ipykernel's ``/tmp/ipykernel_<pid>/<hash>.py``.
IPython 8 and later keep a map from file name to cell number (``compile._filename_map``);
IPython 7.34 under ipykernel 6 keeps none, so the number is found by asking the shell's own
compiler to name each recent cell again. Code this package compiles for a cell (the body
of a cell magic) is remembered here with its number and line offset.
"""

from __future__ import annotations

import linecache
import re
from typing import Any, NamedTuple, Optional

_INPUT_NAME = re.compile(r"ipython-input-(\d+)-")
_HISTORY_LOOKBACK = 200  # recent cells renamed at most, per file name not found otherwise
_ENDINGS = ("", "\n", "\n\n")


class CellLine(NamedTuple):
    """A line of a notebook cell: the cell's number (``In [number]``) and the line in it
    (1-based, as the cell shows it)."""

    number: int
    line: int


_remembered: dict[str, tuple[int, int]] = {}  # file name -> (cell number, line offset)
_found: dict[str, Optional[int]] = {}  # from the history search, per file name


def remember(filename: str, number: int, line_offset: int = 0) -> None:
    """Code compiled under `filename` is cell `number`'s, its line L the cell's line
    ``L + line_offset`` (a cell magic's body compiled without its first line)."""
    _remembered[filename] = (number, line_offset)


def running_cell_number(shell: Any) -> Optional[int]:
    """The number of the cell the shell is running now (``In [N]``), or None outside a
    cell. IPython 8+ advances ``execution_count`` before running a cell and 7.34 after, so
    it is read from the running cell's result, which both versions hand the display hook."""
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    number = getattr(result, "execution_count", None)
    if isinstance(number, int):
        return number
    return None


def cell_line(filename: str, line: int, shell: Any = None) -> Optional[CellLine]:
    """Where code compiled under `filename`, at `line`, sits in the notebook; None when
    `filename` is not a cell's."""
    remembered = _remembered.get(filename)
    if remembered is not None:
        return CellLine(remembered[0], line + remembered[1])
    number = _number(filename, shell)
    return CellLine(number, line) if number is not None else None


def _number(filename: str, shell: Any) -> Optional[int]:
    if shell is not None:
        mapped = getattr(getattr(shell, "compile", None), "_filename_map", None)
        if isinstance(mapped, dict) and isinstance(mapped.get(filename), int):
            return mapped[filename]
    match = _INPUT_NAME.search(filename)
    if match is not None:
        return int(match.group(1))
    if shell is None or filename not in linecache.cache:
        return None  # never compiled by the shell: not a cell
    if filename not in _found:
        _found[filename] = _renamed(filename, shell)
    return _found[filename]


def _renamed(filename: str, shell: Any) -> Optional[int]:
    """The recent cell whose code the shell's compiler names `filename` (IPython 7.34 under
    ipykernel: the name is a hash of the cell's text, and no map is kept)."""
    compiler = getattr(shell, "compile", None)
    history = getattr(shell, "history_manager", None)
    raw = getattr(history, "input_hist_raw", None)
    parsed = getattr(history, "input_hist_parsed", None)
    name_of = getattr(compiler, "get_code_name", None)
    if not isinstance(raw, list) or not isinstance(parsed, list) or name_of is None:
        return None
    last = min(len(raw), len(parsed)) - 1
    for number in range(last, max(0, last - _HISTORY_LOOKBACK), -1):
        # the history keeps each cell without its trailing newlines; the name was made
        # from the cell as it came, which front ends send with none, or some
        for ending in _ENDINGS:
            if name_of(raw[number] + ending, parsed[number] + ending, number) == filename:
                return number
    return None


def source_line(filename: str, line: int) -> str:
    """The text of `line` in `filename` (a cell's, kept by IPython in ``linecache``, or a
    module's), stripped; "" when not known."""
    return linecache.getline(filename, line).strip()
