"""An array listed once though its memory is several blocks: a pandas column (the blocks
an extension array of pandas' own keeps: an Arrow column's buffers, a nullable column's
values and mask, a categorical's codes and categories), a sparse tensor (its indices and
values) or a wrapper subclass (a jagged nested tensor, DTensor, a quantized weight: its
inner tensors), named as the column or the tensor and shown with its dtype and shape as
pandas or torch give them (`Composite`, recorded where the scan meets it; `blocks` makes
its entry)."""

from __future__ import annotations

import itertools
from typing import NamedTuple, Optional

from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo
from .naming import DOT, Path
from .rows import ROW_FRAMEWORK, ROW_PATH

_KEY, _DTYPE, _SHAPE = map(ArrayInfo._fields.index, ("storage_key", "dtype", "shape"))

# the frameworks of a composite's parts: NumPy arrays and Arrow buffers (a pandas column's),
# tensors (a sparse tensor's, a wrapper subclass's)
PANDAS_PARTS = frozenset({"numpy", "arrow"})
PART_FRAMEWORKS = PANDAS_PARTS | {"torch"}


class Composite(NamedTuple):
    """An array whose memory is several blocks, found at ``node``: an extension array of
    pandas' own (Arrow, nullable, categorical, dates) at ``df['b'].array``, a sparse
    tensor or a wrapper subclass. ``owner`` is what it is listed as (``df['b']``,
    ``s.array``, ``df.index.array``; the tensor itself), ``dtype`` and ``shape`` what
    pandas shows (``df.dtypes``; a frame's block's shape: one row per column) or the
    tensor's, and ``kind`` a tensor's layout (``sparse_csr``, ``jagged``) or wrapper
    class (``DTensor``): the entry's (`records.Leftover`)."""

    node: Path
    owner: Path
    dtype: str
    shape: tuple[int, ...]
    kind: str = ""


def composite_of(path: Path, composites: dict[int, Composite]) -> Optional[Composite]:
    """The outermost composite `path` reaches its array through (a categorical's, for the
    Arrow labels of its categories), or None."""
    outermost = None
    node: Optional[Path] = path
    while node is not None:
        found = composites.get(id(node))
        if found is not None and found.node is node:
            outermost = found
        node = node[0]
    return outermost


def listed_path(path: Path, composites: dict[int, Composite]) -> Path:
    """What names `path`'s array where it is listed: the pandas column or sparse tensor it
    is a part of (`composite_of`), or itself."""
    composite = composite_of(path, composites) if composites else None
    return composite.owner if composite is not None else path


def composite_tensors(
    arrays: list,
    rows: list[tuple],
    columns: list[list],
    kept: Optional[list[bool]],
    composites: dict[int, Composite],
    whole_keys: set,
    owned_by: Optional[list] = None,
) -> Optional[tuple[list, list, list]]:
    """Where sparse tensors are among `arrays` (their keys are their own: ``("tensor",
    id)``), the arrays and rows again with each one's component tensors in its place
    (``sp._indices()``, ``sp._values()``: a name may hold them too, and their memory is
    counted once then), and the owner of each array (the sparse tensor for a component;
    ``owned_by[i]`` for array i where given); None where there is none. Each sparse tensor
    and each wrapper subclass (a jagged nested tensor, DTensor, a quantized weight: its
    inner tensors, which the walk reaches as its attributes, hold its memory) goes in
    `composites`, to be listed as the one tensor it is, and its key in `whole_keys` (a
    sparse tensor's is no row's: for the deep scan, a name reaches it)."""
    keys = columns[_KEY]
    if not any(type(key) is tuple and key[0] == "tensor" for key in keys):
        return None
    indices = range(len(arrays)) if kept is None else itertools.compress(range(len(arrays)), kept)
    sparse = {}
    for index, key, dtype, shape in zip(indices, keys, columns[_DTYPE], columns[_SHAPE]):
        if type(key) is tuple and key[0] == "tensor" and ROW_FRAMEWORK(rows[index]) == "torch":
            found = torch_support.sparse_parts(arrays[index])
            if found:
                kind, sparse[index] = found
            else:
                kind = torch_support.wrapper_kind(arrays[index])
            if kind is not None:
                path = ROW_PATH(rows[index])
                composites[id(path)] = Composite(path, path, dtype, shape, kind)
                whole_keys.add(key)
    if not sparse:
        return None
    new_arrays, new_rows, owners = [], [], []
    for index, (array, row) in enumerate(zip(arrays, rows)):
        owner = array if owned_by is None else owned_by[index]
        parts = sparse.get(index)
        if parts is None:
            new_arrays.append(array)
            new_rows.append(row)
            owners.append(owner)
            continue
        path, holder, root, depth, framework = row
        for call, part in parts:
            new_arrays.append(part)
            new_rows.append(((path, DOT, call), holder, root, depth + 1, framework))
            owners.append(owner)
    return new_arrays, new_rows, owners
