"""Python's own `random` module (always present)."""

from __future__ import annotations

import platform
import random
from types import ModuleType

NAME = "Python random"
MODULE = "random"


def loaded() -> ModuleType:
    return random


def installed() -> bool:
    return True


def version() -> str:
    return platform.python_version()


def seed(value: int) -> str:
    random.seed(value)
    return "random.seed"
