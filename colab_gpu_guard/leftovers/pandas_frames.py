"""pandas frames and series named as a user types them: a frame's columns (``df['a']``,
or ``df[['a', 'd']]`` where pandas keeps columns of one dtype in one block; the parts of an
Arrow or nullable column under ``df['b'].array``), ``df.columns`` and ``df.index``; a
series' ``s.values`` (``s.array``) and ``s.index``, an index's labels ``df.columns.values``
(``.array``) - not ``df._mgr.blocks[0].values`` or ``df.columns._data``. Read through the
interpreter's and pandas' own C-level getters; a frame whose column labels are not plain
strings or numbers keeps the internal names. An extension array of pandas' own class is
recorded with its dtype and shape (a `composites.Composite`: the one place pandas' own
Python properties are read), so that its parts (an Arrow column's buffers, a nullable
column's values and mask) are listed as the one column they are."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

from .composites import Composite
from .naming import ATTR, COLUMN, COLUMNS, ITEM, LABELS, Path
from .readers import (
    Layout,
    instance_dict,
    layout_of,
    own_attribute,
    slot_values,
    type_module,
)
from .visit import Visit

# pandas' block managers: the frame's (a C base class in pandas 2.2 and 3.x) and the series'
MANAGERS = frozenset(
    {
        ("pandas._libs.internals", "BlockManager"),
        ("pandas.core.internals.managers", "SingleBlockManager"),
    }
)
# pandas' Index, of which every index type is a subclass (pandas 3 names its module "pandas")
INDEXES = frozenset({("pandas.core.indexes.base", "Index"), ("pandas", "Index")})
COLUMNS_SHOWN = 3  # labels named where one block holds more columns
_LABEL_TYPES = (str, int)  # labels shown: their repr is the interpreter's own

Visitor = Callable[[Any, Visit], None]
# the modules whose objects a pandas dtype may keep for its name to be pandas' own text
# (a time zone's name is the time-zone library's): another's `str` could be a user's code
_DTYPE_PARTS = frozenset(
    {"builtins", "numpy", "pandas", "pyarrow", "datetime", "zoneinfo", "pytz", "dateutil"}
)


def is_manager(bases: tuple[type, ...]) -> bool:
    """Whether a type (its MRO: `bases`) is one of pandas' block managers."""
    return any((type_module(base), getattr(base, "__qualname__", "")) in MANAGERS for base in bases)


def is_index(bases: tuple[type, ...]) -> bool:
    """Whether a type (its MRO: `bases`) is a pandas Index."""
    return any((type_module(base), getattr(base, "__qualname__", "")) in INDEXES for base in bases)


