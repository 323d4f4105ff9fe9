"""The list's entries: one block of memory per storage, in the order each storage was
first reached, and the `Leftover` for each, made when it is read."""

from __future__ import annotations

import collections
import itertools
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, NamedTuple, Optional, Union

from ..frameworks.base import ArrayInfo
from ..units import HOLDERS
from .composites import PANDAS_PARTS, PART_FRAMEWORKS, Composite, composite_of
from .extents import Layout
from .found import Found, Ref
from .graphs import SHARERS_SHOWN, Graph, named_few
from .groups import Blocks as GroupColumns
from .naming import (
    COLUMN,
    COLUMNS,
    ITEM,
    MAX_SHARED_NAMES,
    Path,
    PathNames,
    rank,
    shared_names,
    shown_shape,
    through_private_attribute,
)
from .records import Leftover, leftover_of, with_graph
from .root_refs import RootRef
from .rows import ROW_FRAMEWORK, ROW_HOLDER, ROW_PATH, Items
from .tally import Groups, root_labels, root_of_path, root_of_row

PANDAS_COLUMNS = (COLUMN, COLUMNS)
_UNKNOWN: Any = object()


class Part(NamedTuple):
    """One block of a composite, as `Leftover` has it (read off the block's row, or its entry
    where several names reach it): who holds it, where it is and its bytes."""

    holder: str
    holders: tuple[str, ...]
    device: str
    storage_id: int
    framework: str
    nbytes: int
    array_nbytes: int
    views_nbytes: Optional[int]  # None: not known (`views_nbytes`)


def leftover_for(
    names: PathNames, refs: list[Ref], groups: Groups, layouts: Mapping[Hashable, Layout]
) -> Leftover:
    """The entry of a block reached by ``refs``: named by the first by `rank`, the other
    names in ``shared_with``, every holder in ``holders``, the group of each root reaching
    it (`groups`) in ``root`` and ``shared_roots``, what they use of it together in
    ``views_nbytes`` (`layouts`: where they lie, `Found.read_extents`)."""
    if len(refs) == 1:
        ref = refs[0]
        root = root_of_path(ref.path, ref.holder, groups)
        info = as_named(ref.path, ref.info)
        return leftover_of(names.name_of(ref.path), ref.holder, info, ref.framework, root=root)
    refs = sorted(refs, key=rank)
    primary = refs[0]
    roots = [root_of_path(ref.path, ref.holder, groups) for ref in refs]
    # a library's own second reference inside the same variable (pandas 2.2's
    # `df._item_cache['a'].values`, an index's `df.columns._cache['_engine']`) goes with
    # it: not named beside it
    named = [
        ref
        for ref, root in zip(refs, roots)
        if ref is primary or root != roots[0] or not through_private_attribute(ref.path)
    ]
    name, others = shared_names(names.name_of, named)
    holders = tuple(h for h in HOLDERS if any(ref.holder == h for ref in refs))
    layout = layouts.get(primary.info.storage_key)
    if layout is not None:  # what they use together, each byte once
        views = layout.used()
        views = None if views is None else min(views, primary.info.storage_nbytes)
    else:  # each array once
        views = sum({ref.ident: ref.info.nbytes for ref in refs}.values())
    return leftover_of(
        name,
        primary.holder,
        as_named(primary.path, primary.info),
        primary.framework,
        others,
        holders,
        views,
        roots[0],
        tuple(dict.fromkeys(root for root in roots[1:] if root != roots[0])),
    )


def as_named(path: Path, info: ArrayInfo) -> ArrayInfo:
    """The array's facts, with the shape of what `path` names (`naming.shown_shape`: a
    pandas block's columns are its rows)."""
    if type(path) is tuple and path[1] in PANDAS_COLUMNS:
        return info._replace(shape=shown_shape(path, info.shape))
    return info


