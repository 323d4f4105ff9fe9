"""The name a user would type for a path (``model.0.weight``, ``Out[3][0]``), which name of
one block comes first, and the other names listed beside it."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any, Callable, Optional

from ..units import HOLDERS

MAX_SHARED_NAMES = 16

# path node kinds
ROOT, ATTR, DOT, ITEM, KEY, KEY_TEXT, ARRAY_KEY, OBJECT_KEY, SET_ITEM = range(9)
KEY_OF, CLOSURE, FRAME_LOCAL = range(9, 12)  # a dict's key; a closure cell; a generator's local
HELD = 12  # what an iterator holds (`it.<list>`): keyed by the held object's type name
# a pandas block's columns (`df['a']`, `df[['a', 'd']]`): named as KEY and KEY_TEXT are,
# and shown in the frame's shape, where pandas keeps a block's columns as its rows
COLUMN, COLUMNS = 13, 14
LABELS = 15  # a pandas index's labels (`df.columns.values`, `df.index.array`): by the attribute

Path = tuple  # (parent: Optional[Path], kind: int, key: object)

# The text a node adds to its parent's, as `template % (parent_text, key)`; None where the
# key needs more than formatting (name_of's branches). A table indexed by kind, not a dict:
# measured as fast as the branch chain it replaced.
TEMPLATES: tuple[Optional[str], ...] = (
    "%.0s%s",  # ROOT: the variable's name
    "%s.%s",  # ATTR
    "%s.%s",  # DOT
    "%s[%s]",  # ITEM
    None,  # KEY: key_text(key)
    "%s[%s]",  # KEY_TEXT
    None,  # ARRAY_KEY: the key array's own name
    "%s[<%s>]",  # OBJECT_KEY
    "%s{item}%.0s",  # SET_ITEM
    "<key of %s>%.0s",  # KEY_OF
    "%s.<closure %r>",  # CLOSURE
    None,  # FRAME_LOCAL: what, the call (`f()`, `f() #2`) and name
    "%s.<%s>",  # HELD
    None,  # COLUMN: key_text(key), as KEY
    "%s[%s]",  # COLUMNS
    "%s.%s",  # LABELS
)

RANK = {holder: rank for rank, holder in enumerate(HOLDERS)}


def rank(ref: Any) -> tuple[int, bool, int, int]:
    """The order names of one block come in: by holder (user variables first), then a
    name a user can type before one through a dict's key (``<key of opt.state>`` names
    every key of ``opt.state`` alike), then the shallowest path, then the order found
    (variables as defined, items by index)."""
    return (RANK[ref.holder], through_key(ref.path), ref.depth, ref.order)


def through_key(path: Path) -> bool:
    """Whether a path reaches its array through a dict's key (its name says ``<key of``)."""
    node: Optional[Path] = path
    while node is not None:
        if node[1] == KEY_OF:
            return True
        node = node[0]
    return False


def inside_private(path: Path) -> bool:
    """Whether a path goes through an attribute whose name starts with ``_``, or through
    what a held object or closure keeps (``df.columns._cache``, ``it.<list>``): the inside
    of a library's object rather than what a user made."""
    node: Optional[Path] = path
    while node is not None:
        kind, key = node[1], node[2]
        if (kind == ATTR and str(key).startswith("_")) or kind in (HELD, CLOSURE):
            return True
        node = node[0]
    return False


def shown_shape(path: Path, shape: tuple) -> tuple:
    """The shape of what ``path`` names: pandas keeps a frame's columns of one dtype as the
    rows of one 2-D block, so ``df['a']`` (a block of one column) is ``(rows,)`` and
    ``df[['a', 'd']]`` is ``(rows, 2)``, as the user's frame has them."""
    kind = path[1]
    if kind == COLUMN and len(shape) == 2:
        return tuple(shape[1:])
    if kind == COLUMNS and len(shape) == 2:
        return (shape[1], shape[0])
    return tuple(shape)


def through_private_attribute(path: Path) -> bool:
    """Whether a path goes through an attribute a library keeps to itself (``_item_cache``,
    ``_cache``: one ``_``, not a dunder such as a hook's ``__defaults__``)."""
    node: Optional[Path] = path
    while node is not None:
        if node[1] == ATTR:
            key = str(node[2])
            if key.startswith("_") and not key.startswith("__"):
                return True
        node = node[0]
    return False


def library_inside(path: Path) -> bool:
    """Whether a path names the inside of a library's object (`inside_private`) or a
    pandas index's labels: what a user made is named before it."""
    return path[1] == LABELS or inside_private(path)


def key_text(key: object) -> str:
    if type(key) in (str, int, float, bool, bytes, type(None)) or (
        type(key) is tuple and all(type(k) in (str, int, float, bool) for k in key)
    ):
        text = repr(key)
        return text if len(text) <= 80 else text[:77] + "..."
    return f"<{type(key).__name__}>"


def best_paths(refs: Sequence[Any]) -> dict[int, Path]:
    """id(array) -> the path a user would type first (for arrays used as dict keys)."""
    best: dict[int, Any] = {}
    for ref in refs:
        current = best.get(ref.ident)
        # ranked only against another path to the same array: most arrays have one
        if current is None or rank(ref) < rank(current):
            best[ref.ident] = ref
    return {ident: ref.path for ident, ref in best.items()}


class PathNames:
    """Names of paths for one scan; ``best_paths()`` gives the path naming an array used
    as a dict key (asked for only when such a key is named)."""

    def __init__(self, best_paths: Callable[[], dict[int, Path]]) -> None:
        self._best_paths = best_paths
        self._best: Optional[dict[int, Path]] = None
        self.cache: dict[int, str] = {}  # id(path node) -> its text

    def best_path(self, ident: Hashable) -> Optional[Path]:
        if self._best is None:
            self._best = self._best_paths()
        return self._best.get(ident)  # type: ignore[arg-type]

    def name_of(self, path: Path, guard: int = 0) -> str:
        """The text of a path; names of shared prefixes are memoised for this scan."""
        cache = self.cache
        if path[1] == ITEM:  # the common leaf, list[i], under an already named container
            text = cache.get(id(path[0]))
            if text is not None:
                return f"{text}[{path[2]}]"
        pending = []
        node = path
        while node is not None:
            known = cache.get(id(node))
            if known is not None:
                text = known
                break
            pending.append(node)
            node = node[0]
        else:
            text = ""
        for node in reversed(pending):
            _parent, kind, key = node
            template = TEMPLATES[kind]
            if template is not None:
                text = template % (text, key)
            elif kind in (KEY, COLUMN):
                text = f"{text}[{key_text(key)}]"
            elif kind == ARRAY_KEY:
                best = self.best_path(key)
                key_name = self.name_of(best, guard + 1) if best and guard < 4 else "<array>"
                text = f"{text}[{key_name}]"
            else:  # FRAME_LOCAL
                what, call, name = key
                text = f"{text}.<{what} {call} local {name!r}>"
            cache[id(node)] = text
        return text


def shared_names(name_of: Callable[[Path], str], refs: Sequence[Any]) -> tuple[str, tuple]:
    """The first name of a block reached by ``refs`` (sorted by `rank`), and the other
    names: at most MAX_SHARED_NAMES, then a '(+N more)' entry."""
    name = name_of(refs[0].path)
    others: list[str] = []
    seen = {name}
    extra = 0
    for ref in refs[1:]:
        if len(others) >= MAX_SHARED_NAMES:
            extra += 1
            continue
        other = name_of(ref.path)
        if other not in seen:
            seen.add(other)
            others.append(other)
    if extra:
        others.append(f"(+{extra} more)")
    return name, tuple(others)
