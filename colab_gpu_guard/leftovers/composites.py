"""An array listed once though its memory is several blocks: a pandas column (the blocks
an extension array of pandas' own keeps: an Arrow column's buffers, a nullable column's
values and mask, a categorical's codes and categories), a sparse tensor (its indices and
values) or a wrapper subclass (a jagged nested tensor, DTensor, a quantized weight: its
inner tensors), named as the column or the tensor and shown with its dtype and shape as
pandas or torch give them (`Composite`, recorded where the scan meets it; `blocks` makes
its entry)."""

from __future__ import annotations

from typing import NamedTuple, Optional

from .naming import Path

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