class Blocks:
    """One block of memory per storage, in the order each storage was first reached: the
    columns the list is filtered, sorted and totalled by, and ``entry(i)`` for the entry of
    the i-th block in ``order``.

    ``entry(i)`` gives what `leftover_for` gives for the storage's references; a storage
    reached once (the common case) needs no Ref, and its entry and name are made from its
    row when read (the row's path and metadata were taken during the scan).
    """

    def __init__(self, found: Found, names: PathNames, groups: Groups) -> None:
        rows = found.rows
        self.rows, self.found = rows, found
        self.names = names  # names paths on demand; it holds no array
        self.groups = groups  # the group of each root (`Walker.groups`)
        self.shared: dict[int, Leftover] = {}  # block -> its entry, made now
        self.order: Sequence[int] = []  # blocks in the order of the list
        keys = self.keys = found.keys
        self.graph_of: dict[int, Graph] = {}  # block -> its autograd graph (add_graphs)
        self._graph_block: dict = {}  # a graph owner's storage key -> its block
        self._sharing: Optional[Callable] = None  # `Graphs.sharing`, once graphs are added
        # a user variable -> the rows it reaches through containers another root reached
        # first (``b = {'x': a}``: `b` reaches what is listed under `a`)
        self.aliased: dict[str, list[int]] = {}
        self.row_of: Union[range, list[int]]
        # a storage key -> the key of the block it is listed in (a composite's part)
        self._listed_in: dict = {}
        if found.distinct_storages() or len(dict.fromkeys(keys)) == len(keys):
            self.row_of = range(len(rows))
            self.sizes: list[int] = list(found.storage_nbytes)
            self.holders: list[str] = found.row_values(ROW_HOLDER)
            self.devices: list[str] = found.devices
            if found.composites:
                self._merge_composites(found.composites, {})
            return
        counts = collections.Counter(keys)
        refs = found.refs
        by_key: dict = {}
        for index, key in enumerate(keys):
            if counts[key] > 1:
                by_key.setdefault(key, []).append(refs[index])
        self.row_of, self.sizes, self.holders, self.devices = [], [], [], []
        sizes, devices = found.storage_nbytes, found.devices
        reached: dict[int, list[Ref]] = {}  # a shared block -> its references
        for index, key in enumerate(keys):
            if counts[key] > 1:
                reaching = by_key.pop(key, None)
                if reaching is None:
                    continue  # a later reference to a storage already listed
                reached[len(self.row_of)] = reaching
                item = self.shared[len(self.row_of)] = leftover_for(
                    names, reaching, groups, found.layouts
                )
                size, holder, device = item.nbytes, item.holder, item.device
            else:
                size, holder, device = sizes[index], ROW_HOLDER(rows[index]), devices[index]
            self.row_of.append(index)
            self.sizes.append(size)
            self.holders.append(holder)
            self.devices.append(device)
        if found.composites:
            self._merge_composites(found.composites, reached)

    def _merge_composites(self, composites: dict[int, Composite], reached: dict) -> None:
        """List the blocks of one pandas column or tensor of tensors as one entry, named as
        the column (``df['b']``, ``s.array``) or the tensor, with its dtype and shape as
        pandas or torch show them: an Arrow column's buffers, a nullable column's values
        and mask, a categorical's codes and categories, a sparse tensor's indices and
        values, a wrapper subclass's inner tensors (and its own 0-byte block). Each block
        is still a storage counted once (a block another name shares is listed with the
        composite and names it), only listed together.
        `reached`: the references of each block reached more than once."""
        rows = self.rows
        merged: dict[int, list[int]] = {}  # id(the composite's node) -> its blocks
        # id(a path's parent) -> the composite it is in: a composite's parts share their
        # parents (`.chunks[0]` for an Arrow chunk's buffers), an array row is no
        # composite's node
        in_composite: dict[int, Optional[Composite]] = {}
        # a tensor is a part only where the scan met a sparse tensor or a wrapper subclass
        frameworks = PART_FRAMEWORKS if self.found.whole_keys else PANDAS_PARTS
        for block, index in enumerate(self.row_of):
            refs = reached.get(block)
            if refs is not None:
                primary = min(refs, key=rank)
                path, framework = primary.path, primary.framework
            else:
                path, framework = ROW_PATH(rows[index]), ROW_FRAMEWORK(rows[index])
            if framework not in frameworks or type(path) is Items:
                continue
            parent = id(path[0])
            composite = in_composite.get(parent, _UNKNOWN)
            if composite is _UNKNOWN:
                composite = in_composite[parent] = composite_of(path[0], composites)
            if composite is None:  # the row may be a composite's own: a wrapper subclass
                own = composites.get(id(path))
                composite = own if own is not None and own.node is path else None
            if composite is not None:
                merged.setdefault(id(composite.node), []).append(block)
        if not merged:
            return
        listed_in: dict[int, int] = {}  # a block -> the block it is listed in
        for ident, blocks in merged.items():
            parts = [self._part(block) for block in blocks]
            refs = [ref for block in blocks for ref in reached.get(block, ())]
            entry = composite_entry(
                composites[ident], parts, refs, composites, self.names, self.groups
            )
            first = blocks[0]
            self.shared[first] = entry
            self.sizes[first] = entry.nbytes
            for block in blocks[1:]:
                listed_in[block] = first
        keys, row_of = self.keys, self.row_of
        for block, first in listed_in.items():
            self._listed_in[keys[row_of[block]]] = keys[row_of[first]]
        kept = [block not in listed_in for block in range(len(row_of))]
        renumbered = dict(zip(itertools.compress(range(len(row_of)), kept), itertools.count()))
        self.row_of = list(itertools.compress(row_of, kept))
        self.sizes = list(itertools.compress(self.sizes, kept))
        self.holders = list(itertools.compress(self.holders, kept))
        self.devices = list(itertools.compress(self.devices, kept))
        self.shared = {
            renumbered[block]: item for block, item in self.shared.items() if block in renumbered
        }

    def _part(self, block: int) -> Part:
        """Block `block` as a part of a composite (`composite_entry`)."""
        item = self.shared.get(block)
        if item is not None:
            return Part(
                item.holder,
                item.holders,
                item.device,
                item.storage_id,
                item.framework,
                item.nbytes,
                item.array_nbytes,
                item.views_nbytes,
            )
        index = self.row_of[block]
        row = self.rows[index]
        info = self.found.info(index)
        holder = ROW_HOLDER(row)
        return Part(
            holder,
            (holder,),
            info.device,
            info.storage_id,
            ROW_FRAMEWORK(row),
            self.sizes[block],
            info.nbytes,
            info.nbytes,
        )

    def add_graphs(self, by_key: dict, sharing: Callable) -> None:
        """Each block's autograd graph (storage key -> `Graph`: `Graphs.count`), counted in
        its size; ``sharing``: `Graphs.sharing`, to name the graphs that share memory."""
        keys, sizes = self.keys, self.sizes
        for block, index in enumerate(self.row_of):
            graph = by_key.get(keys[index])
            if graph is not None:
                self.graph_of[block] = graph
                self._graph_block[keys[index]] = block
                sizes[block] += graph.nbytes
        self._sharing = sharing

    def add_aliases(self, rows_by_group: dict) -> None:
        """The rows each group reaches through another root's containers
        (`reach.alias_rows` over `Walker.alias_groups`: group name -> rows)."""
        for name, rows in rows_by_group.items():
            if rows:
                self.aliased[name] = rows

    def entry_with_graph(self, position: int) -> Leftover:
        """`entry`, with the block's autograd graph when it has one (`add_graphs`), naming
        the other entries whose graphs share its memory."""
        item = self.entry(position)
        block = self.order[position]
        graph = self.graph_of.get(block)
        if graph is None:
            return item
        if graph.shared_nbytes and self._sharing is not None:
            key = self.keys[self.row_of[block]]
            others, counters = self._sharing(key)
            elsewhere = [owner for owner in counters if owner != key]
            listed = self._graph_block.__contains__
            if all(map(listed, others)) and all(map(listed, elsewhere)):  # else plain words
                shown = self._block_names(others[:SHARERS_SHOWN])
                under = self._block_names(elsewhere[:SHARERS_SHOWN])
                graph = graph._replace(
                    shared_with=named_few(shown, len(others)),
                    counted_under=named_few(under, len(elsewhere))
                    + (("",) if key in counters else ()),
                )
        return with_graph(item, graph)

    def _block_names(self, keys: list) -> list[str]:
        """The names of the blocks of these graph owners (each one listed)."""
        names = []
        for key in keys:
            block = self._graph_block[key]
            shared = self.shared.get(block)
            names.append(shared.name if shared is not None else self._row_name(self.row_of[block]))
        return names

    def entry(self, position: int) -> Leftover:
        """The entry at ``position`` of ``order`` (set by the caller: blocks, sorted)."""
        return self._block_entry(self.order[position])

    def _block_entry(self, block: int) -> Leftover:
        item = self.shared.get(block)
        if item is not None:
            return item
        index = self.row_of[block]
        path, holder, _root, _depth, framework = self.rows[index]
        return leftover_of(
            self._row_name(index),
            holder,
            as_named(path, self.found.info(index)),
            framework,
            root=self._row_root(index),
        )

    def _row_name(self, index: int) -> str:
        """The name of row `index`'s path."""
        path = ROW_PATH(self.rows[index])
        if type(path) is Items:  # an item recorded in bulk: its path is made, not kept
            parent, item = path.parent, index - path.start
        elif path[1] == ITEM:
            parent, item = path[0], path[2]
        else:
            return self.names.name_of(path)
        # list[i] under an already named container: no call
        name = self.names.cache.get(id(parent))
        if name is None:
            name = self.names.name_of(parent) if parent is not None else None
        return f"{name}[{item}]" if name is not None else self.names.name_of(path)

    def _row_root(self, index: int) -> RootRef:
        """The group of the root row `index`'s path starts at."""
        return root_of_row(self.rows[index], self.groups)

    def group_columns(self) -> GroupColumns:
        """The columns `groups.group_leftovers` needs, in ``order``: a block reached by
        several names belongs to the root of the name it is listed under."""
        order, row_of, rows, shared = self.order, self.row_of, self.rows, self.shared
        holders = _in_order(self.holders, order)
        paths = self.found.paths()
        path_holders = holders
        if not (order == range(len(row_of)) and row_of == range(len(rows))):  # block i: row i
            in_order = list(map(row_of.__getitem__, order))
            paths = list(map(paths.__getitem__, in_order))
            if shared:  # a shared block's holder is its first name's; its row, the first found
                path_holders = [ROW_HOLDER(rows[row]) for row in in_order]
        roots = root_labels(paths, path_holders, self.groups)
        shared_at = (
            list(itertools.compress(itertools.count(), map(shared.__contains__, order)))
            if shared
            else []
        )
        graph_of = self.graph_of
        graphs = (
            [(p, block) for p, block in enumerate(order) if block in graph_of] if graph_of else []
        )
        for position in shared_at:
            roots[position] = shared[order[position]].root.name  # type: ignore[union-attr]
        return GroupColumns(
            _in_order(self.sizes, order),
            holders,
            _in_order(self.devices, order),
            roots,
            shared_at,
            {position: self.graph_of[block].nbytes for position, block in graphs},
            self._aliased_positions(order) if self.aliased else None,
            {group.name: group for group in reversed(self.groups.values())},
        )

    def _aliased_positions(self, order: Sequence[int]) -> dict[str, list[int]]:
        """Each aliasing variable's blocks, as positions in ``order``."""
        keys, row_of, listed_in = self.keys, self.row_of, self._listed_in
        position_of = {keys[row_of[block]]: position for position, block in enumerate(order)}
        found = {}
        for name, rows in self.aliased.items():
            row_keys = (listed_in.get(keys[row], keys[row]) for row in rows)
            positions = set(map(position_of.get, row_keys)) - {None}
            if positions:
                found[name] = sorted(positions)  # type: ignore[type-var]
        return found


