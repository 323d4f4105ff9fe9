"""Python's own `random` module (always present)."""

from __future__ import annotations

import random
import sys
from types import ModuleType

NAME = "Python random"
MODULE = "random"


def loaded() -> ModuleType:
    return random


def installed() -> bool:
    return True


def version() -> str:
    return "{}.{}.{}".format(*sys.version_info[:3])


def seed(value: int) -> str:
    random.seed(value)
    return "random.seed"
