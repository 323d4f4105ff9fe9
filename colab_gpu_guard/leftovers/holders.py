"""Holders that are not containers, walked for what they keep alive: a class's own
attributes (``Cache.store``), a function's closure cells (``fn.<closure 'buf'>``) and
defaults, a bound method's ``__self__``, ``functools.partial``'s ``func``/``args``/
``keywords``, a suspended generator's or coroutine's locals (``g.<generator gen() local
'batch'>``), what a built-in iterator holds (``it.<list>[0]``), a NumPy object array's
items (``objarr[3]``), an exception's ``args``, chained exceptions and traceback frames'
locals (``err.<traceback: train() local 'batch'>``), an ``nn.Module``'s hooks
(``model.<forward hook 0>``), a ``functools.lru_cache``'s results
(``embed.<lru_cache>[0]``) and a tensor's own attributes (``a.extra``). Everything is
read through `readers` (no code of the user's runs); code of the shell or of this package
is not walked, nor a frame still executing."""

from __future__ import annotations

import functools
import gc
import itertools
import types
from itertools import repeat
from operator import is_, itemgetter

from ..frameworks import numpy as numpy_support
from ..notebook_refs.frames import (
    frame_function,
    frame_locals,
    is_function_frame,
    traceback_frames_exited,
)
from .kinds import ATOMIC, opaque_module
from .naming import ATTR, CLOSURE, FRAME_LOCAL, HELD, ITEM
from .readers import (
    class_attributes,
    closure_values,
    exception_fields,
    frame_module,
    function_defaults,
    function_module,
    iterator_holds,
    lru_cache_entries,
    suspended_locals,
    suspended_module,
    tensor_attributes,
    type_module,
)

TENSOR_CHUNK = 2048  # tensors checked for attributes of their own in one C call
MAX_OPAQUE = 64  # torch ScriptObjects a scan keeps the paths of
_ROW_FRAMEWORK = itemgetter(4)

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


def walk_exception(walker, exception, path, depth, holder, root) -> None:
    """An exception's ``args`` (``err.args[1]``), its traceback frames' locals (named
    under the exception itself), the exceptions chained to it (``err.__context__``) and an
    exception group's ``exceptions``; its ``__dict__`` (``__notes__``) is walked as an
    object's. Read through BaseException's own descriptors (a subclass's properties never
    run)."""
    args, traceback, cause, context, group = exception_fields(exception)
    if group:  # before args, which hold the same exceptions: named as a user types them
        walker.visit(group, (path, ATTR, "exceptions"), depth, holder, root)
    if args:
        walker.visit(args, (path, ATTR, "args"), depth, holder, root)
    if traceback is not None:
        walk_traceback(walker, traceback, path, depth, holder, root)
    if cause is not None:
        walker.visit(cause, (path, ATTR, "__cause__"), depth, holder, root)
    if context is not None and context is not cause:
        walker.visit(context, (path, ATTR, "__context__"), depth, holder, root)


def walk_traceback(walker, traceback, path, depth, holder, root) -> None:
    """The locals of the finished function frames on a traceback
    (``tb.<traceback: f() local 'x'>``); frames still executing, module and class frames
    (their locals are a namespace) and frames of the shell or of this package are not
    read. A frame is read once per root."""
    executing = walker.executing_frames()
    for frame, _exited in traceback_frames_exited([traceback]):
        if id(frame) in executing or not walker.enter_frame(frame, root):
            continue
        if not is_function_frame(frame) or opaque_module(frame_module(frame)):
            continue
        function = frame_function(frame)
        for name, value in frame_locals(frame).items():
            if type(value) not in ATOMIC and type(name) is str:
                child = (path, FRAME_LOCAL, ("traceback:", function, name))
                walker.visit(value, child, depth, holder, root)


def walk_hooks(walker, hooks: dict, label: str, path, depth, holder, root) -> None:
    """The hooks a module keeps in one of its ``_*hooks`` dicts, by position
    (``model.<forward hook 0>``): functions, partials, bound methods, callable objects."""
    for index, hook in enumerate(list(dict.values(hooks))):
        if type(hook) not in ATOMIC:
            walker.visit(hook, (path, HELD, f"{label} {index}"), depth, holder, root)


def walk_lru_cache(walker, wrapper, path, depth, holder, root) -> None:
    """A ``functools.lru_cache``/``cache`` wrapper's cached results
    (``embed.<lru_cache>[0]``) and the keys holding objects (``embed.<lru_cache key>[0]``),
    for a function outside the shell and this package."""
    module, results, keys = lru_cache_entries(wrapper)
    if opaque_module(module):
        return
    from .walker import walk_sequence

    if results:
        walk_sequence(walker, results, (path, HELD, "lru_cache"), depth, holder, root)
    if keys:
        walk_sequence(walker, keys, (path, HELD, "lru_cache key"), depth, holder, root)


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


def walk_tensor_attributes(walker, start: int) -> None:
    """The attributes set on the tensors recorded since ``start`` (``a.extra``, a
    subclass's ``s.payload``, a wrapper subclass's inner tensors in its ``__dict__`` or
    slots: ``w.data_int8``, ``dt._local_tensor``), named like an object's; a chunk of
    tensors without any is passed over in bulk. Tensors recorded meanwhile are looked at
    too."""
    pending, rows = walker.found.pending, walker.found.pending_rows
    tensor_type = walker.classifier.tensor_type
    if tensor_type is None:
        return
    while start < len(pending):
        end = min(len(pending), start + TENSOR_CHUNK)
        held_only = gc.get_referents(*pending[start:end])
        if len(held_only) == end - start and all(map(is_, held_only, repeat(tensor_type))):
            start = end  # each holds its class only: the common case, checked in C
            continue
        torch_rows = list(map("torch".__eq__, map(_ROW_FRAMEWORK, rows[start:end])))
        if not any(torch_rows):
            start = end
            continue
        tensors = list(itertools.compress(pending[start:end], torch_rows))
        held = list(itertools.compress(rows[start:end], torch_rows))
        start = end
        for tensor, attributes, row in zip(tensors, tensor_attributes(tensors), held):
            if attributes:
                walker.walk_tensor_attributes(id(tensor), *attributes, row)


def note_opaque(walker, obj, path, depth, holder, root) -> None:
    """A torch ScriptObject no binding lists the tensors of: its path, for a note."""
    if len(walker.opaque) < MAX_OPAQUE:
        walker.opaque.append(path)
