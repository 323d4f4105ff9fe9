"""Where an ``nn.Module``'s tensors are (plain or TorchScript tables) and how the walk names
them (``model.0.weight``, ``model.<forward hook 0>``). See docs/leftovers.md."""

from __future__ import annotations

import sys
from typing import Any, Optional

from ..units import counted
from .holders import AttributesWalk, Visitor
from .kinds import ATOMIC, Kind
from .naming import ATTR, DOT, HELD
from .readers import instance_dict, layout_of, slot_values, type_module
from .visit import Visit

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
    except Exception:  # torch's C++ dict binding of a user's TorchScript module
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
    which = counted(count, "TorchScript object")
    return (
        f"not counted: memory inside {which} (torch.ScriptObject: C++ state, such as the "
        f"packed weights of a dynamically quantized layer) the scan cannot look into: "
        f"{shown}{more}"
    )


class ModuleWalk:
    """An ``nn.Module``'s parameters, buffers and submodules, named as
    ``named_parameters()`` names them (module nesting does not count against the depth
    limit), then its hooks (``model.<forward hook 0>``) and other attributes."""

    def __init__(self, visit: Visitor, walk_attributes: AttributesWalk) -> None:
        self.visit = visit
        self.walk_attributes = walk_attributes

    def walk(self, module, what: Kind, at: Visit) -> None:
        visit, layout = self.visit, what.layout
        assert layout is not None  # a module is an object with a __dict__ (`kinds`)
        attributes = instance_dict(layout.dict_getter, module) or {}
        for slot in _TABLES:
            table = attributes.get(slot)
            if isinstance(table, dict):
                items = list(dict.items(table))
            else:  # a TorchScript module's tables
                items = table_items(table, slot) or []
            for name, value in items:
                if value is not None:
                    visit(value, at.within(DOT, name))
        rest = {}
        for name, value in list(dict.items(attributes)):
            if name in _TABLES:
                continue
            if name == TRANSPARENT:  # a traced module's script module: the module itself
                visit(value, at)
                continue
            if type(name) is str and name.startswith("_") and name.endswith("hooks"):
                if isinstance(value, dict):  # "_forward_pre_hooks" -> "forward pre hook"
                    self._hooks(value, name.strip("_")[:-1].replace("_", " "), at)
                continue
            rest[name] = value
        self.walk_attributes(rest, at)
        for name, value in slot_values(layout.slots, module):
            visit(value, at.child(ATTR, name))

    def _hooks(self, hooks: dict, label: str, at: Visit) -> None:
        """The hooks kept in one of a module's ``_*hooks`` dicts, by position: functions,
        partials, bound methods, callable objects."""
        for index, hook in enumerate(list(dict.values(hooks))):
            if type(hook) not in ATOMIC:
                self.visit(hook, at.child(HELD, f"{label} {index}"))
