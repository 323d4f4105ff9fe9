"""The process-wide places outside the notebook's names that keep a user's arrays alive,
read as a scan's roots without running user code: logging's registry (loggers with
handlers), the globals of the user's own modules (``nbutils._cache``),
``weakref.finalize``'s registry (a finalizer keeps its function and arguments until it
runs) and threading's (a running thread keeps its target and arguments until it returns).
A reset names them and never changes them. See docs/leftovers.md."""

from __future__ import annotations

import functools
import operator
import os
import sys
import sysconfig
import types
from typing import Any, NamedTuple, Optional

from ..frameworks.base import short_type_name
from .kinds import ATOMIC, opaque_module
from .readers import (
    closure_values,
    function_defaults,
    function_module,
    function_name,
    instance_dict,
    layout_of,
    own_attribute,
    type_module,
)

LOGGER = "logger"  # a root kind: a logger with handlers, kept by logging's registry
MODULE_GLOBAL = "module global"  # a root kind: a global of the user's own module
FINALIZER = "finalizer"  # a root kind: a weakref.finalize's function and arguments
THREAD = "thread"  # a root kind: a running thread (its target and arguments)
MAX_MODULE_GLOBALS = 10_000  # the user's modules' globals taken as roots, at most

_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__
_METHOD_FUNC = types.MethodType.__dict__["__func__"].__get__
_FUNCTION_GLOBALS = types.FunctionType.__dict__["__globals__"].__get__
_PARTIAL_FUNC = functools.partial.__dict__["func"].__get__
_installed: list[tuple[str, ...]] = []
_MAIN_NAMES = frozenset({"__main__", "__mp_main__"})
_IS = operator.is_
# a module's globals that hold no data of its own: modules, C functions (``from torch
# import zeros``)
_NOT_DATA = (types.ModuleType, types.BuiltinFunctionType)


class Global(NamedTuple):
    """A global of the user's own module that may hold an array: the name a user types
    for it (``nbutils._cache``; ``nb._cache`` where the notebook imported it as ``nb``)
    and its value."""

    label: str
    value: Any


