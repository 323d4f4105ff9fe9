"""The base of the extension's magics classes, the usage error they raise, and their
argument parsing."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.core.magic_arguments import parse_argstring

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


def parse_line(magic: Callable, line: str, valid_form: str) -> argparse.Namespace:
    """``parse_argstring``, whose errors ("unrecognized arguments: --bogus") also give the
    valid form."""
    failure = None
    try:
        return parse_argstring(magic, line)
    except UsageError as error:
        failure = usage_error(error, valid_form)
    raise failure  # outside the handler: no internal exception chained to it
