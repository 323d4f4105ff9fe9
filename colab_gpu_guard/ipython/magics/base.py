"""The base of the extension's magics classes, and the usage error they raise."""

from __future__ import annotations

from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import Magics

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration


class GuardMagics(Magics):
    """Base of the extension's magics classes: knows its shell's Registration."""

    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell)
        self.registration = registration

    def on_load(self) -> None:
        """Register event callbacks here (through self.registration)."""


def usage_error(error: Exception, valid_form: str = "") -> UsageError:
    message = str(error)
    if valid_form and valid_form not in message:
        message = f"{message}\nUsage: {valid_form}"
    return UsageError(message)
