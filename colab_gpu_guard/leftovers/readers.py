"""Reading what an object holds without running any of its code: the C-level accessors of
its built-in base and the interpreter's own descriptors. See docs/leftovers.md."""

from __future__ import annotations

import builtins
import collections
import functools
import gc
import itertools
import types
from typing import Any, Callable, NamedTuple, Optional

from ..notebook_refs.frames import frame_locals

_TYPE_MRO = type.__dict__["__mro__"].__get__
_TYPE_DICT = type.__dict__["__dict__"].__get__  # a type's own mappingproxy, in C
_TYPE_MODULE = type.__dict__["__module__"].__get__
_TYPE_FLAGS = type.__dict__["__flags__"].__get__
_TYPE_QUALNAME = type.__dict__["__qualname__"].__get__
_HEAPTYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class written in Python
_GETSET = types.GetSetDescriptorType
_MEMBER = types.MemberDescriptorType

# the built-in bases a subclass is read through, and their C-level iterators
BASE_ITER: dict[type, Callable[[Any], Any]] = {
    list: list.__iter__,
    tuple: tuple.__iter__,
    collections.deque: collections.deque.__iter__,
    set: set.__iter__,
    frozenset: frozenset.__iter__,
}


def mro(kind: type) -> tuple:
    return _TYPE_MRO(kind)


def type_module(kind: type) -> str:
    try:
        module = _TYPE_MODULE(kind)
    except Exception:  # a user type's __module__ (missing, or a metaclass's)
        return ""
    return module if type(module) is str else ""


def type_name(kind: type) -> str:
    """``module.QualifiedName`` of a type, read through ``type``'s own descriptors."""
    module = type_module(kind)
    try:
        name = _TYPE_QUALNAME(kind)
    except Exception:  # a metaclass's __qualname__
        name = "?"
    name = name if type(name) is str else "?"
    return f"{module}.{name}" if module and module != "builtins" else name


def own_attribute(kind: type, name: str) -> Any:
    """``name`` as the type's MRO defines it (None if nowhere), read from the classes'
    own dicts: no metaclass ``__getattr__`` runs."""
    for base in _TYPE_MRO(kind):
        namespace = _TYPE_DICT(base)
        if name in namespace:
            return namespace[name]
    return None


class Layout(NamedTuple):
    """Where an instance of a type keeps its attributes: the interpreter's ``__dict__``
    getter (None without one) and its slots as (name, member descriptor)."""

    dict_getter: Optional[Callable[[Any], Any]]
    slots: tuple[tuple[str, Any], ...]
    links: frozenset = frozenset()  # attributes that are a registry's links (`LINKS`)


def class_attributes(cls: type) -> list[tuple[str, Any]]:
    """(name, value) of a class's own attributes, for a class written in Python (a
    built-in or C extension type holds no data of the user's): read from the class's own
    dict, so no metaclass ``__getattr__`` or descriptor runs."""
    if not _TYPE_FLAGS(cls) & _HEAPTYPE:
        return []
    return [(name, value) for name, value in list(_TYPE_DICT(cls).items()) if type(name) is str]


def written_in_the_notebook(kind: type) -> bool:
    """A class defined in the notebook (``__main__``): its instances keep it alive, and
    with it its class attributes (a class of a module lives as long as its module)."""
    return bool(_TYPE_FLAGS(kind) & _HEAPTYPE) and type_module(kind) == "__main__"


# Fields of C extension types that hold their data, read like slots: Cython's getters of
# ``cdef public``/``readonly`` fields return the field itself (no copy, no computation).
# pandas keeps a frame's columns there (pandas 2.2 and 3.x): a BlockManager's blocks and
# axes, a block's values, an NDArrayBacked array's (Categorical, datetimes, strings) ndarray.
# asyncio's C futures and tasks keep their result, callbacks and coroutine the same way.
C_FIELDS: dict[tuple[str, str], tuple[str, ...]] = {
    ("pandas._libs.internals", "BlockManager"): ("blocks", "axes"),
    ("pandas._libs.internals", "Block"): ("values",),
    ("pandas._libs.arrays", "NDArrayBacked"): ("_ndarray", "_dtype"),  # a categorical's labels
    # an index's lookup engine: its values (the index's own array, or in pandas 3 an object
    # array made from a string index's) and mask, named, not found through gc as <ndarray>
    ("pandas._libs.index", "IndexEngine"): ("values", "mask"),
    ("_asyncio", "Future"): ("_result", "_exception", "_callbacks"),
    ("_asyncio", "Task"): ("_result", "_exception", "_callbacks", "_coro"),
}


