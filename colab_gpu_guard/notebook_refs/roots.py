"""Every reference a notebook keeps, as typed roots a scan starts from."""

from __future__ import annotations

import sys
import types
from collections.abc import Hashable, Iterator
from typing import Any, NamedTuple

from ..units import DYNAMO_GLOBALS, OTHER, OUTPUT_HISTORY, TRACEBACK_FRAME, USER_VARIABLE
from .frames import (
    debugger_frames,
    debugger_of,
    frame_calls,
    held_exceptions,
    installed_package,
    is_function_frame,
    traceback_frames,
)
from .shell import (
    OUTPUT_NAME,
    displayhook_values,
    hidden_namespace,
    hidden_underscore_label,
    last_result,
    managed_underscores,
    output_history,
    stale_hidden_underscores,
)

# Root kinds: what holds a reference a scan starts from.
VARIABLE = "variable"  # a user variable (user_ns, not IPython's own name)
OUT = "out"  # Out[N] / _oh[N]
UNDERSCORE = "underscore"  # _ / __ / ___ in user_ns, as IPython set them
DISPLAYHOOK = "displayhook"  # displayhook._ / __ / ___
HIDDEN_UNDERSCORE = "hidden underscore"  # a stale copy only user_ns_hidden keeps
OUTPUT_NAME_KIND = "output name"  # _N in user_ns_hidden
LAST_RESULT = "last result"  # last_execution_result.result
EXCEPTION = "exception"  # the last exception, its chain and its traceback frames
DEBUGGER = "debugger"  # the post-mortem debugger's frames and locals

_ATOMIC = (int, float, complex, bool, str, bytes, type(None))


class RootKey(NamedTuple):
    """Which reference a root is: its kind, and its key within the kind (a name, an
    ``Out`` number; None where the kind is one root)."""

    kind: str
    key: Hashable = None


class Root(NamedTuple):
    """One reference a scan starts from: which it is, how a user names it, who holds it
    (a `units` holder label), the object it references, and how deep below the holder that
    object already is (an exception's ``args`` and attributes are one level down), and the
    name its arrays are listed under where that is not its label ("": the label)."""

    key: RootKey
    label: str
    holder: str
    value: Any
    depth: int = 0
    group: str = ""


def roots(shell: Any, namespace: dict) -> Iterator[Root]:
    """Every reference a notebook keeps, in the order a scan visits them: user variables
    (not dunders, not IPython's own names), the output history, the last exception (the
    exceptions themselves, for their ``args`` and attributes, then their traceback frames'
    locals) and the post-mortem debugger's frames and locals."""
    hidden = hidden_namespace(shell)
    managed = managed_underscores(shell) if shell is not None else {}
    for name, value in list(namespace.items()):
        if type(value) in _ATOMIC or not isinstance(name, str):
            continue
        if name.startswith("__") and (name.endswith("__") or name.startswith(DYNAMO_GLOBALS)):
            continue  # dunders; what torch.compile installed (its graphs are roots of their own)
        if shell is not None and ((name in hidden and hidden[name] is value) or name in managed):
            continue
        yield Root(RootKey(VARIABLE, name), name, USER_VARIABLE, value)
    if shell is not None:
        yield from _output_roots(shell, namespace, hidden, managed)
    yield from _exception_and_debugger_roots(shell)


def _output_roots(shell: Any, namespace: dict, hidden: dict, managed: dict) -> Iterator[Root]:
    for number, value in list(output_history(shell).items()):
        yield Root(RootKey(OUT, number), f"Out[{number}]", OUTPUT_HISTORY, value)
    for name, value in managed.items():
        yield Root(RootKey(UNDERSCORE, name), name, OUTPUT_HISTORY, value)
    for name, value in displayhook_values(shell).items():
        if namespace.get(name) is not value:
            label = f"<displayhook.{name}>"
            yield Root(RootKey(DISPLAYHOOK, name), label, OUTPUT_HISTORY, value)
    for name, value in stale_hidden_underscores(shell).items():
        label = hidden_underscore_label(name)
        yield Root(RootKey(HIDDEN_UNDERSCORE, name), label, OUTPUT_HISTORY, value)
    # _N: IPython pushes them into user_ns and user_ns_hidden alike; one the user
    # reassigned in user_ns is a user variable instead. (user_ns_hidden also holds _i,
    # _iN for every cell run: picked out in C)
    for name in filter(OUTPUT_NAME, [name for name in hidden if type(name) is str]):
        if name in hidden:
            yield Root(RootKey(OUTPUT_NAME_KIND, name), name, OUTPUT_HISTORY, hidden[name])
    value = last_result(shell)
    if value is not None:
        yield Root(RootKey(LAST_RESULT), "<last cell result>", OUTPUT_HISTORY, value)