def _in_order(column: list, order: Sequence[int]) -> list:
    """``column``'s values at ``order`` (a copy: the whole column, in C, when that is all)."""
    if order == range(len(column)):
        return column[:]
    return list(map(column.__getitem__, order))


def composite_entry(
    composite: Composite,
    parts: Sequence[Part],
    refs: Sequence[Any],
    composites: dict[int, Composite],
    names: PathNames,
    groups: Groups,
) -> Leftover:
    """The entry listing `parts` (the composite's blocks, each a storage counted once) as
    the one array they are: their bytes together, the other names reaching them (`refs`:
    the references of the parts reached more than once; a name inside another composite
    is that composite's) and the groups those start at."""
    first = parts[0]
    views = [part.views_nbytes for part in parts]
    name = names.name_of(composite.owner)
    root = root_of_path(composite.owner, first.holder, groups)
    others: list[str] = []
    roots = []
    holders = set(first.holders)
    for part in parts:
        holders.update(part.holders)
    for ref in sorted(refs, key=rank):
        holders.add(ref.holder)
        inside = composite_of(ref.path, composites)
        if inside is composite:
            continue  # a part of this composite
        ref_root = root_of_path(ref.path, ref.holder, groups)
        if ref_root != root:
            roots.append(ref_root)
        elif through_private_attribute(ref.path):
            continue  # a library's own second reference inside the same variable
        other = names.name_of(inside.owner if inside is not None else ref.path)
        if other != name:
            others.append(other)
    others = list(dict.fromkeys(others))
    if len(others) > MAX_SHARED_NAMES:
        others[MAX_SHARED_NAMES:] = [f"(+{len(others) - MAX_SHARED_NAMES} more)"]
    info = ArrayInfo(
        shown_shape(composite.owner, composite.shape),
        composite.dtype,
        first.device,
        sum(part.array_nbytes for part in parts),
        None,
        sum(part.nbytes for part in parts),
        first.storage_id,
    )
    return leftover_of(
        name,
        first.holder,
        info,
        first.framework,
        tuple(others),
        first.holders if len(holders) == 1 else tuple(h for h in HOLDERS if h in holders),
        None if None in views else sum(views),
        root,
        tuple(dict.fromkeys(ref for ref in roots if ref != root)),
        composite.kind,
    )