# Attributes that link an object to the registry keeping it, not to what it holds: a
# logger's manager (every logger of the process) and parent (the root logger). Deleting a
# name never frees what they lead to; walked, they would list other loggers' records under
# that name.
LINKS: dict[tuple[str, str], frozenset] = {
    ("logging", "Logger"): frozenset({"manager", "parent"}),
}


def _c_fields(base: type) -> list[tuple[str, Any]]:
    """(name, getset descriptor) of the known data fields `base` (a C type) defines."""
    names = C_FIELDS.get((type_module(base), _TYPE_QUALNAME(base)))
    if not names:
        return []
    namespace = _TYPE_DICT(base)
    return [
        (name, namespace[name])
        for name in names
        if name in namespace and type(namespace[name]) is _GETSET
    ]


def layout_of(kind: type) -> Layout:
    """The C-level readers of ``kind``'s instance dict and slots: the first ``__dict__``
    entry along the MRO that is the interpreter's getset descriptor (a property named
    ``__dict__`` in a subclass is passed over), every member descriptor the MRO defines
    and no subclass shadows, the data fields of known C types (`C_FIELDS`), and the
    attributes that are a registry's links (`LINKS`), not walked."""
    getter = None
    slots: dict[str, Any] = {}
    shadowed: set[str] = set()
    for base in _TYPE_MRO(kind):
        for name, descriptor in _c_fields(base):
            if name not in shadowed and name not in slots:
                slots[name] = descriptor
        for name, value in list(_TYPE_DICT(base).items()):
            if type(name) is not str:
                continue
            if name == "__dict__":
                if getter is None and type(value) is _GETSET:
                    getter = value.__get__
                continue
            if (
                type(value) is _MEMBER
                and name not in shadowed
                and name not in slots
                and _is_slot(base, name)
            ):
                slots[name] = value
            shadowed.add(name)
    if getter is None and _GETSTATE is not None and _TYPE_DICTOFFSET(kind):
        getter = _generic_dict  # a class that hid its __dict__ behind its own attribute
    links = frozenset().union(
        *(LINKS.get((type_module(base), _TYPE_QUALNAME(base)), ()) for base in _TYPE_MRO(kind))
    )
    return Layout(getter, tuple(slots.items()), links)


_TYPE_DICTOFFSET = type.__dict__["__dictoffset__"].__get__
_GETSTATE = getattr(object, "__getstate__", None)  # Python 3.11+


def _generic_dict(obj: Any) -> Any:
    """The instance dict as the interpreter keeps it (``object.__getstate__``'s default,
    which reads it directly), for a class whose ``__dict__`` attribute is its own."""
    state = _GETSTATE(obj)  # type: ignore[misc]
    if type(state) is tuple and state:
        state = state[0]
    return state


def _is_slot(base: type, name: str) -> bool:
    """A member descriptor from ``__slots__``: one a class written in Python defines (a
    built-in type's own members, such as a function's ``__doc__``, are not slots)."""
    return bool(_TYPE_FLAGS(base) & _HEAPTYPE)


def instance_dict(getter: Optional[Callable[[Any], Any]], obj: Any) -> Optional[dict]:
    if getter is None:
        return None
    try:
        value = getter(obj)
    except Exception:  # a user object's __dict__ getter
        return None
    return value if type(value) is dict else None


def slot_values(slots: tuple[tuple[str, Any], ...], obj: Any) -> list[tuple[str, Any]]:
    """(slot name, value) of the slots that are set."""
    values = []
    for name, descriptor in slots:
        try:
            value = descriptor.__get__(obj, None)
        except Exception:  # an unset slot
            continue
        values.append((name, value))
    return values


_FUNCTION_CLOSURE = types.FunctionType.__dict__["__closure__"].__get__
_FUNCTION_CODE = types.FunctionType.__dict__["__code__"].__get__
_FUNCTION_DEFAULTS = types.FunctionType.__dict__["__defaults__"].__get__
_FUNCTION_KWDEFAULTS = types.FunctionType.__dict__["__kwdefaults__"].__get__
_CELL_CONTENTS = types.CellType.__dict__["cell_contents"].__get__


