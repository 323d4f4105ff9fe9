"""The deep scan: arrays alive that no name reaches (``gc.get_objects()``, JAX's live
arrays), what refers to the biggest, and per CUDA device found vs allocated bytes."""

from __future__ import annotations

import gc
import sys
import threading
import types

from .. import notebook_refs
from ..frameworks import cupy as cupy_support
from ..frameworks import jax as jax_support
from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo, short_type_name
from ..units import OTHER, counted
from .kinds import ARRAY, ATOMIC, opaque_module
from .naming import ROOT
from .readers import instance_dict, layout_of, mro, type_module
from .records import DeviceGap
from .root_refs import UNNAMED_REF, UNNAMED_ROOT
from .visit import Visit
from .walker import Walker

_UNNAMED_DESCRIBED = 20  # unnamed storages whose referrers are looked up
_NO_INFO = ArrayInfo((), "", "", 0, None, 0, 0)


_SIZED = (dict, list, tuple, set, frozenset)


def _describe_referrer(referrer) -> str:
    """What kind of object ``referrer`` is, read without calling any of its methods (a
    subclass's length is its built-in part's)."""
    kind = type(referrer)
    if kind is types.FrameType:
        return f"frame of {notebook_refs.frame_function(referrer)}()"
    base = next((item for item in mro(kind) if item in _SIZED), None)
    name = short_type_name(kind)
    if base is dict:
        count = dict.__len__(referrer)
        return f"a {name} of {counted(count, 'entry', 'entries')}"
    if base is not None:
        count = base.__len__(referrer)
        return f"a {name} of {counted(count, 'item')}"
    return f"a {type_module(kind)}.{name}"


def _ours(referrer) -> bool:
    """A frame of this package's own code (the scan's, a caller's): never a holder."""
    return type(referrer) is types.FrameType and opaque_module(
        str(referrer.f_globals.get("__name__") or "")
    )


def scan_unnamed(walker: Walker, notes: list[str]) -> None:
    """Arrays alive that no name reached: recorded with holder 'other'."""
    named = set(walker.found.keys)
    named.update(walker.found.whole_keys)  # sparse tensors: their components are rows
    named.update(walker.graphs.saved)  # attributed to the graph that saved them
    # files mapped from disk a name reaches: left out of the arrays, and named in a note
    named.update(key for _row, key, _size, _file in walker.found.files.left_out)
    found: dict = {}  # storage key -> (kind, [arrays])
    classifier = walker.classifier
    if classifier.tensor_type is not None or cupy_support.array_type() is not None:
        kinds = classifier.kinds
        classify = classifier.classify
        objects = gc.get_objects()
        try:
            for obj in objects:
                kind = type(obj)
                if kind in ATOMIC:
                    continue
                what = kinds.get(kind) or classify(kind)
                if what.tag != ARRAY or what.framework in ("numpy", "arrow"):
                    continue
                try:
                    info = what.info_of(obj)  # type: ignore[misc]
                except Exception:  # a framework's reader on an array gc found (any state)
                    continue
                key = info.storage_key
                # a tensor on the meta device holds no memory: torch keeps some of its own
                # (making a jagged nested tensor leaves three in torch's caches)
                if key not in named and info.device != "meta":
                    found.setdefault(key, (what, []))[1].append(obj)
        finally:
            del objects
            obj = None
    if jax_support.loaded() is not None:
        jax_what = classifier.classify(jax_support.array_type() or type(None))
        for array in jax_support.live_arrays():
            if jax_what.tag != ARRAY:
                break
            try:
                key = jax_support.array_info(array).storage_key
            except Exception:  # JAX's reader on a live array
                continue
            if key not in named:
                found.setdefault(key, (jax_what, []))[1].append(array)
        array = None
    # a tensor with a graph that no name reaches: what its graph saved is its memory (the
    # saved tensors are not blocks of their own, as for a named owner)
    arrays = {key: entry[1] for key, entry in found.items()}
    for key in walker.graphs.resolve_unnamed(arrays, named):
        del found[key]
    del arrays
    if not found:
        return
    by_size = sorted(found.items(), key=lambda item: -_safe_info(item[1]).storage_nbytes)
    described = _referrer_descriptions(
        [arrays for _key, (_what, arrays) in by_size[:_UNNAMED_DESCRIBED]], found
    )
    for index, (_key, (what, arrays)) in enumerate(by_size):
        held_by = described.get(index)
        if held_by is None:
            label = f"<unnamed #{index + 1}>"
        elif held_by:
            label = f"<unnamed #{index + 1}: referenced by {', '.join(held_by)}>"
        else:
            label = f"<unnamed #{index + 1}: no Python referrer (held from C++, e.g. autograd)>"
        walker.groups[(label, OTHER)] = UNNAMED_REF
        walker.record(arrays[0], what, Visit((None, ROOT, label), 0, OTHER, (UNNAMED_ROOT,)))
    searched = " down to the depth searched" if walker.stopped_deep else ""
    notes.append(
        f"the memory of {counted(len(found), 'more array')} is alive but reached by no name"
        f" in the notebook{searched}"
    )