def _installed_prefixes() -> tuple[str, ...]:
    if not _installed:
        paths = sysconfig.get_paths()
        found = {paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")}
        _installed.append(tuple(os.path.join(path, "") for path in found if path))
    return _installed[0]


def users_module(globals_: dict) -> bool:
    """A module of the user's own (a file beside the notebook, on Drive): not the
    standard library's, not an installed package's."""
    path = dict.get(globals_, "__file__")
    if type(path) is not str:
        return False
    if "site-packages" in path or "dist-packages" in path:
        return False
    return not path.startswith(_installed_prefixes())


def _keeps_nothing(function: types.FunctionType) -> bool:
    """A function of the module that keeps no value a scan walks (no defaults, no closure
    cell holding more than a plain value: a number, a string, None): what most of a
    module's ``def``s are. Lengths read through the C types (a tuple subclass's own
    ``__len__`` is user code)."""
    defaults, kwdefaults = function_defaults(function)
    if defaults is not None and tuple.__len__(defaults):
        return False
    if kwdefaults is not None and dict.__len__(kwdefaults):
        return False
    return all(type(value) in ATOMIC for _name, value in closure_values(function))


# sys.modules as the last scan read it (its names and entries) and the user's modules in
# it: judged again only after an import or a replaced entry (judging each of torch's 3,500
# modules took most of a scan's time where the user has a package beside the notebook).
# The entries are held until the next scan's read: a module deleted from sys.modules
# outlives it by that long.
_SEEN: list[Any] = [[], [], ()]


def _user_modules() -> tuple[tuple[str, types.ModuleType, dict], ...]:
    """(name, module, its globals) of the user's own modules (`users_module`; not the
    shell's nor this package's), in the order Python imported them; not ``__main__`` (the
    notebook's namespace, or a script's: not an imported module, also as multiprocessing's
    ``__mp_main__``). Judging them all anew takes 7 ms with 3,500 modules."""
    now = dict(sys.modules)  # one copy: its names and entries agree
    names, entries, users = _SEEN
    # the same names bound to the same objects, in the same order; compared by identity
    # (what sits in sys.modules may define its own ==)
    if (
        len(now) == len(names)
        and all(map(_IS, now, names))
        and all(map(_IS, now.values(), entries))
    ):
        return users
    main = now.get("__main__")
    found = []
    for name, module in now.items():
        if type(name) is not str or not issubclass(type(module), types.ModuleType):
            continue
        if module is main or name in _MAIN_NAMES:
            continue
        scope = _MODULE_DICT(module)
        if type(scope) is dict and not opaque_module(name) and users_module(scope):
            found.append((name, module, scope))
    _SEEN[:] = [list(now), list(now.values()), tuple(found)]
    return _SEEN[2]


def module_globals(namespace: Optional[dict]) -> list[Global]:
    """The globals of the user's own modules (`users_module`) that may hold an array, in
    the order Python imported the modules: not modules, plain values, C functions, functions
    and classes imported from elsewhere, the module's own functions that keep nothing
    (`_keeps_nothing`), ``__dunder__`` names; not ``__main__`` (the
    notebook's namespace, or a script's: not an imported module) nor the shell's or this
    package's modules. Read through the modules' dicts."""
    aliases: dict[int, str] = {}  # a module the notebook imported under a name of its own
    for name, value in list(dict.items(namespace or {})):
        if type(name) is str and issubclass(type(value), types.ModuleType):
            aliases.setdefault(id(value), name)
    found: list[Global] = []
    for name, module, scope in _user_modules():
        if scope is namespace:
            continue
        shown = aliases.get(id(module), name)
        for key, value in list(dict.items(scope)):
            if type(key) is not str or (key.startswith("__") and key.endswith("__")):
                continue
            kind = type(value)
            if kind is types.FunctionType:
                # one another module defined (``from torch import nn``'s kind), or a root
                # the walk would go no further from (`Holders.function` walks a function's
                # defaults and closure cells only): in a package beside the notebook
                # hundreds of functions per scan
                if function_module(value) != name or _keeps_nothing(value):
                    continue
            elif kind in ATOMIC or issubclass(kind, _NOT_DATA):
                continue
            elif issubclass(kind, type) and type_module(value) != name:
                continue  # a class another module defined
            found.append(Global(f"{shown}.{key}", value))
            if len(found) >= MAX_MODULE_GLOBALS:
                return found
    return found


def _function_of(function: Any) -> Any:
    """The function a finalizer calls: a bound method's and a partial's own, read through
    their C fields."""
    for _ in range(4):  # a partial of a bound method, ...
        kind = type(function)
        if kind is types.MethodType:
            function = _METHOD_FUNC(function)
        elif issubclass(kind, functools.partial):
            function = _PARTIAL_FUNC(function)
        else:
            break
    return function


def _callable_name(function: Any) -> str:
    """A finalizer's function as its code names it (no attribute of a user object read)."""
    kind = type(function)
    if kind is types.FunctionType:
        return function_name(function)
    if issubclass(kind, types.BuiltinFunctionType):
        return "builtin function"
    return short_type_name(kind)


def _installed_package(function: Any) -> bool:
    """A function of an installed package (torch's own finalizers): not the user's."""
    if type(function) is not types.FunctionType:
        return False
    scope = _FUNCTION_GLOBALS(function)  # its module's globals (a notebook's: the shell's)
    path = dict.get(scope, "__file__") if type(scope) is dict else None
    return type(path) is str and ("site-packages" in path or "dist-packages" in path)


def finalizers() -> list[tuple[str, Any]]:
    """(label, record) of each finalizer ``weakref.finalize`` keeps in its registry (a
    class attribute: every finalizer not yet run or detached) but an installed package's
    own, labelled by its function (``<weakref.finalize cleanup>``; a number after a
    repeated one); the record holds its function, args and kwargs. Read through the
    class's and the records' own slots."""
    weakref_module = sys.modules.get("weakref")
    scope = _MODULE_DICT(weakref_module) if weakref_module is not None else {}
    finalize = dict.get(scope, "finalize") if type(scope) is dict else None
    if not isinstance(finalize, type):
        return []
    registry = own_attribute(finalize, "_registry")
    if type(registry) is not dict:
        return []
    found = []
    readers: dict[type, Any] = {}  # a record's type -> its `func` slot's reader
    for record in list(dict.values(registry)):
        kind = type(record)
        reader = readers.get(kind)
        if reader is None:
            slots = dict(layout_of(kind).slots)
            reader = readers[kind] = slots.get("func")
        if reader is None:
            continue
        try:
            function = _function_of(reader.__get__(record, kind))
        except Exception:  # an unset slot (a record being made)
            continue
        if _installed_package(function):  # a library's own finalizer (torch.compile's)
            continue
        found.append((f"<weakref.finalize {_callable_name(function)}>", record))
    return list(zip(_numbered([label for label, _record in found]), (r for _l, r in found)))


def _numbered(labels: list[str]) -> list[str]:
    """`labels`, a repeated one numbered from its second: ``<x (2)>``."""
    seen: dict[str, int] = {}
    made = []
    for label in labels:
        count = seen[label] = seen.get(label, 0) + 1
        made.append(label if count == 1 else f"{label[:-1]} ({count})>")
    return made


def threads() -> list[tuple[str, Any]]:
    """(label, thread) of each thread threading keeps as started or running, but the main
    thread and the shell's or this package's own (``<thread 'Thread-3 (train)'>``): a
    thread keeps its target and arguments until its target returns. Read through
    threading's tables and each thread's own dict (its ``_name``)."""
    threading = sys.modules.get("threading")
    scope = _MODULE_DICT(threading) if threading is not None else None
    if type(scope) is not dict:
        return []
    main = dict.get(scope, "_main_thread")
    found = []
    for table in (dict.get(scope, "_limbo"), dict.get(scope, "_active")):
        if type(table) is not dict:
            continue
        for thread in list(dict.values(table)):
            kind = type(thread)
            if thread is main or opaque_module(type_module(kind)):
                continue
            attributes = instance_dict(layout_of(kind).dict_getter, thread) or {}
            name = dict.get(attributes, "_name")
            found.append((f"<thread {name!r}>" if type(name) is str else "<thread>", thread))
    return list(zip(_numbered([label for label, _thread in found]), (t for _l, t in found)))


def logging_registry() -> list[tuple[str, Any]]:
    """(name, logger) of each logger with a handler that may keep records ('' for the root
    logger): logging keeps every logger ``getLogger`` made in its registry (a module's
    global), and each keeps its handlers, whatever a handler keeps (a ``MemoryHandler``'s
    buffered records) with them. Read through the loggers' own dicts (no code of a
    ``Logger`` subclass runs)."""
    logging = sys.modules.get("logging")
    if logging is None:
        return []
    manager = own_attribute(logging.Logger, "manager")
    loggers = instance_dict(layout_of(type(manager)).dict_getter, manager) or {}
    registered = dict.get(loggers, "loggerDict")
    pairs = [("", dict.get(vars(logging), "root"))]
    if type(registered) is dict:
        pairs += [(name, logger) for name, logger in list(dict.items(registered))]
    # logging's own handlers that keep no record (a library's NullHandler, a console's
    # StreamHandler), and the shell's or a test runner's: a logger with only those holds
    # nothing of the notebook's to walk
    keep_nothing = {
        getattr(logging, name, None) for name in ("NullHandler", "StreamHandler", "FileHandler")
    }
    found = []
    getters: dict[type, Any] = {}  # a logger type's dict reader: torch alone makes 200 loggers
    for name, logger in pairs:
        logger_type = type(logger)
        if type(name) is not str or not issubclass(logger_type, logging.Logger):
            continue
        if logger_type not in getters:
            getters[logger_type] = layout_of(logger_type).dict_getter
        attributes = instance_dict(getters[logger_type], logger) or {}
        handlers = dict.get(attributes, "handlers")
        if type(handlers) is list and any(
            kind not in keep_nothing and not opaque_module(type_module(kind))
            for kind in set(map(type, handlers))
        ):
            found.append((name, logger))
    return found