def closure_values(function: types.FunctionType) -> list[tuple[str, Any]]:
    """(free variable name, value) of a function's closure cells that are set."""
    cells = _FUNCTION_CLOSURE(function)
    if not cells:
        return []
    names = _FUNCTION_CODE(function).co_freevars
    values = []
    for name, cell in zip(names, cells):
        try:
            values.append((name, _CELL_CONTENTS(cell)))
        except ValueError:  # an empty cell
            continue
    return values


def function_defaults(function: types.FunctionType) -> tuple[Any, Any]:
    """A function's ``__defaults__`` tuple and ``__kwdefaults__`` dict (None if none)."""
    return _FUNCTION_DEFAULTS(function), _FUNCTION_KWDEFAULTS(function)


def function_name(function: Any) -> str:
    try:
        name = _FUNCTION_CODE(function).co_name
    except Exception:  # a user object passed for a function (no code object)
        return "?"
    return name if type(name) is str else "?"


_SUSPENDED = {
    types.GeneratorType: ("generator", types.GeneratorType.__dict__["gi_frame"].__get__),
    types.CoroutineType: ("coroutine", types.CoroutineType.__dict__["cr_frame"].__get__),
    types.AsyncGeneratorType: (
        "async generator",
        types.AsyncGeneratorType.__dict__["ag_frame"].__get__,
    ),
}


def suspended_locals(generator: Any) -> tuple[str, str, dict]:
    """A generator's, coroutine's or async generator's kind, function name and the locals
    of its frame while it is suspended (an empty dict once it finished or while it runs).
    Reading a frame's locals runs no code of the user's."""
    kind, frame_of = _SUSPENDED[type(generator)]
    frame = frame_of(generator)
    if frame is None:
        return kind, "?", {}
    try:
        name = frame.f_code.co_name
    except Exception:  # a user generator's frame (finished, or an odd one)
        return kind, "?", {}
    return kind, name, frame_locals(frame)  # on 3.13+ f_locals is a proxy, not a dict


def suspended_module(generator: Any) -> str:
    """The module a suspended generator's code runs in ('' if finished or unknown)."""
    _kind, frame_of = _SUSPENDED[type(generator)]
    try:
        name = frame_of(generator).f_globals.get("__name__")
    except Exception:  # a user generator's frame globals
        return ""
    return name if type(name) is str else ""


_FUNCTION_MODULE = types.FunctionType.__dict__["__module__"].__get__


def function_module(function: Any) -> str:
    try:
        name = _FUNCTION_MODULE(function)
    except Exception:  # a user function's __module__
        return ""
    return name if type(name) is str else ""


SUSPENDED_TYPES = tuple(_SUSPENDED)


def _iterator_types() -> frozenset:
    """The built-in iterators and itertools' adaptors: C objects with no attributes to
    read, which hold what they iterate (``itertools.cycle`` also every item it yielded)."""
    samples = [[], (), {}, {}.keys(), {}.values(), {}.items(), set(), "", b"", bytearray()]
    kinds = {type(iter(sample)) for sample in samples}
    kinds |= {type(reversed([])), type(reversed({})), type(iter(collections.deque()))}
    kinds |= {type(reversed(collections.deque())), type(iter(lambda: 0, 0))}
    kinds |= {enumerate, zip, map, filter}
    kinds |= {
        value
        for value in vars(itertools).values()
        if type(value) is type and value.__module__ == "itertools"
    }
    kinds.add(type(itertools.tee(())[0]))
    return frozenset(kinds)


ITERATOR_TYPES = _iterator_types()


def iterator_holds(iterator: Any) -> list:
    """What an iterator holds, as the garbage collector sees it (its C traverse function:
    no code of the user's runs)."""
    return gc.get_referents(iterator)


_EXCEPTION_READERS = tuple(
    BaseException.__dict__[name].__get__
    for name in ("args", "__traceback__", "__cause__", "__context__")
)
_GROUP: Optional[type] = getattr(builtins, "BaseExceptionGroup", None)  # Python 3.11+
_GROUP_EXCEPTIONS = None if _GROUP is None else _GROUP.__dict__["exceptions"].__get__


def exception_fields(exception: BaseException) -> tuple[Any, Any, Any, Any, Any]:
    """(args, __traceback__, __cause__, __context__, an exception group's exceptions or
    None), read through BaseException's (and BaseExceptionGroup's) own descriptors."""
    args, traceback, cause, context = (read(exception) for read in _EXCEPTION_READERS)
    group = None
    if _GROUP is not None and isinstance(exception, _GROUP):
        group = _GROUP_EXCEPTIONS(exception)  # type: ignore[misc]
    return args, traceback, cause, context, group


