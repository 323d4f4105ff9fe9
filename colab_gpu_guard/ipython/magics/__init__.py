"""The extension's magics: thin layers over the API, their docstrings are `%magic?` help.

MAGIC_CLASSES is the order they are registered (and listed in docs/reference.md);
`usage_lines()` is each magic's usage line, the one source for help, errors and the
reference. Each magic's module has its help (the docstring and argument decorators) and
REFERENCE, the rest of what docs/reference.md says of it.
"""

from __future__ import annotations

from typing import Callable

from .advice import AdvisorMagics
from .base import GuardMagics, usage_error, usage_line
from .history import HistoryMagics
from .panel import PanelMagics
from .repro import ReproMagics
from .reset import ResetMagics
from .seed import SeedMagics
from .status import StatusMagics
from .trace import TraceMagics

__all__ = [
    "MAGIC_CLASSES",
    "AdvisorMagics",
    "GuardMagics",
    "HistoryMagics",
    "PanelMagics",
    "ReproMagics",
    "ResetMagics",
    "SeedMagics",
    "StatusMagics",
    "TraceMagics",
    "line_magics",
    "usage_error",
    "usage_line",
    "usage_lines",
]

MAGIC_CLASSES: list[type[GuardMagics]] = [
    SeedMagics,
    ReproMagics,
    StatusMagics,
    AdvisorMagics,
    PanelMagics,
    HistoryMagics,
    ResetMagics,
    TraceMagics,
]


def line_magics() -> dict[str, Callable]:
    """Each line magic's function by name, in MAGIC_CLASSES order."""
    return {
        name: getattr(magics_class, method_name)
        for magics_class in MAGIC_CLASSES
        for name, method_name in magics_class.magics.get("line", {}).items()
    }


def usage_lines() -> dict[str, str]:
    """Each magic's usage line by name, e.g. ``{"gpu_panel": "%gpu_panel [--new] ..."}``:
    what its `%magic?` help, its error messages and docs/reference.md show."""
    return {name: usage_line(function) for name, function in line_magics().items()}
