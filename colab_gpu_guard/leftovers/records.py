"""A leftovers scan's entries: `Leftover` (one block of array memory and who holds it) and
`DeviceGap` (found vs allocated on a CUDA device); the list of them is `leftover_list`."""

from __future__ import annotations

import operator
from dataclasses import dataclass, fields
from typing import Any, NamedTuple, Optional, Union

from ..frameworks.base import ArrayInfo
from ..frameworks.torch_arrays import SPARSE_LAYOUTS
from ..units import HOLDERS, OTHER, escape_text, format_bytes, shape_text
from .graphs import Graph
from .root_refs import RootRef


@dataclass(frozen=True)
class Leftover:
    """One block of array memory still alive, and who holds it.

    ``nbytes`` is the memory the entry keeps alive: the memory (storage) the array lives
    in, counted once however many views and names reach it, plus ``graph_nbytes``: what
    its autograd graph saved (a tensor with a ``grad_fn``: ``graph_tensors`` storages no
    name reaches, each counted once; ``graph_shared_nbytes`` of them are also held by other
    entries' graphs). ``array_nbytes`` is what the named array itself spans;
    ``views_nbytes`` what all the names listed use of the memory together (each byte once:
    `extents`; None: not known), so that a slice keeping its whole base alive
    (``row = big[0]``, a loaded checkpoint's slice) says so (`view_text`).
    ``shape`` is that of what ``name`` gives (a pandas column's, not its block's).
    ``shared_with`` lists the other names reaching the same memory (views, aliases, the
    optimizer's reference to a parameter), at most 16 and then a '(+N more)' entry; not
    a library's second reference inside the same variable (pandas' caches in ``df``).
    ``root`` is the group the entry is listed under (None in a document written before
    it was kept), ``shared_roots`` the groups of the other names (those of every name
    reaching the memory, not only the listed ones). ``kind`` says what tensor it is where
    ``dtype`` alone does not: torch's name of its layout (``sparse_coo``, ``sparse_csr``,
    ``sparse_csc``, ``sparse_bsr``, ``sparse_bsc``, a nested tensor's ``jagged``) or a
    tensor subclass's class name (``DTensor``, a quantized weight's); '' for any other.
    """

    name: str
    holder: str
    shape: tuple[int, ...]
    dtype: str
    device: str
    nbytes: int
    storage_id: int
    shared_with: tuple[str, ...] = ()
    framework: str = ""
    array_nbytes: int = 0
    holders: tuple[str, ...] = ()
    graph_nbytes: int = 0
    graph_tensors: int = 0
    graph_shared_nbytes: int = 0
    views_nbytes: Optional[int] = None
    graph_shared_with: tuple[str, ...] = ()
    graph_counted_under: tuple[str, ...] = ()
    graph_leaves: int = 0
    root: Optional[RootRef] = None
    shared_roots: tuple[RootRef, ...] = ()
    kind: str = ""

    def __str__(self) -> str:
        """The entry on one line: what it is, then what else names it, its autograd graph
        and its view's note."""
        head, more = self.text_parts()
        return escape_text("  ".join([head, *more]))  # the notebook's names: escaped

    def text_parts(self) -> tuple[str, list[str]]:
        """What it is ("2 MiB  x  float32 [512x512] cpu  (user variable)"), and what the
        views put under it, each on a line of its own: the other names that reach it
        ("also: b, Out[3]"), its autograd graph, its view's note. Not escaped."""
        head = (
            f"{format_bytes(self.nbytes):>10}  {self.name}  {self.type_text} "
            f"{shape_text(self.shape)} {self.device}  ({self.held_as})"
        )
        more = [f"also: {', '.join(self.shared_with)}"] if self.shared_with else []
        if self.graph_tensors:
            more.append(self.graph().text())
        view = self.view_text()
        if view:
            more.append(view)
        return head, more

    @property
    def type_text(self) -> str:
        """Its dtype and, where it has one, its kind: ``float32``, ``float32 sparse_csr``."""
        return f"{self.dtype} {self.kind}" if self.kind else self.dtype

    @property
    def held_as(self) -> str:
        """Who holds it, in words: its holder, or, for a root that is none of the notebook's
        own names, output or frames (``other``), what that root is (an exception, a logger,
        a module global, a finalizer, a thread, a compiled graph)."""
        if self.holder == OTHER and self.root is not None:
            return self.root.kind
        return self.holder

    @property
    def unused_nbytes(self) -> int:
        """Bytes of the memory kept alive that no name listed uses: worth a note when at
        least `VIEW_NOTE_MIN` and at least half of it (0 otherwise)."""
        if self.views_nbytes is None:
            return 0
        storage = self.nbytes - self.graph_nbytes
        unused = storage - self.views_nbytes
        return unused if unused >= VIEW_NOTE_MIN and unused * 2 >= storage else 0

    def view_summary(self) -> str:
        """'uses 40 B of 3.81 MiB' where `view_text` has a note; '' otherwise."""
        if not self.unused_nbytes:
            return ""
        storage = self.nbytes - self.graph_nbytes
        return f"uses {format_bytes(self.views_nbytes or 0)} of {format_bytes(storage)}"

    def view_text(self) -> str:
        """'view: uses 40 B of the 3.81 MiB it keeps alive (...)', where the names use at
        most half of the memory they keep alive; '' otherwise."""
        if not self.unused_nbytes:
            return ""
        used = format_bytes(self.views_nbytes or 0)
        storage = format_bytes(self.nbytes - self.graph_nbytes)
        copy = _COPY_METHODS.get(self.framework, "copy")
        if self.kind in SPARSE_LAYOUTS:  # its clone keeps only what its components use
            return (
                f"view: uses {used} of the {storage} it keeps alive (keep {self.name}.{copy}(): "
                f"it copies only what {self.name} uses)"
            )
        if self.shared_with:
            return (
                f"view: these names use {used} of the {storage} they keep alive (.{copy}() "
                f"the parts you need, e.g. {self.name}.{copy}(), and drop these names)"
            )
        return (
            f"view: uses {used} of the {storage} it keeps alive (keep {self.name}.{copy}(): "
            "it copies only this part)"
        )

    def graph(self) -> Graph:
        """Its autograd graph's figures: the entry's ``graph_*`` fields."""
        return Graph(*_GRAPH_VALUES(self))

    def to_dict(self) -> dict[str, Any]:
        """``dataclasses.asdict``'s dict (its fields hold only plain values and tuples of
        them), without its recursion: a list may hold 10^6 entries."""
        return dict(zip(_LEFTOVER_FIELDS, _LEFTOVER_VALUES(self)))


