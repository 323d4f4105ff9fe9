"""Who holds which array, by the name a user would type to reach it.

``find_leftovers()`` walks what a notebook keeps alive: the user namespace, IPython's output
history (``Out``, ``_``, ``__``, ``___``, ``_N``, the last cell's result), the last
exception (its ``args``, its traceback frames' locals, exceptions chained to it) and the
post-mortem debugger's frames. It walks into lists, tuples, dicts, sets, ``nn.Module``
parameters/buffers/submodules (named like ``named_parameters()``), optimizer state (keyed
by the parameter's name), dataclasses and plain objects' ``__dict__`` and slots, classes'
own attributes (an instance of a class the notebook defines holds its class), closures,
``functools.partial`` arguments, suspended generators' locals, what built-in iterators
and itertools adaptors hold (a ``cycle`` keeps every item it yielded), NumPy object arrays
and dict keys, with a depth limit, cycle detection and a time budget; no code of the user's
runs (containers are read through their built-in type's C-level accessors). Arrays are
deduplicated by the memory they live in (torch: untyped storage; NumPy: the array owning
the data; CuPy: the ``Memory`` allocation; JAX: the device buffer), so a view and its base
count once; the other names reaching the same memory are listed in ``shared_with``.

``deep=True`` also looks for torch/CuPy arrays alive anywhere (``gc.get_objects()``) and
JAX arrays (``jax.live_arrays()``) that no name reaches, and compares the total with torch's
``memory_allocated`` per CUDA device.

No framework is imported here: torch, NumPy, CuPy and JAX are looked up in ``sys.modules``.

Modules: ``records`` (Leftover, DeviceGap, LeftoverList), ``html`` (the table), ``kinds``
(what a type is to the walk), ``walker`` (the reference walk), ``found`` (the references
found and their metadata), ``readers`` (reading without running user code), ``holders``
(class attributes, closures, partials, generators, iterators, object arrays), ``plain``
(plain data skipped in bulk), ``naming`` (a path's name), ``blocks`` (one entry per block of
memory), ``scan`` (find_leftovers, scan, Scan), ``reach`` (which roots reach which blocks,
in bulk), ``dropping`` (what dropping some roots frees and leaves held, read off a scan:
gpu_reset), ``deep`` (the deep scan), ``graphs`` (what autograd graphs hold), ``groups``
(the entries by the variable or hidden holder that keeps them: ``LeftoverList.groups()``),
``tally`` (which group each block belongs to, and each group's count, bytes and devices,
worked per run of one root).
"""

from __future__ import annotations

from ..units import HOLDERS
from .found import Ref
from .groups import LeftoverGroup, LeftoverGroups
from .html import leftovers_html
from .naming import MAX_SHARED_NAMES
from .records import DeviceGap, Leftover, LeftoverList
from .scan import DEFAULT_BUDGET_S, Group, Scan, find_leftovers, group_refs, scan
from .walker import DEFAULT_MAX_DEPTH

__all__ = [
    "DEFAULT_BUDGET_S",
    "DEFAULT_MAX_DEPTH",
    "HOLDERS",
    "MAX_SHARED_NAMES",
    "DeviceGap",
    "Group",
    "Leftover",
    "LeftoverGroup",
    "LeftoverGroups",
    "LeftoverList",
    "Ref",
    "Scan",
    "find_leftovers",
    "group_refs",
    "leftovers_html",
    "scan",
]
