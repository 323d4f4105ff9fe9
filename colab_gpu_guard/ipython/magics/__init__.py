"""The extension's magics: thin layers over the API, their docstrings are `%magic?` help.

MAGIC_CLASSES is the order they are registered (and listed in the README's reference).
"""

from __future__ import annotations

from .advice import AdvisorMagics
from .base import GuardMagics, usage_error
from .history import HistoryMagics
from .panel import PanelMagics
from .repro import ReproMagics
from .reset import ResetMagics
from .seed import SeedMagics
from .status import StatusMagics

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
    "usage_error",
]

MAGIC_CLASSES: list[type[GuardMagics]] = [
    SeedMagics,
    ReproMagics,
    StatusMagics,
    AdvisorMagics,
    PanelMagics,
    HistoryMagics,
    ResetMagics,
]
