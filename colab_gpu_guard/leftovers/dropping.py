"""What dropping some of a scan's roots frees and leaves held, read off the scan itself
(``gpu_reset`` and its dry run). See docs/leftovers.md."""

from __future__ import annotations

import functools
import itertools
import operator
import weakref
from collections.abc import Hashable, Iterable
from typing import Any, NamedTuple, Optional

from .. import notebook_refs
from .blocks import Blocks
from .leftover_list import LeftoverList
from .naming import PathNames, best_paths
from .reach import alias_rows
from .registries import MODULE_GLOBAL
from .rows import ROW_FRAMEWORK
from .scan import Scan, listed
from .scan_roots import root_entries, root_ids

_IS_NONE = type(None).__instancecheck__  # x is None, as a C-level callable
PROOF_LIMIT = 20_000  # blocks whose storage a reset proves gone by a weakref to it


class States(NamedTuple):
    """Per reference of a scan with keep_refs: its array is gone (``dead``; None: none
    is), or it took no weakref (``unproven``; None: every one took one)."""

    dead: Optional[list[bool]] = None
    unproven: Optional[list[bool]] = None

    def not_alive(self) -> Optional[list[bool]]:
        """Per reference: not proven alive (gone, or no weakref); None: all are alive."""
        if self.unproven is None or self.dead is None:
            return self.dead if self.unproven is None else self.unproven
        return list(map(operator.or_, self.dead, self.unproven))


def states(scan: Scan) -> States:
    """Which of the scan's references are gone now, by their weakrefs (whose callbacks
    listed the gone ones: nothing to look at per reference when none went)."""
    found = scan.walker.found
    count = len(found.rows)
    if len(found.weaks) != count:  # a scan without keep_refs proves nothing
        return States(None, [True] * count)
    if found.hold:  # those without a weakref were held to the end: alive
        unproven = None
        if found.unproven_rows:
            unproven = [False] * count
            for index in found.unproven_rows:
                unproven[index] = True
    else:
        unproven = list(map(_IS_NONE, found.weaks)) if None in found.weaks else None
    if not found.died:
        return States(None, unproven)
    died = set(map(id, found.died))
    return States(list(map(died.__contains__, map(id, found.weaks))), unproven)


def weaken(scan: Scan, dropped: set) -> None:
    """A scan that holds its arrays (`found.HOLD`: gpu_reset's) takes a weakref to each
    array under the `dropped` roots, before anything changes: the drop may free those.
    The others are held until `settle` after the collection, each one whose reference
    count fell on the way (the drop, a finalizer or another thread let go of a reference
    to it) weakened then: it goes at once where nothing else held it."""
    scan.walker.found.weaken(scan.reach.spans(dropped))


def settle(scan: Scan) -> None:
    """After a change (the drop, the collection): `Found.settle`."""
    scan.walker.found.settle()


def forget_weakrefs(scan: Scan) -> None:
    """Drop the scan's weakrefs (its list keeps the rest; 10^6 weakrefs are 10^6 objects
    the cyclic collector goes over), and any array it still holds."""
    scan.walker.found.let_go()
    scan.walker.found.weaks = []
    scan.walker.found.died = []
    scan.walker.found.keep_refs = False


def nbytes(scan: Scan, keys: set, device: Optional[str] = None) -> int:
    """The bytes of these blocks (storage keys), each counted once: those a name reaches and
    those only an autograd graph saved; only those on `device` ("cpu") where given."""
    if not keys:
        return 0
    found = scan.walker.found
    chosen = list(map(keys.__contains__, found.keys))
    if device is not None:
        chosen = [wanted and on == device for wanted, on in zip(chosen, found.devices)]
    sizes = dict(
        zip(
            itertools.compress(found.keys, chosen),
            itertools.compress(found.storage_nbytes, chosen),
        )
    )
    for key, saved in scan.walker.graphs.saved.items():
        if key in keys and (device is None or saved.info.device == device):
            sizes.setdefault(key, saved.info.storage_nbytes)
    return sum(sizes.values())


def frameworks(scan: Scan, keys: set) -> set[str]:
    """The frameworks of these blocks (storage keys): "torch", "numpy", ... (an autograd
    graph's saved tensors are torch's)."""
    if not keys:
        return set()
    found = scan.walker.found
    kinds = set(
        itertools.compress(found.row_values(ROW_FRAMEWORK), map(keys.__contains__, found.keys))
    )
    if any(key in keys for key in scan.walker.graphs.saved):
        kinds.add("torch")
    return kinds


