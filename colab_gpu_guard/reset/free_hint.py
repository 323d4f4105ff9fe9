"""Which of the user's variables to delete to free what a reset leaves held: the names that
share memory, taken together (`FreeSet`), each with the bytes deleting them all frees."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple, Optional

from .. import notebook_refs
from ..leftovers.groups import Blocks
from ..leftovers.records import Leftover
from ..leftovers.root_refs import RootRef
from ..units import USER_VARIABLE

# The names the default line puts in its command, in characters (spaces included): the
# line stays one copyable line of a notebook's width. Whole sets only: a set cut in two
# would be a command that frees nothing of the memory its names share, so the first set
# is named in full whatever its length, and a set that does not fit ends the command
# there (the sets are biggest first); `-v` names every set.
NAMES_WIDTH = 60


class FreeSet(NamedTuple):
    """Variables that share memory: deleting all of them frees ``nbytes`` (the blocks no
    other holder keeps), deleting only some frees none of what they share."""

    names: tuple[str, ...]
    nbytes: int


def free_sets(
    items: Sequence[Leftover], blocks: Optional[Blocks], order: Sequence[str] = ()
) -> list[FreeSet]:
    """The sets of user variables whose deletion frees memory in `items` (a leftovers list;
    `blocks` its group columns, where it has them), biggest first. A block held also by
    anything but a user variable (a module's global, a logger, a thread, output history)
    is freed by no deletion of variables: it neither counts nor joins its names. `order`:
    the names as the report lists them (a set's names follow it; the others come after,
    in the order found)."""
    parent: dict[str, str] = {}

    def find(name: str) -> str:
        parent.setdefault(name, name)
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    sizes: dict[str, int] = {}  # a name of each freeable block's set -> those blocks' bytes
    seen: dict[str, int] = {}  # each name, in the order found
    for nbytes, names in _freeable_blocks(items, blocks):
        first = names[0]
        seen.setdefault(first, len(seen))
        for name in names[1:]:
            seen.setdefault(name, len(seen))
            parent[find(name)] = find(first)
        sizes[first] = sizes.get(first, 0) + nbytes
    if not sizes:
        return []
    total: dict[str, int] = {}
    for name, nbytes in sizes.items():
        top = find(name)
        total[top] = total.get(top, 0) + nbytes
    listed = {name: index for index, name in enumerate(order)}
    rank = {name: (listed.get(name, len(listed)), seen[name]) for name in seen}
    members: dict[str, list[str]] = {}
    for name in sorted(seen, key=rank.__getitem__):
        members.setdefault(find(name), []).append(name)
    made = [FreeSet(tuple(names), total[top]) for top, names in members.items() if total[top]]
    made.sort(key=lambda group: (-group.nbytes, rank[group.names[0]]))
    return made


def shown_sets(sets: Sequence[FreeSet], width: int = NAMES_WIDTH) -> int:
    """How many of `sets` (in order) a command of about `width` characters of names holds:
    at least the first, whole sets only."""
    used = 0
    for index, group in enumerate(sets):
        used += sum(len(name) + 1 for name in group.names)
        if index and used > width + 1:
            return index
    return len(sets)


def _freeable_blocks(
    items: Sequence[Leftover], blocks: Optional[Blocks]
) -> Iterator[tuple[int, tuple[str, ...]]]:
    """Each block only user variables hold (%gpu_reset NAME deletes them), with its bytes
    and those variables: the name it is listed under, the other names sharing it
    (`Leftover.shared_roots`) and the variables reaching it through a container another
    name reached first (``l2 = l``: `Blocks.aliased`). A block anything else also holds
    is left out."""
    if blocks is None:  # a plain list of entries: each storage once, the first naming it
        found: set = set()
        for item in items:
            key = (item.device, item.storage_id)
            if key in found or item.root is None:
                continue
            found.add(key)
            refs = (item.root, *item.shared_roots)
            if all(map(_is_variable, refs)):
                yield item.nbytes, tuple(dict.fromkeys(ref.name for ref in refs))
        return
    refs = blocks.refs or {}
    aliased_at: dict[int, list[str]] = {}
    for name, positions in (blocks.aliased or {}).items():
        for position in positions:
            aliased_at.setdefault(position, []).append(name)
    shared = set(blocks.shared_at)
    special = shared | aliased_at.keys()
    holders = blocks.holders
    variable: dict[str, bool] = {}  # a root listed -> whether it is a user variable
    for position, (nbytes, root) in enumerate(zip(blocks.sizes, blocks.roots)):
        first = variable.get(root)
        if first is None:
            ref = refs.get(root)
            first = _is_variable(ref) if ref is not None else holders[position] == USER_VARIABLE
            first = variable[root] = first and root.isidentifier()
        if position not in special:
            if first:
                yield nbytes, (root,)
            continue
        if not first:
            continue
        others = items[position].shared_roots if position in shared else ()
        if not all(map(_is_variable, others)):
            continue
        aliases = aliased_at.get(position, ())
        # an alias is a variable reaching a container (its record, where listed, says so)
        if not all(_is_variable(refs[name]) for name in aliases if name in refs):
            continue
        yield nbytes, tuple(dict.fromkeys([root, *(ref.name for ref in others), *aliases]))


def _is_variable(ref: RootRef) -> bool:
    """A user variable %gpu_reset NAME deletes (not `_`, `Out[3]`, a module's global)."""
    return ref.source == notebook_refs.VARIABLE and ref.name.isidentifier()