def _safe_info(entry) -> ArrayInfo:
    what, arrays = entry
    try:
        return what.info_of(arrays[0])
    except Exception:  # a framework's reader on an unnamed array
        return _NO_INFO


def _referrer_descriptions(array_lists: list[list], found: dict) -> dict[int, list[str]]:
    """For the biggest unnamed blocks: what kind of object refers to them (one gc pass)."""
    targets: dict[int, int] = {}
    for index, arrays in enumerate(array_lists):
        for array in arrays:
            targets[id(array)] = index
    own = {id(found), id(targets), id(array_lists), id(sys._getframe())}
    own.update(id(arrays) for arrays in array_lists)
    own.update(id(entry) for entry in found.values())
    all_arrays = [array for arrays in array_lists for array in arrays]
    own.add(id(all_arrays))
    descriptions: dict[int, list[str]] = {index: [] for index in range(len(array_lists))}
    _running_holders(targets, descriptions)
    try:
        referrers = gc.get_referrers(*all_arrays)
    except Exception:  # the collector's traversal of user objects (C extensions' tp_traverse)
        return descriptions
    for referrer in referrers:
        if id(referrer) in own:
            continue
        try:
            referents = gc.get_referents(referrer)
        except Exception:  # a user object's traversal (a C extension's tp_traverse)
            continue
        hit = {targets[id(obj)] for obj in referents if id(obj) in targets}
        if not hit or _ours(referrer):
            continue
        try:
            text = _describe_referrer(referrer)
        except Exception:  # a user object read through its type's descriptors
            text = "an object"
        for index in hit:
            if text not in descriptions[index] and len(descriptions[index]) < 3:
                descriptions[index].append(text)
    return descriptions


def _thread_names() -> dict[int, str]:
    """Each running thread's ident -> its name, read from the thread objects' own dicts
    (a ``Thread`` subclass's properties never run)."""
    names = {}
    for thread in threading.enumerate():
        attributes = instance_dict(layout_of(type(thread)).dict_getter, thread) or {}
        name, ident = dict.get(attributes, "_name"), dict.get(attributes, "_ident")
        if type(name) is str and type(ident) is int:
            names[ident] = name
    return names


def _running_holders(targets: dict[int, int], descriptions: dict[int, list[str]]) -> None:
    """The arrays among `targets` (id -> index) that are local variables of a function
    still running, in any thread: the garbage collector sees no referrer for those (a
    running frame's variables are not among what it traverses). Named by the variable,
    the function and the thread: ``local 'batch' of worker() in thread 'loader'``."""
    threads = None
    for ident, top in list(sys._current_frames().items()):
        frame = top
        while frame is not None:
            if not _ours(frame):
                for name, value in notebook_refs.running_locals(frame).items():
                    index = targets.get(id(value))
                    if index is None or type(name) is not str:
                        continue
                    if threads is None:
                        threads = _thread_names()
                    thread = threads.get(ident, f"#{ident}")
                    text = (
                        f"local {name!r} of {notebook_refs.frame_function(frame)}() "
                        f"(running, thread {thread!r})"
                    )
                    if text not in descriptions[index] and len(descriptions[index]) < 3:
                        descriptions[index].append(text)
            frame = frame.f_back
        top = frame = None


def allocator_gaps(devices: list[str], sizes: list[int]) -> list[DeviceGap]:
    """Per CUDA device: the bytes of the blocks found there vs torch's allocated bytes."""
    try:
        stats = torch_support.allocator_stats()
    except Exception:  # torch's allocator (optional framework)
        return []
    gaps = []
    for stat in stats:
        device = f"cuda:{stat.device}"
        found = sum(size for size, where in zip(sizes, devices) if where == device)
        gaps.append(DeviceGap(device, found, stat.allocated))
    return gaps
