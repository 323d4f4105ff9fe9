"""The CUDA error advisor's IPython side: a custom exception handler that shows the normal
traceback unchanged and then the diagnosis (see colab_gpu_guard.advisor). Nothing here
raises into IPython: an advisor failure must never hide the user's traceback."""

from __future__ import annotations

import contextlib
import inspect
from typing import TYPE_CHECKING, Any, Callable, Optional

from IPython.display import display

if TYPE_CHECKING:
    from ..advisor import Diagnosis


def is_notebook_shell(shell: Any) -> bool:
    """A kernel shell (Jupyter, Colab, VS Code) renders HTML; a terminal shell does not."""
    return any(klass.__name__ == "ZMQInteractiveShell" for klass in type(shell).__mro__)


class ShellAdvisor:
    """Shows the diagnosis under the normal traceback of a failing cell.

    Installed with ``shell.set_custom_exc((Exception, ...), handler)``. The handler first
    shows the traceback exactly as IPython would (or lets a custom handler that was already
    installed show it), then, for a recognised CUDA error only, the diagnosis. For every
    other exception nothing else happens, and ``%debug`` works as usual; for out-of-memory
    errors the failed cell's frames are released (and the diagnosis says what that freed).
    """

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.previous: Optional[tuple[tuple, Any]] = None
        self.installed: Any = None
        self.last: Optional[Diagnosis] = None

    @property
    def enabled(self) -> bool:
        return self.installed is not None and getattr(self.shell, "CustomTB", None) is (
            self.installed
        )

    def install(self) -> None:
        if self.installed is not None:
            return
        previous_types = tuple(getattr(self.shell, "custom_exceptions", ()) or ())
        self.previous = (previous_types, getattr(self.shell, "CustomTB", None))
        handled = tuple(dict.fromkeys(previous_types + (Exception,)))
        self.shell.set_custom_exc(handled, self._handler)
        self.installed = self.shell.CustomTB

    def uninstall(self) -> None:
        """Put back the handler that was there before, exactly (the same objects)."""
        if self.installed is None:
            return
        if self.shell.CustomTB is self.installed and self.previous is not None:
            self.shell.custom_exceptions, self.shell.CustomTB = self.previous
            self.previous = None
        # If someone installed a handler over ours, leave theirs in place: ours then only
        # shows tracebacks as before (through the handler we had chained), with no advice.
        self.installed = None

    # -- the handler (IPython calls it as handler(shell, etype, value, tb, tb_offset=None))

    def _handler(self, shell: Any, etype: type, value: BaseException, tb: Any, tb_offset=None):
        self._show_standard(etype, value, tb, tb_offset)
        if self.installed is None or not isinstance(value, Exception):
            return None
        try:
            from ..advisor import advise  # on the first error, not at %load_ext

            diagnosis = advise(
                value, release_frames=True, namespace=getattr(shell, "user_ns", None)
            )
        except Exception:  # the exception hook: advice never breaks the user's traceback
            return None
        if diagnosis is None:
            return None
        self.last = diagnosis
        with contextlib.suppress(Exception):  # the exception hook: a front end refusing the display
            self._display(diagnosis)
        return None

    def _show_standard(self, etype: type, value: BaseException, tb: Any, tb_offset) -> None:
        """Show the traceback as it would be shown without us."""
        shell = self.shell
        try:
            previous_types, previous_handler = self.previous or ((), None)
            if (
                previous_types
                and previous_handler is not None
                and isinstance(value, previous_types)
            ):
                previous_handler(etype, value, tb, tb_offset=tb_offset)
                return
            if _raised_in_run_code(tb):
                _showtraceback(shell, (etype, value, tb), tb_offset)
            elif issubclass(etype, IndentationError):
                shell.showindentationerror()
            elif issubclass(
                etype, (OverflowError, SyntaxError, ValueError, TypeError, MemoryError)
            ):
                shell.showsyntaxerror()  # what run_cell does when compiling the cell fails
            else:
                _showtraceback(shell, (etype, value, tb), tb_offset)
        except Exception:  # the exception hook: IPython's own display of the user's error
            try:
                import traceback

                traceback.print_exception(etype, value, tb)
            except Exception:  # the exception hook's last net: print what we can
                pass

    def _display(self, diagnosis: Diagnosis) -> None:
        if is_notebook_shell(self.shell):
            display({"text/plain": str(diagnosis), "text/html": diagnosis._repr_html_()}, raw=True)
        else:
            print(str(diagnosis))


def _raised_in_run_code(tb: Any) -> bool:
    """Did the exception come out of the cell's code (IPython's run_code), rather than out of
    compiling the cell? run_code is the first frame of the traceback it catches."""
    if tb is None:
        return True
    return getattr(tb.tb_frame.f_code, "co_name", "") == "run_code"


def _showtraceback(shell: Any, exc_tuple: tuple, tb_offset: Any) -> None:
    kwargs: dict[str, Any] = {}
    if tb_offset is not None:
        kwargs["tb_offset"] = tb_offset
    if _accepts(shell.showtraceback, "running_compiled_code"):
        kwargs["running_compiled_code"] = True
    shell.showtraceback(exc_tuple, **kwargs)


def _accepts(function: Callable, name: str) -> bool:
    try:
        return name in inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