_COPY_METHODS = {"torch": "clone"}  # the method that copies a view's part (NumPy, CuPy: copy)
VIEW_NOTE_MIN = 64 * 2**10  # a view's unused memory worth a note
_LEFTOVER_FIELDS = tuple(item.name for item in fields(Leftover))
_LEFTOVER_VALUES = operator.attrgetter(*_LEFTOVER_FIELDS)
_HOLDER_TUPLES = {holder: (holder,) for holder in HOLDERS}
# an entry's field for each of its graph's: `graph_tensors` for `Graph.tensors`, ...
_GRAPH_FIELDS = tuple(f"graph_{name}" for name in Graph._fields)
_GRAPH_VALUES = operator.attrgetter(*_GRAPH_FIELDS)
_NEW = object.__new__
OWN_BYTES: Any = object()  # `leftover_of`'s views_nbytes: the array's own bytes


def leftover_of(
    name: str,
    holder: str,
    info: ArrayInfo,
    framework: str,
    shared_with: tuple[str, ...] = (),
    holders: tuple[str, ...] = (),
    views_nbytes: Union[int, None, object] = OWN_BYTES,
    root: Optional[RootRef] = None,
    shared_roots: tuple[RootRef, ...] = (),
    kind: str = "",
) -> Leftover:
    """The entry for an array's storage, named ``name`` and held by ``holder``: how a scan
    makes every `Leftover` (``views_nbytes``: the array's own bytes unless given; None:
    not known). It
    skips the frozen dataclass's per-field ``object.__setattr__`` (a scan makes one per
    storage: 10^5 of them must stay cheap)."""
    shape, dtype, device, nbytes, _storage_key, storage_nbytes, storage_id = info
    item = _NEW(Leftover)
    item.__dict__.update(
        {
            "name": name,
            "holder": holder,
            "shape": tuple(shape),
            "dtype": dtype,
            "device": device,
            "nbytes": storage_nbytes,
            "storage_id": storage_id,
            "shared_with": shared_with,
            "framework": framework,
            "array_nbytes": nbytes,
            "holders": holders or _HOLDER_TUPLES.get(holder) or (holder,),
            "views_nbytes": nbytes if views_nbytes is OWN_BYTES else views_nbytes,
            "root": root,
            "shared_roots": shared_roots,
            "kind": kind,
        }
    )
    return item


