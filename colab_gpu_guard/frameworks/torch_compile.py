"""What torch.compile keeps alive in this process, and its reset (why: docs/frameworks.md).

Nothing here imports dynamo: it is looked up in ``sys.modules``, and only what dynamo has
compiled is reset. Compiled graphs are found without calling anything of theirs.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import types
import weakref
from types import ModuleType
from typing import Any, NamedTuple, Optional

from ..units import COMPILED_FN_PREFIX, counted, format_bytes
from . import torch as torch_support

DYNAMO = "torch._dynamo"
CUDAGRAPH_TREES = "torch._inductor.cudagraph_trees"
RECOMPILE_NOTE = "compiled functions and models compile again on their next call"
# objects of these packages are walked from a compiled graph's function to its GraphModule
_MACHINERY = ("torch._dynamo", "torch._inductor", "torch._functorch", "torch.fx")
_MAX_DEPTH = 8
_MAX_NODES = 256


def loaded() -> Optional[ModuleType]:
    """``torch._dynamo`` when something imported it (torch.compile does), else None."""
    return sys.modules.get(DYNAMO)


def compiled_codes(dynamo: Optional[ModuleType] = None) -> list[types.CodeType]:
    """The code objects dynamo generated for compiled frames that are still alive (one per
    compiled frame and guard set); [] when dynamo is not imported."""
    dynamo = dynamo or loaded()
    tracker = getattr(getattr(dynamo, "convert_frame", None), "output_codes", None)
    codes = []
    for ref in list(getattr(tracker, "seen", ())):
        code = ref() if callable(ref) else None
        if isinstance(code, types.CodeType):
            codes.append(code)
    return codes


class CompiledGraph(NamedTuple):
    """A graph dynamo installed in a module's globals: how a scan names it, and what holds
    its tensors (its FX GraphModule, or inductor's constants)."""

    label: str
    value: Any


def compiled_graphs(namespace: Optional[dict] = None) -> list[CompiledGraph]:
    """The compiled graphs still installed, in `namespace` (the notebook's) and in the
    modules of the compiled frames, labelled ``<compiled graph 3 of f()>``; [] when dynamo
    is not imported or has compiled nothing."""
    codes = compiled_codes()
    if not codes:
        return []
    # a compiled graph is an FX GraphModule: a user's module a wrapper may also reach
    # (torch.compile(model) keeps it in a closure) is named from the user's own names
    module_type = getattr(sys.modules.get("torch.fx"), "GraphModule", None)
    if not isinstance(module_type, type):
        return []
    label_of: dict[str, tuple[str, str]] = {}  # installed name -> (its label, its file)
    own_files = os.path.dirname(getattr(loaded(), "__file__", None) or "") or None
    for code in codes:
        for name in code.co_names:
            if name.startswith(COMPILED_FN_PREFIX):
                number = name[len(COMPILED_FN_PREFIX) :].partition("_")[0]
                if own_files and code.co_filename.startswith(own_files):
                    of = "torch.compile(module)"  # dynamo's own wrapper around a module call
                else:
                    of = f"{getattr(code, 'co_qualname', code.co_name)}()"
                label_of[name] = (f"<compiled graph {number} of {of}>", code.co_filename)
    found = []
    seen: set = set()
    for name, (label, filename) in label_of.items():
        scope = namespace if namespace is not None and name in namespace else None
        scope = scope if scope is not None else _module_globals(filename)
        compiled = scope.get(name) if scope is not None else None
        if compiled is None or id(compiled) in seen:
            continue
        seen.add(id(compiled))
        modules, constants = _graph_parts(compiled, module_type)
        found += [CompiledGraph(label, module) for module in modules]
        found += [CompiledGraph(f"{label}.constants", table) for table in constants]
    return found


_MODULE_OF: dict[str, str] = {}  # a module's file -> the module's name in sys.modules
_MISSED: dict[str, int] = {}  # a file no module has -> len(sys.modules) when looked for


def _module_globals(filename: str) -> Optional[dict]:
    """The globals of the loaded module defined in `filename` (which module that is, is
    cached; sys.modules is searched again only when modules were added since a miss)."""
    scope = _globals_of(sys.modules.get(_MODULE_OF.get(filename, "")))
    if scope is not None and scope.get("__file__") == filename:
        return scope
    if _MISSED.get(filename) == len(sys.modules):
        return None
    for name, module in list(sys.modules.items()):
        attributes = _globals_of(module)
        if attributes is not None and type(attributes.get("__file__")) is str:
            _MODULE_OF[attributes["__file__"]] = name
    scope = _globals_of(sys.modules.get(_MODULE_OF.get(filename, "")))
    if scope is None:
        _MISSED[filename] = len(sys.modules)
    return scope


def _globals_of(module: object) -> Optional[dict]:
    attributes = getattr(module, "__dict__", None) if type(module) is ModuleType else None
    return attributes if type(attributes) is dict else None


def _machinery(value: object) -> bool:
    return (type(value).__module__ or "").startswith(_MACHINERY)


def _graph_parts(compiled: object, module_type: type) -> tuple[list, list]:
    """The nn.Modules (the FX GraphModule) a compiled graph's function wraps, and the
    non-empty ``constants`` tables on the way (inductor's), found through functions'
    ``__dict__`` (``functools.wraps`` copies the GraphModule's bound methods there) and
    closures, bound methods' ``__self__`` and dynamo/inductor objects' ``__dict__``."""
    modules: list = []
    constants: list = []
    seen: set = set()
    todo = [(compiled, 0)]
    while todo and len(seen) < _MAX_NODES:
        obj, depth = todo.pop()
        if id(obj) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(obj))
        kind = type(obj)
        if issubclass(kind, module_type):
            modules.append(obj)
            continue
        if kind is types.MethodType:
            todo.append((obj.__self__, depth + 1))
            continue
        if kind is types.FunctionType:
            inner = list(obj.__dict__.items())
            for cell in obj.__closure__ or ():
                with contextlib.suppress(ValueError):  # an empty cell
                    inner.append(("", cell.cell_contents))
        elif _machinery(obj) and type(getattr(obj, "__dict__", None)) is dict:
            inner = list(obj.__dict__.items())
        else:
            continue
        for key, value in inner:
            if key == "constants" and type(value) is dict:
                if value and id(value) not in seen:
                    seen.add(id(value))
                    constants.append(value)
            elif type(value) in (types.FunctionType, types.MethodType) or (
                issubclass(type(value), module_type) or _machinery(value)
            ):
                todo.append((value, depth + 1))
    return modules, constants