class PandasWalk:
    """Walks a block manager reached as a frame's or series' ``_mgr``, and an Index."""

    def __init__(self, visit: Visitor, composites: dict[int, Composite]) -> None:
        self.visit = visit
        self.composites = composites  # id(node) -> the extension array found there

    def manager(self, manager: Any, at: Visit) -> None:
        fields = _fields(manager)
        blocks, axes = fields.get("blocks"), fields.get("axes")
        if type(blocks) is not tuple or type(axes) is not list:
            for name, value in fields.items():  # a pandas this module does not know
                self.visit(value, at.child(ATTR, name))
            return
        path = at.path
        if path[1] != ATTR or path[2] != "_mgr":  # a manager held on its own
            self._internal(blocks, axes, at)
            return
        owner = Visit(path[0], at.depth - 1, at.holder, at.root)  # the frame or series
        if len(axes) == 1:  # a series: one block
            for block in blocks:
                values = _read(block, "values")
                at_values = owner.child(ATTR, "values" if _ndarray(values) else "array")
                if not _ndarray(values):
                    self._extension(values, at_values.path, at_values.path)
                self.visit(values, at_values)
            self.visit(axes[0], owner.child(ATTR, "index"))
            return
        labels = _labels(axes[0])
        for number, block in enumerate(blocks):
            node = _columns(labels, _read(_read(block, "_mgr_locs"), "indexer"))
            values = _read(block, "values")
            column = owner.child(*node) if node else _block_visit(at, number)
            if node and not _ndarray(values):  # an extension array (Arrow, nullable ints)
                named = column.path
                column = column.child(ATTR, "array")  # `df['b']` is a Series: its array
                self._extension(values, column.path, named)
            self.visit(values, column)
        self.visit(axes[0], owner.child(ATTR, "columns"))
        self.visit(axes[1], owner.child(ATTR, "index"))

    def index(self, index: Any, at: Visit) -> None:
        """An Index's attributes, its labels' array (``_data``) named as a user reads it:
        ``df.columns.values`` (a NumPy array: the same memory, a read-only view on pandas
        3), ``df.index.array`` (an extension array: dates, Arrow strings). An index
        without one (a ``RangeIndex``, a ``MultiIndex``) keeps its own attribute names."""
        attributes = instance_dict(_layout(type(index)).dict_getter, index)
        if not attributes:
            return
        for name, value in list(dict.items(attributes)):
            if type(name) is not str:
                continue
            if name == "_data" and value is not None:
                labels = at.child(LABELS, "values" if _ndarray(value) else "array")
                if not _ndarray(value):
                    self._extension(value, labels.path, labels.path)
                self.visit(value, labels)
            else:
                self.visit(value, at.child(ATTR, name))

    def _extension(self, values: Any, node: Path, owner: Path) -> None:
        """Record the extension array `values` found at `node`, named by `owner`."""
        facts = _extension_facts(values)
        if facts is not None:
            self.composites[id(node)] = Composite(node, owner, *facts)

    def _internal(self, blocks: tuple, axes: list, at: Visit) -> None:
        for number, block in enumerate(blocks):
            self.visit(_read(block, "values"), _block_visit(at, number))
        self.visit(axes, at.child(ATTR, "axes"))


# pandas' own classes (checked before they are kept): their layouts and descriptors, read
# once a process (a scan meets thousands of frames)
_LAYOUTS: dict[type, Layout] = {}
_DESCRIPTORS: dict[tuple[type, str], Any] = {}
_UNKNOWN = object()


def _layout(kind: type) -> Layout:
    layout = _LAYOUTS.get(kind)
    if layout is None:
        layout = _LAYOUTS[kind] = layout_of(kind)
    return layout


def _pandas(kind: type) -> bool:
    """A class of pandas' own (``pandas.Index`` says its module is ``pandas``)."""
    return type_module(kind).partition(".")[0] == "pandas"


def _ndarray(values: Any) -> bool:
    """A NumPy array (a block of one dtype), not one of pandas' extension arrays: named
    `s.values`, where an extension array is `s.array` (`s.values` converts some)."""
    kind = type(values)
    return type_module(kind) == "numpy" and kind.__name__ == "ndarray"


def _extension_facts(values: Any) -> Optional[tuple[str, tuple[int, ...]]]:
    """The dtype ``df.dtypes`` shows for an extension array of pandas' own, and its shape,
    read with pandas' own properties (``str`` of pandas' or NumPy's dtype: "str", "Int64",
    "category", "datetime64[us, UTC]"); None for another library's extension type (its
    code never runs), or where a dtype keeps an object of another's (a user's time zone).
    Nothing read is kept: a categorical's dtype keeps its categories alive."""
    kind = type(values)
    if not _pandas(kind):
        return None
    try:
        dtype = own_attribute(kind, "dtype").__get__(values, kind)
        shape = tuple(map(int, own_attribute(kind, "shape").__get__(values, kind)))
        text = _dtype_text(dtype)
    except Exception:  # a pandas this module does not know
        return None
    return None if text is None else (text, shape)


