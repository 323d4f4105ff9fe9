"""A pandas column listed once: the entry for the blocks an extension array of pandas'
own keeps (an Arrow column's buffers, a nullable column's values and mask, a categorical's
codes and categories), named as the column and shown with its dtype and shape as
``df.dtypes`` and ``df.shape`` give them (`pandas_frames.Extension`, found by the walk)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from ..frameworks.base import ArrayInfo
from ..units import HOLDERS
from .naming import MAX_SHARED_NAMES, Path, PathNames, rank, shown_shape
from .naming import through_private_attribute as through_private
from .pandas_frames import Extension
from .records import Leftover, leftover_of
from .tally import Groups, root_of_path

# the frameworks of an extension array's parts: NumPy arrays, Arrow buffers
COLUMN_PARTS = frozenset({"numpy", "arrow"})


class Part(NamedTuple):
    """One block of a column, as `Leftover` has it (read off the block's row, or its entry
    where several names reach it): who holds it, where it is and its bytes."""

    holder: str
    holders: tuple[str, ...]
    device: str
    storage_id: int
    framework: str
    nbytes: int
    array_nbytes: int
    views_nbytes: int


def extension_of(path: Path, extensions: dict[int, Extension]) -> Optional[Extension]:
    """The outermost extension array `path` reaches its array through (a categorical's,
    for the Arrow labels of its categories), or None."""
    outermost = None
    node: Optional[Path] = path
    while node is not None:
        found = extensions.get(id(node))
        if found is not None and found.node is node:
            outermost = found
        node = node[0]
    return outermost


def column_path(path: Path, extensions: dict[int, Extension]) -> Path:
    """What names `path`'s array where it is listed: the pandas column it is a part of
    (`extension_of`), or itself."""
    column = extension_of(path, extensions) if extensions else None
    return column.owner if column is not None else path


def column_entry(
    column: Extension,
    parts: Sequence[Part],
    refs: Sequence[Any],
    extensions: dict[int, Extension],
    names: PathNames,
    groups: Groups,
) -> Leftover:
    """The entry listing `parts` (the column's blocks, each a storage counted once) as
    the column: their bytes together, the other names reaching them
    (`refs`: the references of the parts reached more than once; a name inside another
    pandas column is that column's) and the groups those start at."""
    first = parts[0]
    name = names.name_of(column.owner)
    root = root_of_path(column.owner, first.holder, groups)
    others: list[str] = []
    roots = []
    holders = set(first.holders)
    for part in parts:
        holders.update(part.holders)
    for ref in sorted(refs, key=rank):
        holders.add(ref.holder)
        inside = extension_of(ref.path, extensions)
        if inside is column:
            continue  # a part of this column
        ref_root = root_of_path(ref.path, ref.holder, groups)
        if ref_root != root:
            roots.append(ref_root)
        elif through_private(ref.path):
            continue  # pandas' own second reference inside the same variable
        other = names.name_of(inside.owner if inside is not None else ref.path)
        if other != name:
            others.append(other)
    others = list(dict.fromkeys(others))
    if len(others) > MAX_SHARED_NAMES:
        others[MAX_SHARED_NAMES:] = [f"(+{len(others) - MAX_SHARED_NAMES} more)"]
    info = ArrayInfo(
        shown_shape(column.owner, column.shape),
        column.dtype,
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
        sum(part.views_nbytes for part in parts),
        root,
        tuple(dict.fromkeys(ref for ref in roots if ref != root)),
    )
