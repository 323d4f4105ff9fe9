"""The IPython layer: connects the core to a running shell (magics, event hooks, the
widget panel). Imported only by ``%load_ext colab_gpu_guard``, so it may import IPython at
its top; the panel (ipywidgets) is imported only when first shown.

`load` and `unload` are symmetric: `unload` removes exactly what `load` added.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .magics import MAGIC_CLASSES
from .registration import Registration, _registrations, registration_for

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

__all__ = ["Registration", "load", "registration_for", "unload"]


def load(shell: InteractiveShell) -> None:
    """Register the magics and their event callbacks on `shell` (again: reloaded)."""
    if id(shell) in _registrations:
        unload(shell)
    registration = Registration(shell)
    _registrations[id(shell)] = registration
    for magics_class_ in MAGIC_CLASSES:
        instance = magics_class_(shell, registration)
        shell.register_magics(instance)
        registration.magics.append(instance)
        instance.on_load()


def unload(shell: InteractiveShell) -> None:
    """Remove every magic, callback and handler `load` added to `shell`."""
    registration = _registrations.pop(id(shell), None)
    if registration is not None:
        registration.close()
