"""NumPy: its legacy global RNG (``numpy.random.seed``)."""

from __future__ import annotations

from types import ModuleType
from typing import Optional

from . import is_installed, loaded_module, module_version

NAME = "NumPy"
MODULE = "numpy"


def loaded() -> Optional[ModuleType]:
    return loaded_module(MODULE)


def installed() -> bool:
    return is_installed(MODULE)


def version() -> str:
    return module_version(loaded(), "numpy")


def seed(value: int) -> str:
    import numpy

    numpy.random.seed(value)
    return "numpy.random.seed (the legacy global RNG)"


def is_array(obj: object) -> bool:
    numpy = loaded()
    return numpy is not None and isinstance(obj, numpy.ndarray)
