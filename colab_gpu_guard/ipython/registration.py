"""Exact bookkeeping of what the extension adds to a shell (magics, event callbacks,
cleanups), so that `%unload_ext` removes exactly that."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, Optional

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.core.magic import Magics


class Registration:
    """Everything the extension added to one shell: magics, event callbacks, cleanups."""

    def __init__(self, shell: InteractiveShell) -> None:
        self.shell = shell
        self.magics: list[Magics] = []
        self.events: list[tuple[str, Callable]] = []
        self.cleanups: list[Callable[[], None]] = []

    def register_event(self, event: str, callback: Callable) -> None:
        if (event, callback) in self.events:
            return
        self.shell.events.register(event, callback)
        self.events.append((event, callback))

    def unregister_event(self, event: str, callback: Callable) -> None:
        if (event, callback) not in self.events:
            return
        self.events.remove((event, callback))
        with contextlib.suppress(ValueError):  # already removed by someone else
            self.shell.events.unregister(event, callback)

    def add_cleanup(self, cleanup: Callable[[], None]) -> None:
        self.cleanups.append(cleanup)

    def close(self) -> None:
        for event, callback in list(self.events):
            self.unregister_event(event, callback)
        for cleanup in reversed(self.cleanups):
            cleanup()
        self.cleanups.clear()
        manager = self.shell.magics_manager
        for instance in self.magics:
            for kind, names in instance.magics.items():
                for name in names:
                    if manager.magics[kind].get(name) is not None:
                        owner = getattr(manager.magics[kind][name], "__self__", None)
                        if owner is instance:
                            del manager.magics[kind][name]
            manager.registry.pop(type(instance).__name__, None)
        # IPython's Magics.__init__ appends each instance to shell.configurables and nothing
        # takes it out: left there, every unload or reload kept the old magics alive, and
        # through them this registration, the memory tracker with its cells' records and
        # the error advisor
        configurables = getattr(self.shell, "configurables", None)
        if isinstance(configurables, list):
            configurables[:] = [c for c in configurables if all(c is not m for m in self.magics)]
        self.magics.clear()


_registrations: dict[int, Registration] = {}


def registration_for(shell: Optional[InteractiveShell]) -> Optional[Registration]:
    return _registrations.get(id(shell))
