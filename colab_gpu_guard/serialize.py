"""Reports as JSON: a dataclass tree to JSON-ready data and back, and its JSON Schema.

A report is a (frozen) dataclass of primitives, Optionals, tuples, NamedTuples (written as
arrays) and other dataclasses."""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Union


def to_data(value: Any) -> Any:
    """A dataclass tree as JSON-ready data: dataclasses to dicts, tuples to lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [to_data(item) for item in value]
    if isinstance(value, dict):
        return {str(key): to_data(item) for key, item in value.items()}
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def from_versioned(kind: Any, data: Any, version: int, wrong: Callable[[Any], str]) -> Any:
    """`from_data` of a report's JSON object whose ``schema_version`` must be `version`;
    `wrong(found)` words the error when it is not."""
    found = data.get("schema_version") if isinstance(data, dict) else None
    if found != version:
        raise ValueError(wrong(found))
    return from_data(kind, data)


def from_data(kind: Any, data: Any) -> Any:
    """Rebuild a value of type `kind` (a dataclass, Optional, tuple[...], primitive) from
    what `to_data` produced. Unknown keys are ignored, missing ones take their defaults."""
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        if not isinstance(data, dict):
            raise ValueError(f"{kind.__name__}: expected an object, got {type(data).__name__}")
        hints = _HINTS.get(kind)
        if hints is None:
            hints = _HINTS[kind] = typing.get_type_hints(kind)
        values = {}
        for f in dataclasses.fields(kind):
            if f.name in data:
                values[f.name] = from_data(hints[f.name], data[f.name])
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValueError(f"{kind.__name__}: missing {f.name!r}")
        return kind(**values)
    if _is_named_tuple(kind):
        hints = _HINTS.get(kind)
        if hints is None:
            hints = _HINTS[kind] = typing.get_type_hints(kind)
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"{kind.__name__}: expected a list, got {type(data).__name__}")
        return kind(*(from_data(hints[name], item) for name, item in zip(kind._fields, data)))
    origin = typing.get_origin(kind)
    if origin is Union:
        options = [a for a in typing.get_args(kind) if a is not type(None)]
        if data is None:
            return None
        if len(options) == 1:
            return from_data(options[0], data)
        for option in options:  # a union of primitives: keep the value if it fits one
            if isinstance(option, type) and isinstance(data, option):
                return data
        raise ValueError(f"{data!r} fits none of {options}")
    if origin is tuple:
        args = typing.get_args(kind)
        if not isinstance(data, (list, tuple)):
            raise ValueError(f"expected a list, got {type(data).__name__}")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_data(args[0], item) for item in data)
        return tuple(from_data(arg, item) for arg, item in zip(args, data))
    if kind is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    if kind in (int, float, str, bool) and not isinstance(data, kind):
        raise ValueError(f"expected {kind.__name__}, got {data!r}")
    return data


def _is_named_tuple(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, tuple) and hasattr(kind, "_fields")


def json_schema(kind: type, title: str) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``to_data(value)`` for a dataclass `kind`, built
    from its fields and type hints; nested dataclasses become ``$defs``."""
    definitions: dict[str, Any] = {}
    _schema_for(kind, definitions)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": title,
        **definitions.pop(kind.__name__),
        "$defs": definitions,
    }


def _schema_for(kind: Any, definitions: dict[str, Any]) -> dict[str, Any]:
    if dataclasses.is_dataclass(kind) and isinstance(kind, type):
        name = kind.__name__
        if name not in definitions:
            definitions[name] = {}  # placeholder against recursion
            hints = typing.get_type_hints(kind)
            fields = dataclasses.fields(kind)
            definitions[name] = {
                "type": "object",
                "description": (kind.__doc__ or name).strip().splitlines()[0],
                "properties": {f.name: _schema_for(hints[f.name], definitions) for f in fields},
                "required": [
                    f.name
                    for f in fields
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                ],
            }
        return {"$ref": f"#/$defs/{name}"}
    if _is_named_tuple(kind):
        hints = typing.get_type_hints(kind)
        return _fixed_array([hints[name] for name in kind._fields], definitions)
    origin = typing.get_origin(kind)
    if origin is Union:
        options = typing.get_args(kind)
        return {"anyOf": [_schema_for(option, definitions) for option in options]}
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": _schema_for(args[0], definitions)}
        return _fixed_array(list(args), definitions)
    simple = {
        type(None): "null",
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
    }
    if kind in simple:
        return {"type": simple[kind]}
    raise TypeError(f"no JSON schema for {kind!r}")


def _fixed_array(kinds: list[Any], definitions: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "array",
        "prefixItems": [_schema_for(kind, definitions) for kind in kinds],
        "minItems": len(kinds),
        "maxItems": len(kinds),
    }
