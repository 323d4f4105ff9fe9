"""How the panel follows a shell's cells: its ``pre_run_cell`` / ``post_run_cell``
callbacks, registered through the extension's registration (so ``%unload_ext`` stops
them) or, without one, on the shell's events directly."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Callable, NamedTuple, Optional

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration

Callbacks = tuple[tuple[str, Callable[..., None]], ...]  # (event, callback)


class _Hook(NamedTuple):
    """Where the callbacks are registered."""

    shell: InteractiveShell
    registration: Optional[Registration]


class CellHooks:
    """The panel's event callbacks, registered or not. ``stopped``: the panel was stopped
    (``%unload_ext``) or closed, until it is attached again."""

    def __init__(self, callbacks: Callbacks) -> None:
        self._callbacks = callbacks
        self._hook: Optional[_Hook] = None
        self.stopped = False

    @property
    def attached(self) -> bool:
        return self._hook is not None

    @property
    def registration(self) -> Optional[Registration]:
        return self._hook.registration if self._hook is not None else None

    def attach(self, shell: InteractiveShell, registration: Optional[Registration]) -> None:
        """Register the callbacks on `shell` (through `registration` when given)."""
        self.detach()
        self.stopped = False
        for event, callback in self._callbacks:
            if registration is not None:
                registration.register_event(event, callback)
            else:
                shell.events.register(event, callback)
        self._hook = _Hook(shell, registration)

    def detach(self) -> None:
        """Unregister the callbacks."""
        hook, self._hook = self._hook, None
        if hook is None:
            return
        for event, callback in self._callbacks:
            if hook.registration is not None:
                hook.registration.unregister_event(event, callback)
            else:
                with contextlib.suppress(ValueError):  # already removed by someone else
                    hook.shell.events.unregister(event, callback)

    def stop(self) -> None:
        self.detach()
        self.stopped = True