def frame_module(frame: types.FrameType) -> str:
    """The name of the module a frame's code runs in ('' if unknown)."""
    try:
        namespace = frame.f_globals
        name = dict.get(namespace, "__name__") if isinstance(namespace, dict) else None
    except Exception:  # a user frame's globals
        return ""
    return name if type(name) is str else ""


LRU_CACHE_TYPE: Optional[type] = getattr(functools, "_lru_cache_wrapper", None)
_LRU_DICT = None if LRU_CACHE_TYPE is None else LRU_CACHE_TYPE.__dict__["__dict__"].__get__


def lru_cache_entries(wrapper: Any) -> tuple[str, list, list]:
    """The module of a ``functools.lru_cache`` wrapper's function, its cached results and
    their keys, as the garbage collector sees them (no code of the user's runs): the
    wrapper holds a dict of its keys, mapping to the results themselves (an unbounded
    cache) or to list links the collector does not see into, whose key and result the
    wrapper reports itself before that dict."""
    try:
        attributes = _LRU_DICT(wrapper)  # type: ignore[misc]
    except Exception:  # a user function's lru_cache wrapper dict
        attributes = None
    own = attributes if type(attributes) is dict else {}
    module = dict.get(own, "__module__")
    module = module if type(module) is str else ""
    referents = gc.get_referents(wrapper)
    position = next(
        (index for index, item in enumerate(referents) if type(item) is dict and item is not own),
        None,
    )
    if position is None:
        return module, [], []
    cache = referents[position]
    keys = list(dict.keys(cache))
    results = list(dict.values(cache))
    if results and type(results[0]).__name__ == "_lru_list_elem":  # a bounded cache
        skip = set(map(id, keys))
        skip.update((id(dict.get(own, "__wrapped__")), id(type(wrapper)), id(type(results[0]))))
        results = [item for item in referents[:position] if id(item) not in skip]
    return module, results, keys


def tensor_readers(tensor_type: Optional[type]) -> Optional[tuple[Callable, ...]]:
    """The C-level getters of ``is_leaf``, ``retains_grad`` and ``grad`` of torch's
    tensor base (``torch._C.TensorBase``): a subclass's properties never run."""
    if tensor_type is None:
        return None
    bases = _TYPE_MRO(tensor_type)
    if len(bases) < 2:
        return None
    namespace = _TYPE_DICT(bases[-2])
    try:
        return tuple(namespace[name].__get__ for name in ("is_leaf", "retains_grad", "grad"))
    except KeyError:
        return None


def tensor_attributes(tensors: list) -> list[Optional[tuple[Optional[dict], list]]]:
    """Each tensor's own attributes: its instance ``__dict__`` as the garbage collector
    sees it (None without one: reading a tensor's ``__dict__`` would make one) and the
    slots its class defines that are set (a wrapper subclass such as DTensor keeps its
    inner tensor there); None for a tensor with neither."""
    layouts: dict[type, tuple] = {}
    found: list[Optional[tuple[Optional[dict], list]]] = []
    for tensor in tensors:
        kind = type(tensor)
        slots = layouts.get(kind)
        if slots is None:
            slots = layouts[kind] = layout_of(kind).slots
        attributes = _tensor_dict(tensor)
        values = slot_values(slots, tensor) if slots else []
        found.append((attributes, values) if attributes or values else None)
    return found


def inner_tensors(wrapper: Any, tensor_type: type) -> list:
    """The tensors among a wrapper subclass's own attributes and slots (its memory: a
    quantized weight's data and scale, DTensor's shard), read without running its code."""
    (held,) = tensor_attributes([wrapper])
    if held is None:
        return []
    attributes, slots = held
    values = list(dict.values(attributes)) if attributes else []
    values += [value for _name, value in slots]
    return [value for value in values if issubclass(type(value), tensor_type)]


def _tensor_dict(tensor: Any) -> Optional[dict]:
    referents = gc.get_referents(tensor)
    if not referents:  # torch hides what a tensor C++ code also owns holds from the collector
        attributes = _generic_dict(tensor) if _GETSTATE is not None else None
        return attributes if type(attributes) is dict else None
    dicts = [item for item in referents if type(item) is dict]
    if not dicts:
        return None
    getter = layout_of(type(tensor)).dict_getter
    attributes = instance_dict(getter, tensor)
    return attributes if any(attributes is item for item in dicts) else None
