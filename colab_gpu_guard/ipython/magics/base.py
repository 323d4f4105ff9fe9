"""The base of the extension's magics classes, their help format, their usage line (one
source for help, errors and the reference), the usage error they raise, and their argument
parsing."""

from __future__ import annotations

import argparse
import functools
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from IPython.core.error import UsageError
from IPython.core.magic import Magics
from IPython.core.magic_arguments import MagicHelpFormatter, kwds, parse_argstring

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


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


def read_value(
    magic: Callable,
    read: Callable[[Any], T],
    given: Any,
    errors: tuple[type[Exception], ...] = (ValueError,),
) -> T:
    """`read(given)`, a value the user gave the magic; its `errors` raised again as the
    magic's usage error, outside the handler (no exception of ours chained to it)."""
    try:
        return read(given)
    except errors as error:
        failure = usage_error(error, magic)
    raise failure


def conflicts(*pairs: tuple[str, str]) -> Callable[[F], F]:
    """Above ``@magic_arguments()``: the magic's pairs of options that contradict each
    other, each as the user types it: an option of its usage line (``"--close"``, ``"-v"``)
    or a positional's value or name (``"off"``, ``"NAME"``). Given together, `parse_line`
    refuses the line before the magic changes anything: "--close and --new contradict each
    other: give one", then the usage line. Read back as the function's ``conflicts``."""

    def mark(magic: F) -> F:
        magic.conflicts = pairs  # type: ignore[attr-defined]
        return magic

    return mark


def given(magic: Callable, args: argparse.Namespace, form: str) -> bool:
    """Whether `form` (an option string, or a positional's value or metavar, as in
    `conflicts`) was given on the line `args` came from."""
    for action in magic.parser._actions:  # argparse's own list: the usage line's source
        value = getattr(args, action.dest, None)
        if form in action.option_strings:
            return value != action.default
        if action.option_strings:
            continue
        if action.choices is not None and form in action.choices:
            return value == form
        if form == action.metavar:
            return value not in (None, [], action.default)
    raise ValueError(f"{form!r} is not in {usage_line(magic)}")


def parse_line(magic: Callable, line: str) -> argparse.Namespace:
    """``parse_argstring``, whose errors ("unrecognized arguments: --bogus") also give the
    usage line; then the magic's `conflicts` refused (nothing has changed yet)."""
    args = read_value(magic, functools.partial(parse_argstring, magic), line, (UsageError,))
    for first, second in getattr(magic, "conflicts", ()):
        if given(magic, args, first) and given(magic, args, second):
            raise usage_error(
                ValueError(f"{first} and {second} contradict each other: give one"), magic
            )
    return args
