"""One small module per framework, each answering the same questions.

Every module exposes ``NAME`` (what reports call it), ``MODULE`` (its ``sys.modules`` key),
``loaded()`` (the module if the user already imported it, else None), ``installed()`` and
``version()``. Modules whose framework has a global RNG also expose ``seed(seed)``.
No module here imports its framework at import time.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType
from typing import Optional


def loaded_module(name: str) -> Optional[ModuleType]:
    """The module if it is fully imported already; never imports it."""
    module = sys.modules.get(name)
    if module is None:
        return None
    # A module half-way through its own import has a spec with `_initializing` set.
    spec = getattr(module, "__spec__", None)
    if spec is not None and getattr(spec, "_initializing", False):
        return None
    return module


def is_installed(name: str) -> bool:
    """Whether `import name` would find something, without importing it."""
    if name in sys.modules:
        return True
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def module_version(module: Optional[ModuleType], dist_name: str) -> str:
    """The version of an imported module, or of the installed distribution."""
    version = getattr(module, "__version__", None) if module is not None else None
    if version:
        return str(version)
    try:
        from importlib.metadata import PackageNotFoundError
        from importlib.metadata import version as dist_version

        return dist_version(dist_name)
    except (ImportError, PackageNotFoundError, ValueError):
        return "unknown"
