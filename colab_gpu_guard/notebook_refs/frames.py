"""The last exception a notebook keeps, the exceptions chained to it, their traceback
frames and the post-mortem debugger's: finding them, and clearing a finished frame."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import types
from collections.abc import Iterator
from typing import Any, NamedTuple, Optional

_CO_OPTIMIZED = 0x0001  # inspect.CO_OPTIMIZED: a function frame with fast locals
_GENERATOR_FLAGS = (
    0x20 | 0x80 | 0x100 | 0x200
)  # CO_GENERATOR/COROUTINE/ITERABLE_COROUTINE/ASYNC_GEN


class ChainLink(NamedTuple):
    """One exception of a chain: how it was reached ("raised" for the first, "cause" along
    explicit ``raise ... from`` links and exception groups only, "context" once an implicit
    ``__context__`` link was taken) and the attribute path from the first."""

    exception: BaseException
    via: str
    path: str


def exception_chain(
    exc: BaseException, limit: Optional[int] = 16, seen: Optional[set[int]] = None
) -> Iterator[ChainLink]:
    """`exc` and every exception chained to it (``__cause__``, ``__context__``, an
    exception group's ``exceptions``), each once, depth first with explicit causes before
    implicit contexts: the order in which a cause is most likely the real one. `seen` (ids)
    is shared with the caller to walk several chains once; `limit` bounds the walk."""
    seen = set() if seen is None else seen
    stack: list[tuple[Any, str, str]] = [(exc, "raised", "")]
    count = 0
    while stack and (limit is None or count < limit):
        current, via, path = stack.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        count += 1
        yield ChainLink(current, via, path)
        linked = "context" if via == "context" else "cause"
        context = getattr(current, "__context__", None)
        cause = getattr(current, "__cause__", None)
        inner = getattr(current, "exceptions", None)
        if context is not None and context is not cause:
            stack.append((context, "context", f"{path}.__context__"))
        if isinstance(inner, tuple):
            for index in reversed(range(len(inner))):
                stack.append((inner[index], linked, f"{path}.exceptions[{index}]"))
        if cause is not None:
            stack.append((cause, linked, f"{path}.__cause__"))


def _exception_sources(shell: Any) -> list[tuple[Any, str]]:
    sources: list[tuple[Any, str]] = []
    for attribute in ("last_value", "last_exc"):
        value = getattr(sys, attribute, None)
        if isinstance(value, BaseException):
            sources.append((value, f"sys.{attribute}"))
    last_tb = getattr(sys, "last_traceback", None)
    if isinstance(last_tb, types.TracebackType):
        sources.append((last_tb, "sys.last_traceback"))
    if shell is not None:
        result = getattr(shell, "last_execution_result", None)
        for attribute in ("error_in_exec", "error_before_exec"):
            value = getattr(result, attribute, None)
            if isinstance(value, BaseException):
                sources.append((value, f"last_execution_result.{attribute}"))
        tb = getattr(getattr(shell, "InteractiveTB", None), "tb", None)
        if isinstance(tb, types.TracebackType):
            sources.append((tb, "InteractiveTB.tb"))
    return sources


def held_exceptions(shell: Any) -> tuple[list[BaseException], list[types.TracebackType], list[str]]:
    """Exceptions and tracebacks the process keeps after a failed cell, with the exceptions
    chained to them.

    Sources: ``sys.last_value`` / ``sys.last_exc`` (3.12+) / ``sys.last_traceback``, the
    shell's ``last_execution_result.error_in_exec`` / ``error_before_exec``, and
    ``shell.InteractiveTB.tb``. Returns (exceptions, tracebacks, where each was found).
    """
    exceptions: list[BaseException] = []
    tracebacks: list[types.TracebackType] = []
    sources: list[str] = []
    seen: set[int] = set()
    for item, source in _exception_sources(shell):
        if isinstance(item, types.TracebackType):
            if id(item) not in seen:
                seen.add(id(item))
                tracebacks.append(item)
            continue
        for link in exception_chain(item, limit=None, seen=seen):
            exceptions.append(link.exception)
            sources.append(source + link.path)
            tb = link.exception.__traceback__
            if tb is not None and id(tb) not in seen:
                seen.add(id(tb))
                tracebacks.append(tb)
    return exceptions, tracebacks, sources


def traceback_frames(tracebacks) -> list[types.FrameType]:
    """Every frame on the given traceback chains, once each."""
    return [frame for frame, _exited in traceback_frames_exited(tracebacks)]


def traceback_frames_exited(tracebacks) -> list[tuple[types.FrameType, bool]]:
    """(frame, exited) for every frame on the chains, once each. ``exited``: the exception
    unwound out of the frame (any entry after a chain's first, which is the frame that
    caught it), so the frame has finished - for a generator, the generator is done."""
    found: dict[int, list] = {}
    for tb in tracebacks:
        position = 0
        while tb is not None:
            frame = tb.tb_frame
            entry = found.get(id(frame))
            if entry is None:
                found[id(frame)] = [frame, position > 0]
            elif position > 0:
                entry[1] = True
            tb = tb.tb_next
            position += 1
    return [(frame, exited) for frame, exited in found.values()]


def is_function_frame(frame: types.FrameType) -> bool:
    """A function frame (fast locals); module and class frames' locals are namespaces."""
    return bool(frame.f_code.co_flags & _CO_OPTIMIZED)


def holds_locals(frame: types.FrameType) -> bool:
    """Whether a finished function frame still has a local variable bound: False once
    cleared (by the OOM advisor, or an earlier reset), so clearing it again releases
    nothing and is not counted."""
    try:
        return len(frame.f_locals) > 0
    except Exception:  # a frame's locals: a user's mapping where exec gave one
        return True


def frame_function(frame: types.FrameType) -> str:
    code = frame.f_code
    return getattr(code, "co_qualname", None) or code.co_name


def frame_calls(frames: list[types.FrameType]) -> list[str]:
    """Each frame's call as labels name it: ``train()``, and a function met again
    numbered in order (``Module._call_impl() #2``): through nested modules one function is
    on a traceback several times, each call with its own locals."""
    seen: dict[str, int] = {}
    calls = []
    for frame in frames:
        function = frame_function(frame)
        count = seen[function] = seen.get(function, 0) + 1
        calls.append(f"{function}()" if count == 1 else f"{function}() #{count}")
    return calls


def installed_package(frame: types.FrameType) -> Optional[str]:
    """The installed package (``torch``) or standard library module a frame's code is
    from, by its file's place (``site-packages``, the interpreter's library); None for the
    notebook's cells and the user's own files."""
    filename = frame.f_code.co_filename
    installed = "site-packages" in filename or "dist-packages" in filename
    if not installed and not filename.startswith(_library_prefixes()):
        return None
    module = frame.f_globals.get("__name__")
    return module.partition(".")[0] if type(module) is str and module else None


_LIBRARY: list[tuple[str, ...]] = []


def _library_prefixes() -> tuple[str, ...]:
    if not _LIBRARY:
        import sysconfig

        paths = sysconfig.get_paths()
        found = {paths.get(key) for key in ("stdlib", "platstdlib")}
        _LIBRARY.append(tuple(os.path.join(path, "") for path in found if path))
    return _LIBRARY[0]


def is_resumable(frame: types.FrameType) -> bool:
    """A generator's or coroutine's frame: ``frame.clear()`` would close it if suspended."""
    return bool(frame.f_code.co_flags & _GENERATOR_FLAGS)


def clear_frame(frame: types.FrameType, exited: bool = False) -> bool:
    """Release a finished frame's locals; False if it is executing, or a generator's frame
    not known to be finished (``frame.clear()`` would close a suspended generator).

    On Python < 3.13 the ``f_locals`` snapshot of a function frame (made by anything that
    read ``frame.f_locals`` before, such as a verbose traceback) survives ``frame.clear()``
    and keeps the values alive (CPython gh-113939, fixed in 3.13): it is emptied too.
    Module-level frames keep their namespace (a notebook's variables live there)."""
    if is_resumable(frame) and not exited:
        return False
    try:
        frame.clear()
    except RuntimeError:  # still executing
        return False
    if sys.version_info < (3, 13) and is_function_frame(frame):
        # a frame's locals: a user's mapping where exec gave one
        with contextlib.suppress(Exception):
            snapshot = frame.f_locals
            if isinstance(snapshot, dict) and snapshot is not frame.f_globals:
                snapshot.clear()
    return True


def running_frames() -> set[int]:
    running = set()
    frame: Optional[types.FrameType] = sys._getframe()
    while frame is not None:
        running.add(id(frame))
        frame = frame.f_back
    return running


def executing_frames() -> set[int]:
    """ids of the frames executing now, in every thread: never read or cleared."""
    executing = set()
    for top in list(sys._current_frames().values()):
        frame: Optional[types.FrameType] = top
        while frame is not None:
            executing.add(id(frame))
            frame = frame.f_back
    return executing


def frame_locals(frame: types.FrameType) -> dict:
    """A copy of a finished frame's local variables, read without keeping them alive
    longer: on Python < 3.13 reading ``frame.f_locals`` stores a snapshot dict on the frame
    that outlives ``frame.clear()`` (gh-113939), so a snapshot this read created is emptied
    again (one that was there before, such as a debugger's ``curframe_locals``, is left)."""
    if sys.version_info >= (3, 13):
        try:
            return dict(frame.f_locals)
        except Exception:  # a frame's locals: a user's mapping where exec gave one
            return {}
    before = gc.get_referents(frame)
    try:
        snapshot = frame.f_locals
    except Exception:  # a frame's locals: a user's mapping where exec gave one
        return {}
    if not isinstance(snapshot, dict):
        return {}
    found = dict.copy(snapshot)
    if is_function_frame(frame) and _made_by_this_read(frame, snapshot, before):
        dict.clear(snapshot)
    return found


def running_locals(frame: types.FrameType) -> dict:
    """A copy of the local variables of a function frame still executing (in any thread),
    read without keeping them alive longer: on Python < 3.13 reading ``frame.f_locals``
    stores a snapshot dict on the frame until it returns, so a snapshot no one else holds
    (this read made it, or only the frame keeps it) is emptied again; the next read or
    trace call refreshes it from the frame's own variables."""
    if not is_function_frame(frame):
        return {}
    try:
        snapshot = frame.f_locals
    except Exception:  # a frame's locals: a user's mapping where exec gave one
        return {}
    if not isinstance(snapshot, dict):  # 3.13+: a proxy over the frame's own variables
        try:
            return dict(snapshot)
        except Exception:  # a frame's locals proxy
            return {}
    found = dict.copy(snapshot)
    if sys.getrefcount(snapshot) <= 3:  # the frame, `snapshot`, getrefcount's argument
        dict.clear(snapshot)
    return found


def _made_by_this_read(frame: types.FrameType, snapshot: dict, before: list) -> bool:
    """The frame owns its locals (its code among what it holds: not a suspended
    generator's, whose generator holds them) and held no snapshot before the read."""
    code = frame.f_code
    return any(item is code for item in before) and not any(item is snapshot for item in before)


def finished_frames(exc_or_tb: Any) -> list[tuple[types.FrameType, bool]]:
    """(frame, exited) for each frame `release_traceback_frames` would clear: every frame
    on the traceback (and on the tracebacks of its chained exceptions) but those still
    executing (the caller's own stack) and suspended generators'."""
    tracebacks = []
    if isinstance(exc_or_tb, BaseException):
        for link in exception_chain(exc_or_tb):
            if link.exception.__traceback__ is not None:
                tracebacks.append(link.exception.__traceback__)
    elif isinstance(exc_or_tb, types.TracebackType):
        tracebacks.append(exc_or_tb)
    running = running_frames()
    return [
        (frame, exited)
        for frame, exited in traceback_frames_exited(tracebacks)
        if id(frame) not in running and (exited or not is_resumable(frame))
    ]


def clear_frames(frames: list[tuple[types.FrameType, bool]]) -> list[str]:
    """Clear each (frame, exited) (`clear_frame`); returns the function name of each
    function frame cleared that still held locals, in order. Module and class frames are
    cleared too but not listed: their locals are a namespace they keep, so clearing them
    frees nothing; nor is a frame cleared before."""
    functions = []
    for frame, exited in frames:
        holding = is_function_frame(frame) and holds_locals(frame)
        if clear_frame(frame, exited) and holding:
            functions.append(frame_function(frame))
    return functions


def release_traceback_frames(exc_or_tb: Any) -> int:
    """Clear the local variables of every finished frame in a traceback (and in the
    tracebacks of its chained exceptions), so objects only the failed call still referenced
    - tensors above all - are freed. Returns the number of function frames cleared (module
    frames keep their namespace: not counted). Frames still executing (the caller's own
    stack) and suspended generators are skipped."""
    return len(clear_frames(finished_frames(exc_or_tb)))


def debugger_of(shell: Any) -> Any:
    """The post-mortem debugger instance IPython keeps for ``%debug`` / ``%pdb``."""
    interactive_tb = getattr(shell, "InteractiveTB", None) if shell is not None else None
    return getattr(interactive_tb, "pdb", None)


def debugger_frames(debugger: Any) -> list[types.FrameType]:
    frames = [getattr(debugger, "curframe", None), getattr(debugger, "botframe", None)]
    frames += [entry[0] for entry in getattr(debugger, "stack", None) or ()]
    seen: set[int] = set()
    found = []
    for frame in frames:
        if isinstance(frame, types.FrameType) and id(frame) not in seen:
            seen.add(id(frame))
            found.append(frame)
    return found