def with_graph(item: Leftover, graph: Graph) -> Leftover:
    """The entry, keeping its autograd graph's memory too (a new entry)."""
    made = _NEW(Leftover)
    made.__dict__.update(item.__dict__)
    made.__dict__.update(zip(_GRAPH_FIELDS, graph), nbytes=item.nbytes + graph.nbytes)
    return made


@dataclass(frozen=True)
class DeviceGap:
    """Array bytes found on a CUDA device vs what torch's allocator says is allocated."""

    device: str
    found: int
    allocated: int

    @property
    def gap(self) -> int:
        return self.allocated - self.found

    def __str__(self) -> str:
        return (
            f"{self.device}: {format_bytes(self.found)} found, torch allocated "
            f"{format_bytes(self.allocated)}, gap {format_bytes(self.gap)} "
            "(held by nothing found here: autograd graphs, C++ references, allocator rounding)"
        )


class Unseen(NamedTuple):
    """A holder the scan met but could not look into (a cuDF frame, Arrow data: memory in
    C++ buffers no Python object shows): its name as a user types it, and its type."""

    name: str
    type_name: str

    def __str__(self) -> str:
        return escape_text(f"`{self.name}` ({self.type_name})")


UNSEEN_SHOWN = 3  # holders not looked into, named in a note


class Unread(NamedTuple):
    """What a scan met but could not count whole, with the root (`rows.Row`'s) that
    reached each: holders not looked into and NumPy arrays of Python objects (by name)."""

    unseen: tuple[tuple[Any, Unseen], ...] = ()
    object_arrays: tuple[tuple[Any, str], ...] = ()

    def kept(self, dropped: Any) -> Unread:
        """Those reached by a root other than the `dropped` ones (root keys)."""
        return Unread(
            tuple(item for item in self.unseen if item[0] not in dropped),
            tuple(item for item in self.object_arrays if item[0] not in dropped),
        )

    def list_fields(self) -> dict[str, tuple]:
        """`LeftoverList`'s ``unseen`` and ``object_arrays``."""
        return {
            "unseen": tuple(dict.fromkeys(item for _root, item in self.unseen)),
            "object_arrays": tuple(dict.fromkeys(name for _root, name in self.object_arrays)),
        }


def unseen_note(unseen: tuple[Unseen, ...]) -> str:
    """'not looked into: `gdf` (cudf.core.dataframe.DataFrame): ...' ('' for none)."""
    if not unseen:
        return ""
    shown = ", ".join(map(str, unseen[:UNSEEN_SHOWN]))
    more = f" (+{len(unseen) - UNSEEN_SHOWN} more)" if len(unseen) > UNSEEN_SHOWN else ""
    its = "its" if len(unseen) == 1 else "their"
    return (
        f"not looked into: {shown}{more}: {its} memory is kept where the scan cannot read it "
        "(buffers of a library whose arrays it does not know); not counted"
    )


def object_arrays_note(names: list[str]) -> str:
    """The note on NumPy arrays of Python objects (an object or string column): what
    their bytes count."""
    shown = ", ".join(f"`{name}`" for name in names[:UNSEEN_SHOWN])
    more = f" (+{len(names) - UNSEEN_SHOWN} more)" if len(names) > UNSEEN_SHOWN else ""
    return (
        f"NumPy arrays of Python objects ({shown}{more}, e.g. a pandas object or string "
        "column) count their pointers, 8 bytes an item, not the Python objects they point "
        "to (arrays among those are listed on their own)"
    )
