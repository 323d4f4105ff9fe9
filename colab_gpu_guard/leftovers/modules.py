"""Where an ``nn.Module``'s tensors are, and how the walk names them.

A module keeps its parameters, buffers and submodules in plain dicts, named as
``named_parameters()`` names them (``model.0.weight``); its hooks and other attributes are
walked as an object's. A TorchScript module (``torch.jit.script`` / ``torch.jit.trace``)
keeps them in its C++ module, behind wrappers (``torch.jit._script``'s
``OrderedDictWrapper`` over a ``torch.ParameterDict`` / ``torch.BufferDict`` binding, and
``OrderedModuleDict`` with the Python submodules in ``_python_modules``); a traced module
forwards to its ``_actual_script_module``. Those tables are read through torch's own
bindings (``items()`` of the C++ dict: torch's code, never a user's), so a traced model is
not "no arrays held". A torch ``ScriptObject`` that is not a module (a dynamically
quantized layer's packed weights) holds tensors no binding lists (``kinds``: OPAQUE):
`opaque_note` says so.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from . import holders
from .naming import ATTR, DOT
from .readers import instance_dict, layout_of, slot_values, type_module

_TABLES = ("_parameters", "_buffers", "_modules")
_SCRIPT = "torch.jit._script"
TRANSPARENT = "_actual_script_module"  # a traced module's: walked as the module itself


def _binding_items(wrapper: Any, binding_names: tuple[str, ...]) -> Optional[list]:
    """(name, value) of the C++ dict behind a TorchScript ``OrderedDictWrapper``."""
    attributes = instance_dict(layout_of(type(wrapper)).dict_getter, wrapper)
    table = dict.get(attributes, "_c") if attributes else None
    torch = sys.modules.get("torch")
    bindings = tuple(getattr(torch, name, None) for name in binding_names)
    if table is None or type(table) not in bindings:
        return None
    try:
        items = table.items()
    except Exception:
        return None
    return [item for item in items if type(item) is tuple and len(item) == 2]


def table_items(table: Any, slot: str) -> Optional[list]:
    """(name, value) of a module's ``_parameters``, ``_buffers`` or ``_modules`` table
    when it is TorchScript's wrapper (None for anything else: a plain dict is read by the
    walker)."""
    kind = type(table)
    if type_module(kind) != _SCRIPT:
        return None
    if kind.__name__ == "OrderedDictWrapper" and slot in ("_parameters", "_buffers"):
        return _binding_items(table, ("ParameterDict", "BufferDict"))
    if kind.__name__ == "OrderedModuleDict" and slot == "_modules":
        attributes = instance_dict(layout_of(kind).dict_getter, table)
        modules = dict.get(attributes, "_python_modules") if attributes else None
        return list(dict.items(modules)) if type(modules) is dict else None
    return None


def opaque_note(names: list[str]) -> str:
    """The scan's note on the ScriptObjects it met (their names, a few)."""
    count = len(names)
    shown = ", ".join(f"`{name}`" for name in names[:3])
    more = f" (+{count - 3} more)" if count > 3 else ""
    which = "1 TorchScript object" if count == 1 else f"{count} TorchScript objects"
    return (
        f"not counted: memory inside {which} (torch.ScriptObject: C++ state, such as the "
        f"packed weights of a dynamically quantized layer) the scan cannot look into: "
        f"{shown}{more}"
    )


def walk_module(walker, module, what, path, depth, holder, root) -> None:
    """Parameters, buffers and submodules named as ``named_parameters()`` names them
    (module nesting does not count against the depth limit), then the module's hooks and
    other attributes."""
    attributes = instance_dict(what.layout.dict_getter, module) or {}
    for slot in _TABLES:
        table = attributes.get(slot)
        if isinstance(table, dict):
            items = list(dict.items(table))
        else:  # a TorchScript module's tables
            items = table_items(table, slot) or []
        for name, value in items:
            if value is not None:
                walker.visit(value, (path, DOT, name), depth, holder, root)
    rest = {}
    for name, value in list(dict.items(attributes)):
        if name in _TABLES:
            continue
        if name == TRANSPARENT:  # a traced module's script module: the module itself
            walker.visit(value, path, depth, holder, root)
            continue
        if type(name) is str and name.startswith("_") and name.endswith("hooks"):
            if isinstance(value, dict):  # "_forward_pre_hooks" -> "forward pre hook"
                label = name.strip("_")[:-1].replace("_", " ")
                holders.walk_hooks(walker, value, label, path, depth + 1, holder, root)
            continue
        rest[name] = value
    walker.walk_attributes(rest, path, depth + 1, holder, root)
    for name, value in slot_values(what.layout.slots, module):
        walker.visit(value, (path, ATTR, name), depth + 1, holder, root)