def _dtype_text(dtype: Any) -> Optional[str]:
    """``str`` of NumPy's or pandas' own dtype, None for another's or one keeping another
    library's object."""
    dtype_kind = type(dtype)
    if type_module(dtype_kind).partition(".")[0] == "numpy":
        return str(dtype)
    if not _pandas(dtype_kind):
        return None
    fields = instance_dict(_layout(dtype_kind).dict_getter, dtype) or {}
    if any(
        type_module(type(value)).partition(".")[0] not in _DTYPE_PARTS for value in fields.values()
    ):
        return None
    return str(dtype)


def _block_visit(at: Visit, number: int) -> Visit:
    """``<manager>.blocks[N].values``: the internal name, where no column name is known."""
    return at.child(ATTR, "blocks").child(ITEM, number).child(ATTR, "values")


def _fields(manager: Any) -> dict[str, Any]:
    """The manager's attributes and C fields (``blocks``, ``axes``), by the interpreter's
    and Cython's own getters."""
    layout = _layout(type(manager))
    fields = dict(slot_values(layout.slots, manager))
    attributes = instance_dict(layout.dict_getter, manager)
    if attributes:
        for name in ("blocks", "axes"):
            if name in attributes:
                fields.setdefault(name, attributes[name])
    return fields


def _read(obj: Any, name: str) -> Any:
    """A field pandas' Cython classes define (``Block.values``, ``Block._mgr_locs``,
    ``BlockPlacement.indexer``), through its descriptor on the class; None where absent."""
    if obj is None:
        return None
    kind = type(obj)
    if not _pandas(kind):
        return None
    descriptor = _DESCRIPTORS.get((kind, name), _UNKNOWN)
    if descriptor is _UNKNOWN:
        descriptor = _DESCRIPTORS[kind, name] = own_attribute(kind, name)
    if descriptor is None:
        return None
    try:
        return descriptor.__get__(obj, kind)
    except Exception:  # a pandas this module does not know
        return None


def _labels(columns: Any) -> Optional[list]:
    """A frame's column labels where each is a plain string or number, read from the
    index's own storage (its ``range``, its NumPy array, its Arrow strings): no pandas code
    runs. Labels of another type, a MultiIndex: None, and the internal names stay."""
    if not _pandas(type(columns)):
        return None
    attributes = instance_dict(_layout(type(columns)).dict_getter, columns) or {}
    stored = attributes.get("_range")
    if type(stored) is range:
        return list(stored)
    data = attributes.get("_data")
    kind = type(data)
    try:
        if type_module(kind) == "numpy" and kind.__name__ == "ndarray":
            labels = kind.tolist(data)
        elif _pandas(kind) and kind.__name__ == "ArrowStringArray":
            chunked = (instance_dict(_layout(kind).dict_getter, data) or {}).get("_pa_array")
            if not type_module(type(chunked)).startswith("pyarrow"):
                return None
            labels = chunked.to_pylist()
        else:
            return None
    except Exception:  # an index this module does not know
        return None
    if type(labels) is not list or not all(type(label) in _LABEL_TYPES for label in labels):
        return None
    return labels


def _columns(labels: Optional[list], indexer: Any) -> Optional[tuple[int, Any]]:
    """The path node naming a block's columns: ``(COLUMN, 'a')`` for ``df['a']``,
    ``(COLUMNS, "['a', 'd']")`` for ``df[['a', 'd']]``; None where unknown."""
    if labels is None:
        return None
    try:
        if type(indexer) is slice:
            positions = list(range(*indexer.indices(len(labels))))
        else:
            positions = [int(position) for position in indexer]
        names = [labels[position] for position in positions]
    except Exception:  # an indexer of another form
        return None
    if not names:
        return None
    if len(names) == 1:
        return COLUMN, names[0]
    shown = ", ".join(map(repr, names[:COLUMNS_SHOWN]))
    more = f", +{len(names) - COLUMNS_SHOWN} more" if len(names) > COLUMNS_SHOWN else ""
    return COLUMNS, f"[{shown}{more}]"