def storage_proofs(
    scan: Scan, keys: Optional[set] = None, limit: int = PROOF_LIMIT
) -> dict[Hashable, Optional[weakref.ref]]:
    """Per torch block the scan saw (only those in `keys` when given), a weakref to its
    storage (None: none could be taken), what autograd graphs saved included. A tensor's
    own weakref dies with the tensor, while an alias sharing its storage held where the
    scan does not reach (``t.detach()`` in a module's global; a view would keep the tensor
    itself too) keeps the memory: the storage's weakref proves it went. Needs a scan with
    keep_refs.

    A weakref to a storage costs about a microsecond: past `limit` blocks, only the
    `limit` biggest get one; the rest are proven gone by their tensors' weakrefs."""
    from ..frameworks import torch as torch_support

    if keys is not None and not keys:
        return {}
    arrays = scan.walker.found
    chosen = list(map("torch".__eq__, arrays.row_values(ROW_FRAMEWORK)))
    if keys is not None:
        chosen = list(map(operator.and_, chosen, map(keys.__contains__, arrays.keys)))
    if len(arrays.weaks) != len(arrays.keys):  # no weakrefs to reach the tensors by
        return dict.fromkeys(itertools.compress(arrays.keys, chosen))  # (nor the graphs')
    if chosen.count(True) > limit:
        sizes = dict(itertools.compress(zip(arrays.keys, arrays.storage_nbytes), chosen))
        if len(sizes) > limit:  # the biggest blocks (ties: the first found)
            smallest = sorted(sizes.values())[-limit]
            biggest = set(itertools.islice(_at_least(sizes, smallest), limit))
            chosen = list(map(operator.and_, chosen, map(biggest.__contains__, arrays.keys)))
    # any tensor of a storage leads to it
    one_each = dict(itertools.compress(zip(arrays.keys, itertools.count()), chosen))
    tensors = list(map(arrays.array, one_each.values()))
    try:
        proofs = dict(zip(one_each, torch_support.storage_weakrefs(tensors)))
    finally:
        del tensors  # the tensors live on where the scan found them only
    # what autograd graphs saved: the walk took a weakref to each one's storage
    for key, saved in scan.walker.graphs.saved.items():
        if (keys is None or key in keys) and key not in proofs:
            proofs[key] = saved.weak
    return proofs


def _at_least(sizes: dict, smallest: int) -> Iterable:
    """The keys of `sizes` whose size is at least `smallest`, in order."""
    return itertools.compress(sizes, map(smallest.__le__, sizes.values()))


def alive(proofs: dict) -> set:
    """The blocks of `storage_proofs` whose storage lives on."""
    return {key for key, weak in proofs.items() if weak is not None and weak() is not None}


def released(scan: Scan, now: States) -> set:
    """The blocks seen by the scan whose arrays are all gone now (proven by weakrefs; the
    caller takes out those whose storage lives on: `alive` of its `storage_proofs`)."""
    gone: set = set()
    if now.dead is not None and True in now.dead:
        keys = scan.keys
        gone.update(itertools.compress(keys, now.dead))
        living = map(operator.not_, now.not_alive())  # type: ignore[arg-type]
        gone.difference_update(itertools.compress(keys, living))
    for key, saved in scan.walker.graphs.saved.items():  # weakrefs to the storages
        if saved.weak is not None and saved.weak() is None:
            gone.add(key)
    return gone


def same_roots(scan: Scan, dropped: set, shell: Any, namespace: Optional[dict]) -> bool:
    """The notebook's roots now are the scan's less `dropped`: same keys, names, objects
    (those that can hold an array)."""
    now = root_ids(root_entries(shell, namespace))
    return now == [entry for entry in scan.roots if entry[0] not in dropped]


def walked_any(scan: Scan, objects: Iterable[Any]) -> bool:
    """Whether the walk went into any of these containers."""
    visited = scan.walker.first_visit
    return any(id(item) in visited for item in objects)


def still_held(scan: Scan, dropped: set, now: Optional[States] = None) -> Optional[LeftoverList]:
    """The list a new scan would give once the `dropped` roots are gone, read off `scan`;
    None where the two could differ (see the module docstring; the roots and the changed
    containers are the caller's to check). ``now``: the references' states after the drop
    (every reference kept must be alive); None before anything changed (a dry run)."""
    reach = scan.reach
    if not scan.complete or scan.deep or reach.crosses_into(dropped):
        return None
    dropped_rows = reach.dropped_rows(dropped)
    if dropped_rows is not None and scan.walker.graphs.keys_by_block:
        return None  # the graphs' named blocks and owners would differ
    kept = None if dropped_rows is None else list(map(operator.not_, dropped_rows))
    not_alive = None if now is None else now.not_alive()
    if not_alive is not None and True in (
        not_alive if kept is None else itertools.compress(not_alive, kept)
    ):
        return None
    if kept is None:
        if not _named_by(scan, dropped):
            return scan.leftovers
        kept = [True] * len(scan.keys)  # a dropped name that only shared: listed afresh
    return _kept_listing(scan, dropped, kept)


