"""Dropping the references a notebook keeps: a `DropPlan` says what dropping a set of roots
would do, without changing anything, and `apply()` does it."""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any

from .frames import (
    clear_frames,
    debugger_of,
    holds_locals,
    is_function_frame,
    is_resumable,
    running_frames,
    traceback_frames_exited,
)
from .roots import (
    DEBUGGER,
    DISPLAYHOOK,
    EXCEPTION,
    HIDDEN_UNDERSCORE,
    LAST_RESULT,
    OUT,
    OUTPUT_NAME_KIND,
    UNDERSCORE,
    VARIABLE,
    RootKey,
    users_exceptions,
)
from .shell import (
    UNDERSCORES,
    displayhook_values,
    hidden_namespace,
    hidden_underscore_label,
    is_output_name,
    managed_underscores,
    output_history,
    stale_hidden_underscores,
)


@dataclass
class Dropped:
    """What `DropPlan.apply` did beyond the plan: frames it could clear, and what the user
    should know."""

    frames_cleared: int = 0
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass
class DropPlan:
    """What dropping would let go of, by kind; built by `plan_drop` without changing
    anything. ``roots`` are the keys of every root it drops."""

    out_keys: list = field(default_factory=list)
    underscores: list[str] = field(default_factory=list)  # user_ns / user_ns_hidden _ __ ___
    hidden_underscores: list[str] = field(default_factory=list)  # copies only user_ns_hidden has
    hook_attributes: list[str] = field(default_factory=list)  # displayhook._ / __ / ___
    output_names: list[str] = field(default_factory=list)  # _N
    last_result: bool = False
    exceptions: list[BaseException] = field(default_factory=list)
    exception_sources: list[str] = field(default_factory=list)
    tracebacks: list[types.TracebackType] = field(default_factory=list)
    frames: list[tuple[types.FrameType, bool]] = field(default_factory=list)  # (frame, exited)
    interactive_tb: bool = False
    debugger: Any = None
    variables: list[str] = field(default_factory=list)
    roots: set[RootKey] = field(default_factory=set)

    def counts(self) -> dict[str, int]:
        return {
            "output history": len(self.out_keys),
            # `_`, `_N`, and the copies only user_ns_hidden or the displayhook holds
            "output names": len(self.underscores)
            + len(self.hidden_underscores)
            + len(self.output_names)
            + len(self.hook_attributes),
            "last cell result": int(self.last_result),
            "exceptions": len(self.exceptions),
            # function frames holding locals: a module frame's locals are the notebook's
            # namespace, kept; a frame cleared before (the OOM advisor's) releases nothing
            "traceback frames": sum(
                1 for frame, _ in self.frames if is_function_frame(frame) and holds_locals(frame)
            ),
            "debugger": int(self.debugger is not None),
            "user variables": len(self.variables),
        }

    def names(self) -> list[str]:
        names = [f"Out[{key}]" for key in self.out_keys]
        names += self.underscores + self.output_names
        names += [hidden_underscore_label(name) for name in self.hidden_underscores]
        names += [f"<displayhook.{name}>" for name in self.hook_attributes]
        if self.last_result:
            names.append("<last cell result>")
        names += [
            f"<exception {type(exc).__name__} from {source}>"
            for exc, source in zip(self.exceptions, self.exception_sources)
        ]
        if self.debugger is not None:
            names.append("<debugger frames>")
        names += self.variables
        return names

    def changes(self, shell: Any, namespace: dict) -> list:
        """The containers `apply` changes: the namespaces, the output history and, before
        Python 3.13, the frames' ``f_locals`` snapshots it empties."""
        changed: list = [namespace, hidden_namespace(shell)]
        if shell is not None:
            changed.append(output_history(shell))
        if sys.version_info < (3, 13):
            for frame, _exited in self.frames:
                # a frame's locals: a user's mapping where exec gave one
                with contextlib.suppress(Exception):
                    changed.append(frame.f_locals)
        return changed

    def apply(self, shell: Any, namespace: dict) -> Dropped:
        """Drop everything planned: output history, the last exception with its frames
        and chain, the debugger's frames, and the planned variables."""
        done = Dropped()
        if shell is not None:
            self._drop_output(shell, namespace, done)
        done.frames_cleared = self._drop_exceptions()
        hidden = hidden_namespace(shell)
        for name in self.variables:
            value = namespace.pop(name, None)
            if name in hidden and hidden[name] is value:
                del hidden[name]
        return done

    def _drop_output(self, shell: Any, namespace: dict, done: Dropped) -> None:
        out = output_history(shell)
        for key in self.out_keys:
            out.pop(key, None)
        hidden = hidden_namespace(shell)
        for name in self.output_names:
            value = hidden.pop(name, None)
            if name in namespace and namespace[name] is value:
                del namespace[name]
        for name in self.underscores:
            namespace[name] = ""
            if name in hidden:
                hidden[name] = ""
        _finish_reset_out(shell, namespace, done)
        for name in self.hidden_underscores:
            hidden[name] = ""  # after the user's own `_ = x`: x stays theirs
        hook = getattr(shell, "displayhook", None)
        for name in self.hook_attributes:
            with contextlib.suppress(Exception):  # the display hook: maybe a user's
                setattr(hook, name, "")
        result = getattr(shell, "last_execution_result", None)
        if result is not None:
            if self.last_result:
                result.result = None
            for attribute in ("error_in_exec", "error_before_exec"):
                if getattr(result, attribute, None) is not None:
                    setattr(result, attribute, None)
        if self.interactive_tb:
            shell.InteractiveTB.tb = None
        if self.debugger is not None and not _reset_debugger(self.debugger):
            done.warnings.append("the debugger is running: its frames were left alone")

    def _drop_exceptions(self) -> int:
        cleared = len(clear_frames(self.frames))  # function frames cleared (module ones too)
        for tb in self.tracebacks:
            chain = []
            while tb is not None:
                chain.append(tb)
                tb = tb.tb_next
            for link in chain:
                with contextlib.suppress(AttributeError, TypeError, ValueError):
                    link.tb_next = None
        for exception in self.exceptions:
            exception.__traceback__ = None
            exception.__context__ = None
            exception.__cause__ = None
        for attribute in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, attribute):
                with contextlib.suppress(AttributeError):
                    delattr(sys, attribute)
        return cleared


