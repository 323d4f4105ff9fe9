"""The base of the extension's magics classes, their help format, their usage line (one
source for help, errors and the reference), the usage error they raise, and their argument
parsing."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable

from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.core.magic_arguments import MagicHelpFormatter, kwds, parse_argstring

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration


class HelpFormatter(MagicHelpFormatter):
    """IPython's magic help, laid out the same whatever the terminal's width when the
    extension was imported (argparse reads it then): nothing is wrapped, so the usage line
    is one line, the same in `%magic?`, in error messages and in docs/reference.md. Option
    help is kept to one short line each instead."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=28, width=1000)

    def _set_color(self, color: bool, **kwargs: object) -> None:
        """Python 3.14's argparse colours help written to a terminal: the help is made once
        at import, and shown in pagers, notebooks and error messages, so never."""
        if hasattr(super(), "_set_color"):
            super()._set_color(False, **kwargs)


def help_format() -> kwds:
    """The decorator under @magic_arguments() of every magic here: its help format. (A new
    one each time: IPython stores the description in the decorator's dict.)"""
    return kwds(formatter_class=HelpFormatter)


def usage_line(magic: Callable) -> str:
    """The magic's usage line as argparse makes it from its @argument decorators, e.g.
    ``%gpu_panel [--new] [--close] [--live SECONDS]``: the line `%magic?` shows."""
    # MagicHelpFormatter writes the usage as an RST literal block: "::\n\n  %name ...".
    return magic.parser.format_usage().strip().removeprefix("::").strip()


class GuardMagics(Magics):
    """Base of the extension's magics classes: knows its shell's Registration."""

    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell)
        self.registration = registration

    def on_load(self) -> None:
        """Register event callbacks here (through self.registration)."""


def usage_error(error: Exception, magic: Callable) -> UsageError:
    """A UsageError: the message, then ``Usage: `` and the magic's usage line."""
    return UsageError(f"{error}\nUsage: {usage_line(magic)}")


def parse_line(magic: Callable, line: str) -> argparse.Namespace:
    """``parse_argstring``, whose errors ("unrecognized arguments: --bogus") also give the
    usage line."""
    failure = None
    try:
        return parse_argstring(magic, line)
    except UsageError as error:
        failure = usage_error(error, magic)
    raise failure  # outside the handler: no internal exception chained to it
