"""Which line of the user's code an allocation's stack points at: the first frame in a
notebook cell, and the first in the user's own modules below it; frames of torch, the
standard library, installed packages and IPython are folded away.

Frames are torch's snapshot frames (``{"filename", "line", "name"}``), innermost first.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
from typing import Any, NamedTuple, Optional

from .. import notebook_refs
from ..notebook_refs import cell_files
from .kinds import BEFORE, CELL, LIBRARY, MODULE, NO_STACK, SourceLine

# Installed code, read from the path itself, so that a snapshot saved on another machine
# (its torch under /opt/torch/.venv/lib/python3.12/site-packages/) folds the same: an
# installed package's folder, the standard library's, and the packages a notebook kernel
# runs on wherever they were put on sys.path (a PYTHONPATH folder, a source checkout).
_INSTALLED = re.compile(
    r"[\\/](?:site-packages|dist-packages|lib[\\/]python\d+(?:\.\d+)?|Lib)[\\/]"
    r"|[\\/](?:torch|IPython|ipykernel|traitlets|triton|colab_gpu_guard)[\\/]"
)


def _library_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib") if key in paths}
    roots.update(path for path in sys.path if "site-packages" in path or "dist-packages" in path)
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this package
    return tuple(os.path.join(os.path.realpath(root), "") for root in roots if root)


class SavedCell(NamedTuple):
    """A cell of the kernel a saved snapshot came from: its number and its source."""

    number: int
    source: str


class Places:
    """Classifies frames for one trace: a cell's line, a user module's line, or folded.
    Per file name the verdict is cached (a trace repeats few files many times)."""

    def __init__(self, shell: Any = None, cells: Optional[dict[str, SavedCell]] = None) -> None:
        self.shell = shell if shell is not None else notebook_refs.running_shell()
        self.cells = cells or {}
        self._roots = _library_roots()
        self._kinds: dict[str, str] = {}

    def _kind(self, filename: str) -> str:
        kind = self._kinds.get(filename)
        if kind is None:
            kind = self._kinds[filename] = self._classify(filename)
        return kind

    def _classify(self, filename: str) -> str:
        if filename in self.cells or cell_files.cell_line(filename, 1, self.shell) is not None:
            return CELL
        if not filename.endswith(".py") or filename.startswith("<"):
            return LIBRARY  # C++ frames (stacks="all"), <frozen ...>, <string>
        if _INSTALLED.search(filename):
            return LIBRARY
        real = os.path.realpath(filename)
        if any(real.startswith(root) for root in self._roots):
            return LIBRARY
        return MODULE

    def where(self, frames: Any) -> tuple[SourceLine, Optional[SourceLine]]:
        """(the allocation's place, the user's module line under it or None): the innermost
        cell frame, and the innermost user-module frame inside it; a stack without a cell
        frame is placed at its innermost module line, else folded (LIBRARY / NO_STACK)."""
        module: Optional[SourceLine] = None
        for frame in frames or ():
            filename = frame.get("filename", "")
            line = int(frame.get("line", 0) or 0)
            kind = self._kind(filename)
            if kind == CELL and filename in self.cells:
                saved = self.cells[filename]
                lines = saved.source.splitlines()
                text = lines[line - 1].strip() if 0 < line <= len(lines) else ""
                return SourceLine(CELL, saved.number, line, "", text), module
            if kind == CELL:
                found = cell_files.cell_line(filename, line, self.shell)
                assert found is not None
                text = cell_files.source_line(filename, line)
                return SourceLine(CELL, found.number, found.line, "", text), module
            if kind == MODULE and module is None:
                text = cell_files.source_line(filename, line)
                module = SourceLine(MODULE, None, line, filename, text)
        if module is not None:
            return module, None
        return SourceLine(LIBRARY if frames else NO_STACK), None


def label(where: SourceLine) -> str:
    """``[5] line 12``, ``mymodel.py line 20``, or the folded kind's words."""
    if where.kind == CELL:
        return f"[{where.cell}] line {where.line}"
    if where.kind == MODULE:
        return f"{os.path.basename(where.filename)} line {where.line}"
    return FOLDED_WORDS.get(where.kind, where.kind)


FOLDED_WORDS = {
    LIBRARY: "inside torch or a library (no line of yours on the stack)",
    NO_STACK: "no Python line recorded (torch's own threads, e.g. the backward pass)",
    BEFORE: "allocated before this cell",
}
