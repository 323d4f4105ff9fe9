"""Apache Arrow's memory (pyarrow): the buffers of an array, a chunked array (an
Arrow-backed pandas column), a table or a record batch, each buffer a block of its own,
keyed by its address as NumPy's and torch's memory is (so a buffer a NumPy array or tensor
shares is counted once). Read through pyarrow's own descriptors and methods on its own
types (a subclass's code never runs); pyarrow is never imported here."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Optional

from ..frameworks.base import ArrayInfo, storage_key
from .naming import ATTR, DOT, ITEM, Path
from .readers import mro, type_module
from .rows import ROW_FRAMEWORK

FRAMEWORK = "arrow"
_MODULE = "pyarrow.lib"
# pyarrow's classes whose objects hold Arrow data, and how each reaches its buffers
_HOLDERS = ("Array", "ChunkedArray", "Table", "RecordBatch", "Buffer")


def _base(kind: type) -> Optional[str]:
    """Which of pyarrow's data classes `kind` is (or derives from), or None."""
    for base in mro(kind):
        if type_module(base) == _MODULE and base.__name__ in _HOLDERS:
            return base.__name__
    return None


def holds_arrow_data(kind: type) -> bool:
    return _base(kind) is not None


def _own(kind: type, name: str) -> Callable[..., Any]:
    """``name`` as pyarrow's own classes along `kind`'s MRO define it (a subclass's
    override is passed over)."""
    for base in mro(kind):
        if type_module(base) == _MODULE:
            namespace = vars(base)
            if name in namespace:
                return namespace[name]
    raise AttributeError(name)


def _getter(kind: type, name: str) -> Callable[[Any], Any]:
    descriptor = _own(kind, name)
    return lambda obj: descriptor.__get__(obj, kind)


def _buffers(array: Any) -> list[tuple[int, Any]]:
    """(index, buffer) of an Array's buffers (its children's included), None ones left
    out: ``pyarrow.Array.buffers()``."""
    buffers = _own(type(array), "buffers")(array)
    return [(index, buffer) for index, buffer in enumerate(buffers) if buffer is not None]


def buffer_parts(obj: Any, path: Path) -> list[tuple[Path, Any]]:
    """The buffers `obj` (found at `path`) keeps, each with the path a user would type
    (``col.chunks[0].buffers()[1]``)."""
    kind = type(obj)
    base = _base(kind)
    if base == "Buffer":
        return [(path, obj)]
    if base == "Array":
        return [
            (((path, DOT, "buffers()"), ITEM, index), buffer) for index, buffer in _buffers(obj)
        ]
    if base == "ChunkedArray":
        chunks = _getter(kind, "chunks")(obj)
        parts = []
        for number, chunk in enumerate(chunks):
            parts += buffer_parts(chunk, ((path, ATTR, "chunks"), ITEM, number))
        return parts
    if base in ("Table", "RecordBatch"):
        columns = _getter(kind, "columns")(obj)
        parts = []
        for number, column in enumerate(columns):
            parts += buffer_parts(column, ((path, ATTR, "columns"), ITEM, number))
        return parts
    return []


def buffer_info(buffer: Any) -> ArrayInfo:
    """A buffer's metadata: its bytes, keyed by its address (on the host; a buffer in a
    device's memory raises: its holder is named as not looked into)."""
    kind = type(buffer)
    if not _getter(kind, "is_cpu")(buffer):
        raise ValueError("an Arrow buffer outside host memory")
    size = int(_getter(kind, "size")(buffer))
    address = int(_getter(kind, "address")(buffer))
    key = storage_key("cpu", address) if address and size else ("arrow", id(buffer))
    return ArrayInfo((size,), "arrow buffer", "cpu", size, key, size, address or id(buffer))


def loaded() -> bool:
    return sys.modules.get("pyarrow") is not None


def buffers_in_place(
    arrays: list, rows: list[tuple], frameworks: set
) -> Optional[tuple[list, list, list]]:
    """Where Arrow data is among `arrays` (framework "arrow"), the arrays and rows again
    with its buffers in its place (each a block: `buffer_parts`), and the owner of
    each (the Arrow object for a buffer: a new object each time it is read, a buffer
    lives as long as its owner keeps it); None where there is none."""
    if FRAMEWORK not in frameworks:
        return None
    new_arrays, new_rows, owners = [], [], []
    for array, row in zip(arrays, rows):
        if ROW_FRAMEWORK(row) != FRAMEWORK:
            new_arrays.append(array)
            new_rows.append(row)
            owners.append(array)
            continue
        path, holder, root, depth, framework = row
        try:
            parts = buffer_parts(array, path)
        except Exception:  # pyarrow's readers on a user's Arrow object
            parts = []
        for part_path, part in parts:
            new_arrays.append(part)
            new_rows.append((part_path, holder, root, depth, framework))
            owners.append(array)
    return new_arrays, new_rows, owners
