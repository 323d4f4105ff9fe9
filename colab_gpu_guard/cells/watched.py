"""The containers a rerun watches: those the cell names, and those one step from its names
(an object's attribute, a list a module hook's function fills, a module's global its
functions use, a functools cache), each with the name a user types (see docs/cells.md,
"What holds a rerun's earlier objects")."""

from __future__ import annotations

import collections
import functools
import itertools
import sys
import types
import weakref
from typing import Any, Callable, NamedTuple, Optional

MAX_NAMES = 256  # names of one source looked up before and after a rerun
MAX_OBJECTS = 256  # objects looked into (their attributes, a module's submodules' hooks)
CALL_DEPTH = 3  # levels of the notebook's functions a rerun cell calls, looked into
_LENGTH_OF = (
    (list, list.__len__),
    (dict, dict.__len__),
    (set, set.__len__),
    (collections.deque, collections.deque.__len__),
)
# what a watched container is (`Watched.kind`)
CONTAINER = "container"  # a list, dict, set or deque (or a subclass)
CACHE = "cache"  # a functools.cache / lru_cache function's cache
OBJECT = "object"  # not a container: an object a notebook name held (a weakref to it)
_LRU = getattr(functools, "_lru_cache_wrapper", None)  # the C wrapper's type
if not isinstance(_LRU, type):  # no C accelerator: functools' own Python wrapper
    _LRU = None
_CACHE_INFO = None if _LRU is None else _LRU.__dict__.get("cache_info")
_FUNCTION = types.FunctionType
_METHOD = types.MethodType
_MODULE = types.ModuleType
_MODULE_DICT = types.ModuleType.__dict__["__dict__"].__get__
_LRU_DICT = None if _LRU is None else _LRU.__dict__["__dict__"].__get__
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python


# values that neither hold nor reach a container
_ATOMS = frozenset((int, float, complex, bool, str, bytes))


class Watched(NamedTuple):
    """A container read before a rerun: its identity and length then, the container (kept
    for the run: a label like ``trainer.history`` is not looked up again), its kind, and
    for a name of the notebook itself the name (after the run, a name bound to another
    container means the one from before is not what it holds)."""

    ident: int
    length: int
    container: Any
    kind: str
    name: Optional[str]


_BASES: dict[type, Optional[tuple]] = {}


def container_base(kind: type) -> Optional[tuple]:
    """(built-in container type, its __len__) of a type, or None (memoised)."""
    try:
        return _BASES[kind]
    except KeyError:
        pass
    found = None
    for base, length in _LENGTH_OF:
        if kind is base or issubclass(kind, base):
            found = (base, length)
            break
    if len(_BASES) > 1024:
        _BASES.clear()
    _BASES[kind] = found
    return found


def cache_length(wrapper: Any) -> int:
    """How many results a functools cache holds (its C ``cache_info``: no user code)."""
    return _CACHE_INFO(wrapper).currsize  # type: ignore[misc]


def cache_results(wrapper: Any) -> list:
    """A functools cache's results, oldest first."""
    # the scan's readers (and with them the leftovers room) load on first use, not at
    # %load_ext, which imports this module
    from ..leftovers.readers import lru_cache_entries

    return lru_cache_entries(wrapper)[1]


def users_module(globals_: dict) -> bool:
    """A module of the user's own (`leftovers.registries.users_module`)."""
    from ..leftovers.registries import users_module as of_user  # first use, not %load_ext

    return of_user(globals_)


# type -> the interpreter's reader of its instances' dict (`layout_of`: it walks the
# class's attributes, so it is read once per type)
_GETTERS: dict[type, Any] = {}
_UNKNOWN = object()


def _array_types() -> tuple:
    """torch's tensor type, where torch is loaded: its instances are not looked into."""
    torch = sys.modules.get("torch")
    tensor = getattr(torch, "Tensor", None) if torch is not None else None
    return (tensor,) if isinstance(tensor, type) else ()