# ---------------------------------------------------------------- the reset


class CompileReset(NamedTuple):
    """What resetting torch.compile's caches did: how many compiled frames were dropped,
    the bytes of the tensors the compiled graphs held that are gone now (weakrefs), the
    CUDA bytes the allocator no longer has allocated (None without CUDA), and whether the
    CUDA-graph trees were reset too."""

    frames: int
    graph_tensor_bytes: int
    cuda_freed: Optional[int]
    cudagraph_trees: bool

    def __str__(self) -> str:
        text = f"torch._dynamo.reset(): {counted(self.frames, 'compiled frame')} dropped"
        if self.cudagraph_trees:
            text += ", CUDA-graph trees reset"
        freed = [f"tensors held by compiled graphs: {format_bytes(self.graph_tensor_bytes)}"]
        if self.cuda_freed is not None:
            freed.append(f"CUDA allocated: {format_bytes(self.cuda_freed)}")
        return f"{text}; freed {', '.join(freed)} ({RECOMPILE_NOTE})"


def _held_tensors(graphs: list[CompiledGraph], torch) -> dict:
    """storage key -> (bytes, weakrefs to the tensors in it) for the tensors the graphs
    hold: parameters, buffers and tensor attributes of the GraphModules (and of their
    submodules), and inductor's constants."""
    tensor = torch_support.tensor_type(torch)
    held: dict = {}

    def add(value) -> None:
        if tensor is not None and isinstance(value, tensor):
            info = torch_support.array_info(value)
            entry = held.setdefault(info.storage_key, (info.storage_nbytes, []))
            entry[1].append(weakref.ref(value))

    for graph in graphs:
        if type(graph.value) is dict:
            for value in list(graph.value.values()):
                add(value)
            continue
        modules, seen = [graph.value], set()
        while modules and len(seen) < _MAX_NODES:
            module = modules.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            attributes = module.__dict__
            for slot in ("_parameters", "_buffers"):
                for value in list((attributes.get(slot) or {}).values()):
                    add(value)
            for value in list(attributes.values()):
                add(value)
            children = (attributes.get("_modules") or {}).values()
            modules += [child for child in children if child is not None]
    return held


def _cuda_allocated(torch) -> Optional[int]:
    stats = torch_support.allocator_stats(torch)
    return sum(item.allocated for item in stats) if stats else None


def reset_caches(torch, namespace: Optional[dict] = None, cuda_usable: bool = True):
    """``torch._dynamo.reset()`` (and the CUDA-graph trees) when dynamo is imported and has
    compiled something still alive, then ``gc.collect()``; returns a `CompileReset`, or
    None when there was nothing to reset. `cuda_usable` False (a broken context): the CUDA
    figures and the CUDA-graph trees are left alone."""
    dynamo = loaded()
    codes = compiled_codes(dynamo)
    if dynamo is None or not codes:
        return None
    frames = len(codes)
    del codes
    held = _held_tensors(compiled_graphs(namespace), torch)
    cuda = cuda_usable and torch_support.cuda_initialized(torch)
    before = _cuda_allocated(torch) if cuda else None
    dynamo.reset()
    trees = cuda and _reset_cudagraph_trees()
    gc.collect()
    after = _cuda_allocated(torch) if cuda else None
    released = sum(
        nbytes for nbytes, weaks in held.values() if all(weak() is None for weak in weaks)
    )
    cuda_freed = before - after if before is not None and after is not None else None
    return CompileReset(frames, released, cuda_freed, trees)


def _reset_cudagraph_trees() -> bool:
    """Reset inductor's CUDA-graph trees on this thread (they live in thread-local
    storage; torch 2.13's dynamo reset does it too, older ones did not), if their module is
    loaded."""
    trees = sys.modules.get(CUDAGRAPH_TREES)
    reset = getattr(trees, "reset_cudagraph_trees", None)
    if reset is None:
        return False
    reset()
    return True