def _named_by(scan: Scan, dropped: set) -> bool:
    """Whether the scan's list names any of the `dropped` roots although they own no row:
    an alias (``d2 = d``: "shares 1 with d") or a holder not looked into."""
    return any(root in dropped for root, *_rest in scan.walker.aliases) or any(
        root in dropped for root, _item in scan.unread.unseen + scan.unread.object_arrays
    )


def would_stay(scan: Scan, dropped: set) -> Optional[LeftoverList]:
    """A dry run's list of what would stay held once the `dropped` roots are gone:
    `still_held` where it can say. Else, where the walk was complete and no root kept met
    a container a dropped root reached first, the references under the roots kept, with
    the autograd graphs of the owners among them as they would count then (a storage only
    a dropped root names but a kept graph saved is that graph's memory; what a graph that
    goes shared, the graphs that stay count). Else None: a kept root reaches what a
    dropped one reached first (``b = {'x': a}`` with ``a`` dropped), and only a walk
    without the dropped roots names it as it would be named then (``b['x'][0]``)."""
    held = still_held(scan, dropped)
    if held is not None:
        return held
    reach, graphs = scan.reach, scan.walker.graphs
    dropped_rows = reach.dropped_rows(dropped)
    if (
        dropped_rows is not None
        and scan.complete
        and not scan.deep
        and not reach.crosses_into(dropped)
    ):
        kept = list(map(operator.not_, dropped_rows))
        staying = set(itertools.compress(scan.keys, kept))
        losing = {key for key in graphs.named_saved if key not in staying}
        unnamed = {}
        if losing:
            chosen = map(losing.__contains__, scan.keys)
            sizes = zip(scan.keys, scan.walker.found.storage_nbytes)
            unnamed = dict(itertools.compress(sizes, chosen))
        gone = frozenset(owner for owner in graphs.keys_by_block if owner not in staying)
        sharing = functools.partial(graphs.sharing, unnamed=unnamed, gone=gone)
        return _kept_listing(scan, dropped, kept, (graphs.count(unnamed, gone), sharing))
    return None


def _kept_listing(
    scan: Scan, dropped: set, kept: list[bool], graphs: Optional[tuple] = None
) -> LeftoverList:
    """The list of the scan's references where `kept` (those under the roots kept), named
    afresh; ``graphs``: `Blocks.add_graphs`'s arguments, for the owners among them."""
    walker = scan.walker
    part = walker.found.subset(kept)
    blocks = Blocks(part, PathNames(lambda: best_paths(part.refs)), walker.groups)
    if graphs is not None and graphs[0]:
        blocks.add_graphs(*graphs)
    aliases = walker.alias_groups(dropped)
    if aliases:  # `b = {'x': a}`, both kept: b shares a's blocks
        blocks.add_aliases(alias_rows(part.rows, aliases))
    types = {
        label: kind
        for label, kind in scan.root_types.items()
        if notebook_refs.RootKey(notebook_refs.VARIABLE, label) not in dropped
    }
    return listed(
        blocks,
        range(len(blocks.sizes)),
        types,
        notes=scan.notes,
        grown_on_rerun=scan.grown,
        incomplete=scan.incomplete,
        **scan.unread.kept(dropped).list_fields(),
    )


def held_elsewhere(scan: Scan, named: Iterable[Any], dropped: set, freed: set) -> list[tuple]:
    """For each root the user named (a variable to delete): the bytes of the memory it
    reaches that dropping does not free, and the roots kept that still reach it (a view of
    the tensor, an alias, a list holding it; `Holder`s): (label, bytes, holders), only
    where bytes stay. `freed`: the blocks only the dropped roots reach."""
    named = [root for root in named if root in dropped]
    if not named:
        return []
    by_root = scan.reach.by_root()
    # a named root's memory: not what a name reaches that its graphs saved (the model's
    # weights a loss's graph saved are the model's)
    own = scan.reach.by_root(named_saved=False)
    labels = {entry[0]: entry[1] for entry in scan.roots}
    stays = []
    for root in named:
        kept = own.get(root, set()) - freed
        if not kept:
            continue
        holders = [
            Holder(labels.get(other, str(other)), other[0] in TYPED_KINDS, other[0])
            for other, blocks in by_root.items()
            if other not in dropped and not blocks.isdisjoint(kept)
        ]
        stays.append((labels.get(root, str(root)), nbytes(scan, kept), holders))
    return stays


# the roots a user names by typing them: a variable, Out[N], _, _N, a module's global
# (the others' labels are the package's own: <exception E>.args, <displayhook._>, ...)
TYPED_KINDS = frozenset(
    {
        notebook_refs.VARIABLE,
        notebook_refs.OUT,
        notebook_refs.UNDERSCORE,
        notebook_refs.OUTPUT_NAME_KIND,
        MODULE_GLOBAL,
    }
)


class Holder(NamedTuple):
    """A root that keeps memory: its label, whether a user types it (a variable), and its
    kind (`notebook_refs.RootKey.kind`)."""

    label: str
    typed: bool
    kind: str