class Finder:
    """Reads, before a rerun, the containers its source names or reaches in one step."""

    def __init__(self, namespace: dict) -> None:
        self.namespace = namespace
        self.watched: dict[str, Watched] = {}
        self.seen: set[int] = set()  # functions and objects looked into
        self.budget = MAX_NAMES
        self.objects = MAX_OBJECTS
        # (names, the globals they are looked up in): the notebook's functions' and user
        # modules' functions' names, for the next level
        self.called: list[tuple[tuple, dict]] = []
        self.arrays: Optional[tuple] = None  # torch's tensor type, read when first needed

    def find(self, names: tuple) -> dict[str, Watched]:
        namespace = self.namespace
        self._names(names, namespace, "", names)
        for _level in range(CALL_DEPTH):
            called, self.called = self.called, []
            if not called or self.budget <= 0:
                break
            for more, scope in called:
                self._names(more, scope, self._prefix(scope), more)
        return self.watched

    def _prefix(self, scope: dict) -> str:
        """How a global of `scope` is named: bare in the notebook, ``module.`` else."""
        if scope is self.namespace:
            return ""
        module = dict.get(scope, "__name__")
        return f"{module}." if type(module) is str else "?."

    def _names(self, names: Any, scope: dict, prefix: str, mentioned: tuple) -> None:
        """Each of `names` bound in `scope`: a container is watched; a function of the
        notebook or of a user's module, an object, a module, a functools cache is looked
        into (`mentioned`: the names around it, the attributes a module's use may name)."""
        for name in names:
            if self.budget <= 0:
                return
            value = dict.get(scope, name)
            if value is None:
                continue
            self.budget -= 1
            self.value(value, prefix + name, name if not prefix else None, mentioned)

    def value(self, value: Any, label: str, name: Optional[str], mentioned: tuple) -> None:
        kind = type(value)
        found = _BASES[kind] if kind in _BASES else container_base(kind)
        if found is not None:
            if label not in self.watched:
                self.watched[label] = Watched(id(value), found[1](value), value, CONTAINER, name)
            return
        if kind is _FUNCTION:
            self.function(value)
        elif kind is _MODULE:
            self.module(value, label, mentioned)
        elif kind is _LRU and _LRU is not None:
            self.cache(value, label)
        elif kind is _METHOD:
            self.function(value.__func__)
        elif _TYPE_FLAGS(kind) & _HEAPTYPE and not issubclass(kind, type):
            if self.arrays is None:
                self.arrays = _array_types()
            if issubclass(kind, self.arrays):
                return  # a tensor: its attributes are not looked into
            if name is not None and label not in self.watched:
                self._object(value, name)
            self.instance(value, label)

    def _object(self, value: Any, name: str) -> None:
        """An object the notebook's `name` holds, watched by a weakref: one the rerun
        rebinds and that stays alive is looked for among unreachable cycles."""
        try:
            ref = weakref.ref(value)
        except TypeError:  # a class without weak references
            return
        self.watched[name] = Watched(id(value), 0, ref, OBJECT, name)

    def function(self, function: Any) -> None:
        """A function of the notebook or of a user's module: the names its code uses, in
        its globals, at the next level."""
        if type(function) is not _FUNCTION or id(function) in self.seen:
            return
        scope = function.__globals__
        if scope is not self.namespace and not users_module(scope):
            return
        self.seen.add(id(function))
        self.called.append((function.__code__.co_names, scope))

    def module(self, module: Any, label: str, mentioned: tuple) -> None:
        """A user's module the cell names (``nbutils.remember(x)``): its globals among the
        names the cell uses (``nbutils.cache``; ``remember``, looked into)."""
        scope = _MODULE_DICT(module)
        if id(module) in self.seen or not users_module(scope):
            return
        self.seen.add(id(module))
        self._names(mentioned, scope, f"{label}.", mentioned)

    def cache(self, wrapper: Any, label: str) -> None:
        """A functools cache: its results, watched under the function's name."""
        if label in self.watched:
            return
        try:
            length = cache_length(wrapper)
        except Exception:  # a wrapper of an unexpected shape: not watched
            return
        self.watched[label] = Watched(id(wrapper), length, wrapper, CACHE, None)
        own = _LRU_DICT(wrapper)  # type: ignore[misc]
        if type(own) is dict:
            self.function(dict.get(own, "__wrapped__"))

    def instance(self, obj: Any, label: str) -> None:
        """An object of a class written in Python: its container attributes
        (``trainer.history``), its methods and functions, and the functions its hooks
        call (an ``nn.Module``'s ``_forward_hooks``, and its submodules'), read from its
        instance dict."""
        if self.objects <= 0 or id(obj) in self.seen:
            return
        self.objects -= 1
        self.seen.add(id(obj))
        attributes = _attributes(obj)
        if not attributes:
            return
        for attribute, value in list(dict.items(attributes)):
            if type(attribute) is not str:
                continue
            kind = type(value)
            if attribute.endswith("hooks") and issubclass(kind, dict):
                self._hooks(value)
            elif attribute == "_modules" and issubclass(kind, dict):
                self._submodules(value)
            else:
                found = _BASES[kind] if kind in _BASES else container_base(kind)
                if found is not None:
                    path = f"{label}.{attribute}"
                    if path not in self.watched:
                        self.watched[path] = Watched(
                            id(value), found[1](value), value, CONTAINER, None
                        )
                elif kind is _METHOD or kind is _FUNCTION:
                    self.function(value.__func__ if kind is _METHOD else value)

    def _hooks(self, hooks: dict) -> None:
        for hook in list(dict.values(hooks)):
            self.function(hook.__func__ if type(hook) is _METHOD else hook)

    def _submodules(self, modules: dict) -> None:
        """The hooks of an ``nn.Module``'s submodules, all levels down (at most
        `MAX_OBJECTS` modules): read by their names in each instance dict."""
        pending = list(dict.values(modules))
        budget = MAX_OBJECTS
        while pending and budget > 0:
            module = pending.pop()
            if module is None or id(module) in self.seen:
                continue
            budget -= 1
            self.seen.add(id(module))
            attributes = _attributes(module)
            if not attributes:
                continue
            for name in _MODULE_HOOKS:
                hooks = dict.get(attributes, name)
                if issubclass(type(hooks), dict) and dict.__len__(hooks):
                    self._hooks(hooks)
            children = dict.get(attributes, "_modules")
            if issubclass(type(children), dict):
                pending += dict.values(children)