def plan_drop(
    shell: Any, namespace: dict, holding: Collection[RootKey], variables: list[str]
) -> DropPlan:
    """What dropping would do: the output history entries among `holding` (the roots that
    reach arrays; plain outputs stay), the last exception and its frames, the debugger's
    frames, and `variables`. Nothing is changed."""
    plan = DropPlan()
    if shell is not None:
        _plan_output(plan, shell, namespace, holding)
    # a usage error our own magic raised is not the user's: not listed or counted (the
    # references to it go with sys.last_* and the cell's result all the same)
    exceptions, tracebacks, sources = users_exceptions(shell)
    handling = sys.exc_info()[1]
    for exception, source in zip(exceptions, sources):
        if exception is not handling:
            plan.exceptions.append(exception)
            plan.exception_sources.append(source)
    if handling is not None:  # called from an except block: leave that one alone
        tracebacks = [tb for tb in tracebacks if tb is not handling.__traceback__]
    plan.tracebacks = tracebacks
    plan.frames = [
        (frame, exited)
        for frame, exited in traceback_frames_exited(tracebacks)
        if exited or not is_resumable(frame)
    ]
    if plan.exceptions or plan.tracebacks:
        plan.roots.add(RootKey(EXCEPTION))
    plan.variables = list(variables)
    plan.roots.update(RootKey(VARIABLE, name) for name in plan.variables)
    return plan


def _plan_output(plan: DropPlan, shell: Any, namespace: dict, holding: Collection) -> None:
    _take(plan, holding, OUT, list(output_history(shell)), plan.out_keys)
    _take(plan, holding, UNDERSCORE, managed_underscores(shell), plan.underscores)
    hook_values = displayhook_values(shell)
    for name in UNDERSCORES:
        value = hook_values.get(name)
        if value is None:
            continue
        # the hook's copy of an underscore being dropped goes too (the scan saw it once)
        if RootKey(DISPLAYHOOK, name) in holding or (
            name in plan.underscores and namespace.get(name) is value
        ):
            plan.hook_attributes.append(name)
            plan.roots.add(RootKey(DISPLAYHOOK, name))
    hidden = stale_hidden_underscores(shell)
    _take(plan, holding, HIDDEN_UNDERSCORE, hidden, plan.hidden_underscores)
    names = [name for name in list(hidden_namespace(shell)) if isinstance(name, str)]
    _take(plan, holding, OUTPUT_NAME_KIND, filter(is_output_name, names), plan.output_names)
    if RootKey(LAST_RESULT) in holding:
        plan.last_result = True
        plan.roots.add(RootKey(LAST_RESULT))
    tb = getattr(getattr(shell, "InteractiveTB", None), "tb", None)
    plan.interactive_tb = isinstance(tb, types.TracebackType)
    debugger = debugger_of(shell)
    if debugger is not None and _debugger_holds_state(debugger):
        plan.debugger = debugger
        plan.roots.add(RootKey(DEBUGGER))


def _take(plan: DropPlan, holding: Collection, kind: str, keys: Iterable, into: list) -> None:
    """Plan to drop each of `keys` (roots of `kind`) that holds arrays: list it in `into`."""
    for key in keys:
        root = RootKey(kind, key)
        if root in holding:
            into.append(key)
            plan.roots.add(root)


def _finish_reset_out(shell: Any, namespace: dict, done: Dropped) -> None:
    """Complete an earlier ``%reset -f out``: it blanked ``_``/``__``/``___`` in user_ns
    only, and IPython 9 takes the stale hidden copies for user assignments and stops
    updating ``_``. Blank names get the same blank in user_ns_hidden."""
    hidden = hidden_namespace(shell)
    stale = stale_hidden_underscores(shell)
    blank = [name for name in stale if type(namespace.get(name)) is str and not namespace[name]]
    for name in blank:
        hidden[name] = namespace[name]
    if blank and not stale_hidden_underscores(shell):
        done.notes.append(
            "_, __, ___ are back in step with IPython's hidden copies: %reset -f out had "
            "left them apart, and IPython 9 then stops updating _"
        )


def _debugger_holds_state(debugger: Any) -> bool:
    for name, value in vars(debugger).items():
        if isinstance(value, (types.FrameType, types.TracebackType, BaseException)):
            return True
        if name in ("curframe_locals", "stack") and value:
            return True
    return False


def _reset_debugger(debugger: Any) -> bool:
    """Forget the post-mortem debugger's frames and locals (not while it is running)."""
    current = getattr(debugger, "curframe", None)
    if isinstance(current, types.FrameType) and id(current) in running_frames():
        return False
    for name, value in list(vars(debugger).items()):
        if isinstance(value, (types.FrameType, types.TracebackType, BaseException)):
            setattr(debugger, name, None)
        elif name == "curframe_locals":
            setattr(debugger, name, {})
        elif name == "stack" and isinstance(value, list):
            setattr(debugger, name, [])
        elif name == "_chained_exceptions":
            setattr(debugger, name, ())
        elif isinstance(value, dict) and any(
            isinstance(key, types.FrameType) for key in list(value)
        ):
            value.clear()
    return True