def bookkeeping_frame(frame: types.FrameType) -> bool:
    """A frame of this package's own code, of IPython's (``run_code()``, which ran the
    cell) or of the `decorator` wrapper IPython 7 puts around magics: their locals are
    bookkeeping (IPython's holds the exception the last exception's
    roots already reach), never shown."""
    module = frame.f_globals.get("__name__")
    if type(module) is str and module.partition(".")[0] in _BOOKKEEPING:
        return True
    # IPython 7's magics are wrapped by the `decorator` package: its `fun()` (in a file
    # named "<decorator-gen-N>" by older versions of it)
    return frame.f_code.co_filename.startswith("<decorator-gen-")


_PACKAGE = __name__.partition(".")[0]
_BOOKKEEPING = (_PACKAGE, "IPython", "decorator")
_OUR_MAGICS = f"{_PACKAGE}.ipython."


def raised_by_our_magic(exception: BaseException) -> bool:
    """IPython's ``UsageError`` raised by one of this package's magics (a bad magic line):
    not the user's error, so never listed, counted or shown as one. Known by its type
    (IPython is imported wherever one was raised) and the frame that raised it."""
    error_module = sys.modules.get("IPython.core.error")
    usage_error = getattr(error_module, "UsageError", None)
    if not isinstance(usage_error, type) or not issubclass(type(exception), usage_error):
        return False
    tb = exception.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    module = tb.tb_frame.f_globals.get("__name__")
    return type(module) is str and module.startswith(_OUR_MAGICS)


def users_exceptions(
    shell: Any,
) -> tuple[list[BaseException], list[types.TracebackType], list[str]]:
    """`held_exceptions`, less the usage errors our own magics raised and their
    tracebacks (`raised_by_our_magic`): the exceptions the user's code left."""
    exceptions, tracebacks, sources = held_exceptions(shell)
    own = [exception for exception in exceptions if raised_by_our_magic(exception)]
    if not own:
        return exceptions, tracebacks, sources
    own_ids = {id(exception) for exception in own}
    own_tracebacks = {id(exception.__traceback__) for exception in own}
    kept = [
        (exception, source)
        for exception, source in zip(exceptions, sources)
        if id(exception) not in own_ids
    ]
    return (
        [exception for exception, _source in kept],
        [tb for tb in tracebacks if id(tb) not in own_tracebacks],
        [source for _exception, source in kept],
    )


def _frames_roots(frames: list[types.FrameType], where: str, key: RootKey) -> Iterator[Root]:
    """The locals of each function frame, labelled by its call; an installed package's
    frames (torch's own, inside a model's forward) are listed together, as
    ``<traceback: inside torch>``: their locals are the package's, not names the user
    wrote, and a failed forward leaves a dozen of them."""
    frames = [f for f in frames if is_function_frame(f) and not bookkeeping_frame(f)]
    for frame, call in zip(frames, frame_calls(frames)):
        try:
            local_vars = dict(frame.f_locals)
        except Exception:  # a frame's locals: a user's mapping where exec gave one
            continue
        package = installed_package(frame)
        group = f"<{where}: inside {package}>" if package else ""
        for var, value in local_vars.items():
            if type(value) not in _ATOMIC:
                label = f"<{where}: {call} local {var!r}>"
                yield Root(key, label, TRACEBACK_FRAME, value, 0, group)


def _exception_and_debugger_roots(shell: Any) -> Iterator[Root]:
    exceptions, tracebacks, _sources = users_exceptions(shell)
    key = RootKey(EXCEPTION)
    for exception in exceptions:
        label = f"<exception {type(exception).__name__}>"
        yield Root(key, f"{label}.args", OTHER, exception.args, 1, label)
        attributes = getattr(exception, "__dict__", None)
        if isinstance(attributes, dict):
            for name, value in list(attributes.items()):
                if type(value) not in _ATOMIC and type(name) is str:
                    yield Root(key, f"{label}.{name}", OTHER, value, 1, label)
    yield from _frames_roots(traceback_frames(tracebacks), "traceback", key)
    debugger = debugger_of(shell)
    if debugger is None:
        return
    key = RootKey(DEBUGGER)
    yield from _frames_roots(list(debugger_frames(debugger)), "debugger", key)
    saved = getattr(debugger, "curframe_locals", None)
    if isinstance(saved, dict) and saved is not getattr(shell, "user_ns", None):
        for var, value in list(saved.items()):
            yield Root(key, f"<debugger: local {var!r}>", TRACEBACK_FRAME, value)