# the hooks torch keeps in a module's instance dict that call a function per call
_MODULE_HOOKS = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")


def _attributes(obj: Any) -> Optional[dict]:
    """An object's instance dict, read through the interpreter's own getter."""
    from ..leftovers.readers import instance_dict, layout_of  # first use, not %load_ext

    kind = type(obj)
    getter = _GETTERS.get(kind, _UNKNOWN)
    if getter is _UNKNOWN:
        if len(_GETTERS) > 1024:
            _GETTERS.clear()
        getter = _GETTERS[kind] = layout_of(kind).dict_getter
    return instance_dict(getter, obj)


def watch(namespace: Optional[dict], names: tuple) -> dict[str, Watched]:
    """{label: `Watched`} for a rerun of a source that mentions `names`, read before it
    runs; {} where the notebook's values could not be read."""
    if not namespace or not names:  # `pass`, `%gpu_status`: nothing to look up
        return {}
    for name in names:  # most reruns name numbers and strings alone: nothing to look into
        value = namespace.get(name)
        if value is not None and type(value) not in _ATOMS:
            break
    else:
        return {}
    try:
        return Finder(namespace).find(names)
    except Exception:  # the user's namespace and values: none read, the cell still recorded
        return {}


def length_now(watched: Watched) -> int:
    """A watched container's length after the run."""
    if watched.kind == CACHE:
        return cache_length(watched.container)
    found = container_base(type(watched.container))
    return found[1](watched.container) if found is not None else 0


def reader_of(watched: Watched) -> Callable[[int, int, int], list]:
    """items(end, count, skip): the `count` items before the last `skip` of a watched
    container of length `end`, oldest first."""
    if watched.kind == CACHE:
        results = cache_results(watched.container)

        def cached(end: int, count: int, skip: int) -> list:
            stop = len(results) - skip
            return results[max(0, stop - count) : max(0, stop)]

        return cached
    base = container_base(type(watched.container))
    assert base is not None

    def items(end: int, count: int, skip: int) -> list:
        return container_items(watched.container, base[0], end, count, skip)

    return items


def container_items(value: Any, base: type, end: int, count: int, skip: int) -> list:
    """The `count` items before the last `skip` ones of a container of length `end`, in
    order (a set's items have no order: none)."""
    start = max(0, end - skip - count)
    stop = end - skip
    if start >= stop:
        return []
    if base is list:
        return list.__getitem__(value, slice(start, stop))
    if base is dict:
        values: Any = reversed(dict.values(value))
    elif base is collections.deque:
        values = collections.deque.__reversed__(value)
    else:
        return []
    return list(itertools.islice(values, skip, skip + stop - start))[::-1]
