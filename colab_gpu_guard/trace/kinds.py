"""The names a trace gives places (where an allocation was made) and recordings (how a
report came to be), and `SourceLine`, the place itself."""

from __future__ import annotations

from typing import NamedTuple, Optional

# Where an allocation was made, as `SourceLine.kind`:
CELL = "cell"  # a line of a notebook cell (`cell`, `line`)
MODULE = "module"  # a line of the user's own module (`filename`, `line`)
LIBRARY = "library"  # only torch's, the standard library's or installed packages' frames
NO_STACK = "no stack"  # no Python frame recorded (torch's own threads, e.g. backward)
BEFORE = "before"  # allocated before the traced window (no stack of it in this trace)

# How a report came to be, as `TraceReport.recording`:
OWN = "own"  # switched on for this cell and off after it
USERS = "yours"  # the user's recording was on: left untouched, this cell's window read
NONE = "none"  # nothing recorded (`unavailable` says why)
SAVED = "saved"  # read from a snapshot saved earlier (another kernel's, maybe a GPU's)


class SourceLine(NamedTuple):
    """A place in the user's code: a notebook cell's line (``[5] line 12``), a line of a
    module of theirs, or one of the kinds above with no line (`line` 0)."""

    kind: str
    cell: Optional[int] = None
    line: int = 0
    filename: str = ""
    text: str = ""
