"""Holders that are not containers, walked for what they keep alive: a class's own
attributes (``Cache.store``), a function's closure cells (``fn.<closure 'buf'>``) and
defaults, a bound method's ``__self__``, ``functools.partial``'s ``func``/``args``/
``keywords``, a suspended generator's or coroutine's locals (``g.<generator gen() local
'batch'>``), what a built-in iterator holds (``it.<list>[0]``) and a NumPy object array's
items (``objarr[3]``). Everything is read through `readers` (no code of the user's
runs); code of the shell or of this package is not walked."""

from __future__ import annotations

import functools
import types

from ..frameworks import numpy as numpy_support
from .kinds import ATOMIC, opaque_module
from .naming import ATTR, CLOSURE, FRAME_LOCAL, HELD, ITEM
from .readers import (
    class_attributes,
    closure_values,
    function_defaults,
    function_module,
    iterator_holds,
    suspended_locals,
    suspended_module,
    type_module,
)

_METHOD_SELF = types.MethodType.__dict__["__self__"].__get__
_METHOD_FUNC = types.MethodType.__dict__["__func__"].__get__
_PARTIAL_FIELDS = tuple(
    (name, functools.partial.__dict__[name].__get__) for name in ("func", "args", "keywords")
)


def walk_function(walker, function, path, depth, holder, root) -> None:
    if opaque_module(function_module(function)):
        return
    for name, value in closure_values(function):
        if type(value) not in ATOMIC:
            walker.visit(value, (path, CLOSURE, name), depth, holder, root)
    defaults, keyword_defaults = function_defaults(function)
    if defaults:
        walker.visit(defaults, (path, ATTR, "__defaults__"), depth, holder, root)
    if keyword_defaults:
        walker.visit(keyword_defaults, (path, ATTR, "__kwdefaults__"), depth, holder, root)


def walk_method(walker, method, path, depth, holder, root) -> None:
    walker.visit(_METHOD_SELF(method), (path, ATTR, "__self__"), depth, holder, root)
    walker.visit(_METHOD_FUNC(method), (path, ATTR, "__func__"), depth, holder, root)


def walk_partial(walker, partial, path, depth, holder, root) -> None:
    for name, read in _PARTIAL_FIELDS:
        value = read(partial)
        if value is not None and type(value) not in ATOMIC:
            walker.visit(value, (path, ATTR, name), depth, holder, root)


def walk_suspended(walker, generator, path, depth, holder, root) -> None:
    if opaque_module(suspended_module(generator)):
        return
    kind, function, local_vars = suspended_locals(generator)
    for name, value in local_vars.items():
        if type(value) not in ATOMIC and type(name) is str:
            walker.visit(value, (path, FRAME_LOCAL, (kind, function, name)), depth, holder, root)


def walk_class(walker, cls, path, depth, holder, root) -> None:
    """A class's own attributes (``Cache.store``), for a class written in Python outside
    the shell and this package."""
    if opaque_module(type_module(cls)):
        return
    for name, value in class_attributes(cls):
        if type(value) not in ATOMIC:
            walker.visit(value, (path, ATTR, name), depth, holder, root)


def walk_iterator(walker, iterator, path, depth, holder, root) -> None:
    """What a built-in iterator or an itertools adaptor holds (``it.<list>[3]``; a
    ``cycle(loader)`` keeps every batch it yielded: ``batches.<list>[0]``)."""
    for value in iterator_holds(iterator):
        kind = type(value)
        if kind not in ATOMIC:
            walker.visit(value, (path, HELD, kind.__name__), depth, holder, root)


def walk_object_array(walker, array, path, depth, holder, root) -> None:
    """A NumPy array of Python objects: its items, by index (``objarr[3]``,
    ``grid[1, 2]``)."""
    ndarray = numpy_support.array_type()
    try:
        if not array.dtype.hasobject or not isinstance(ndarray, type):
            return
        shape = tuple(array.shape)
        items = ndarray.tolist(ndarray.ravel(array))
    except Exception:
        return
    if type(items) is not list:
        return
    from .walker import walk_sequence

    if len(shape) == 1:
        walk_sequence(walker, items, path, depth, holder, root)
        return
    for flat, item in enumerate(items):
        if type(item) in ATOMIC:
            continue
        index, rest = [], flat
        for size in reversed(shape):
            rest, position = divmod(rest, size) if size else (0, 0)
            index.append(position)
        key = ", ".join(map(str, reversed(index)))
        walker.visit(item, (path, ITEM, key), depth, holder, root)
