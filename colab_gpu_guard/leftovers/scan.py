"""``find_leftovers()`` and the scan behind it (`Scan`: the list, the references per block,
which roots reach which blocks, the roots walked)."""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import operator
import weakref
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Optional

from .. import notebook_refs
from ..frameworks import torch as torch_support
from ..units import USER_VARIABLE, counted
from . import modules
from .blocks import Blocks
from .composites import listed_path
from .deep import allocator_gaps, scan_unnamed
from .found import Ref
from .leftover_list import LeftoverList
from .mapped_files import files_by, mapped_note
from .naming import PathNames, best_paths, library_inside
from .numpy_sharing import join_numpy_buffers
from .reach import Reach, alias_rows
from .records import DeviceGap, Unread, Unseen
from .root_refs import root_ref
from .scan_roots import REGISTRY_KINDS, root_entries, root_ids
from .tally import root_of_row
from .walker import DEFAULT_MAX_DEPTH, OutOfTime, Walker

DEFAULT_BUDGET_S = 5.0  # find_leftovers(); %gpu_status and the panel take 2 s
_UNFINISHED_SHOWN = 3


class Group(NamedTuple):
    """The references reaching one block of memory (storage), in the order found."""

    key: Hashable
    refs: list[Ref]

    @property
    def storage_nbytes(self) -> int:
        return self.refs[0].info.storage_nbytes

    @property
    def storage_id(self) -> int:
        return self.refs[0].info.storage_id

    @property
    def device(self) -> str:
        return self.refs[0].info.device

    @property
    def framework(self) -> str:
        return self.refs[0].framework

    @property
    def weakrefs(self) -> list[weakref.ref]:
        """Weakrefs to the arrays reaching the block (a scan with ``keep_refs`` only)."""
        return [ref.weak for ref in self.refs if ref.weak is not None]


def group_refs(refs: Iterable[Ref]) -> dict[Hashable, list[Ref]]:
    """storage key -> the references reaching that storage, in the order found."""
    groups: dict = {}
    for ref in refs:
        key = ref.info.storage_key
        group = groups.get(key)
        if group is None:
            groups[key] = [ref]
        else:
            group.append(ref)
    return groups


@dataclass
class Scan:
    """A scan's result: ``leftovers`` (the public list, made on first use), ``groups``
    (storage key -> its `Group`), ``reach`` (which roots reach which blocks), ``roots``
    (`root_ids`: each root walked, in order), what it could not see (``notes``;
    ``incomplete``, the note of a walk that ran out of time; ``unread``, what it met but
    could not count whole) and what the walk did not search to the end (``unfinished``).
    It holds no array (weakrefs at most)."""

    walker: Walker = field(repr=False)
    roots: list[tuple] = field(default_factory=list, repr=False)
    root_types: dict[str, str] = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    deep: bool = False
    grown: frozenset = frozenset()
    incomplete: str = ""  # the note of a walk that ran out of time, before `notes`
    unread: Unread = Unread()  # holders not looked into, NumPy object arrays
    _listing: Optional[Callable[[], tuple[Blocks, LeftoverList]]] = field(default=None, repr=False)
    _listed: Optional[tuple[Blocks, LeftoverList]] = field(default=None, repr=False)
    _groups: Optional[dict[Hashable, Group]] = field(default=None, repr=False)
    _reach: Optional[Reach] = field(default=None, repr=False)

    @property
    def leftovers(self) -> LeftoverList:
        """The list, one entry per block, biggest first (made on first use: ``gpu_reset``
        needs it only after its gc.collect(), which then does not go over it)."""
        return self._list()[1]

    @property
    def blocks(self) -> Blocks:
        return self._list()[0]

    def _list(self) -> tuple[Blocks, LeftoverList]:
        if self._listed is None:
            assert self._listing is not None
            self._listed, self._listing = self._listing(), None
        return self._listed

    @property
    def complete(self) -> bool:
        """Every root was walked to the end (the time budget did not run out)."""
        return not self.unfinished

    @property
    def groups(self) -> dict[Hashable, Group]:
        """storage key -> Group (built on first use)."""
        if self._groups is None:
            found = self.walker.found
            groups = group_refs(found.refs)
            self._groups = {key: Group(key, refs) for key, refs in groups.items()}
            for key, ref in self.walker.graphs.refs(len(found.rows)).items():
                self._groups[key] = Group(key, [ref])  # memory an autograd graph saved
        return self._groups

    @property
    def keys(self) -> list:
        """Each reference's storage key, in the order found."""
        return self.walker.found.keys

    @property
    def reach(self) -> Reach:
        """Which roots reach which blocks (built on first use)."""
        if self._reach is None:
            walker = self.walker
            found = walker.found
            self._reach = Reach(
                found.rows, self.keys, walker.aliases, walker.graphs, walker.root_keys, found.runs
            )
        return self._reach

    def reach_by_root(self) -> dict[Hashable, set]:
        """Root key (`notebook_refs.RootKey`) -> the storage keys it reaches, counting
        containers first reached from another root, and what the autograd graphs of the
        tensors it reaches saved."""
        return self.reach.by_root()


def _device_matches(device: str, wanted) -> bool:
    if wanted is None:
        return True
    if isinstance(wanted, int) and not isinstance(wanted, bool):
        wanted = f"cuda:{wanted}"
    wanted = str(wanted)
    if ":" in wanted:
        return device == wanted or wanted in device.split("+")
    return any(part.split(":")[0] == wanted for part in device.split("+"))


def _scan_roots(walker: Walker, entries: list[notebook_refs.Root]) -> tuple[dict[str, str], int]:
    """Walk every root; returns each user variable's type name (for the groups) and how
    many of the notebook's roots the time budget left unsearched."""
    types = {}
    notebook = sum(1 for entry in entries if entry.key.kind not in REGISTRY_KINDS)
    for index, (key, label, holder, value, depth, group) in enumerate(entries):
        if holder == USER_VARIABLE:
            kind = type(value)
            types[label] = "class" if issubclass(kind, type) else kind.__name__
        started = len(walker.unfinished)
        try:
            walker.visit_root(
                label, value, holder, key, depth, root_ref(key.kind, label, holder, group)
            )
        except OutOfTime:  # this root is named in `unfinished` if its walk had begun
            return types, max(0, notebook - index - (len(walker.unfinished) > started))
    return types, 0


def _unfinished(walker: Walker, names: PathNames, skipped: int) -> list[str]:
    """What the scan did not search to the end, outermost container first."""
    texts = []
    for path, total, done in reversed(walker.unfinished[-_UNFINISHED_SHOWN:]):
        texts.append(f"{names.name_of(path)}: {total:,} items, {100 * done // total}% searched")
    if skipped:
        texts.append(f"{counted(skipped, 'more root')} (variables, outputs, frames) not searched")
    if not texts:
        texts.append("the scan stopped before it finished")
    return texts


def scan(
    *,
    device=None,
    namespace: Optional[dict] = None,
    deep: bool = False,
    shell: Any = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    keep_refs: bool = False,
    budget_s: Optional[float] = DEFAULT_BUDGET_S,
    variables_only: bool = False,
    without: frozenset = frozenset(),
    grown_on_rerun: frozenset = frozenset(),
) -> Scan:
    """The scan behind ``find_leftovers``; ``keep_refs`` keeps a weakref per reference;
    ``budget_s``: seconds the walk may take (None: no limit); ``variables_only``: walk
    `namespace`'s variables alone (not the output history, the last exception, the
    debugger or torch.compile's graphs); ``without``: root keys not walked from (what a
    dry run's drop would leave); ``grown_on_rerun``: the user's containers that grew on a
    rerun flagged as a leak (the cell engine knows them: `cells.tracker.grown_for`)."""
    shell, namespace = notebook_refs.resolve_namespace(shell, namespace)
    # The walk builds many small tuples and no cycles: keep the cyclic collector from
    # running over every live object again and again meanwhile, and over the scan's own
    # records before it is done.
    collecting = gc.isenabled()
    gc.disable()
    try:
        with torch_support.no_subclass_dispatch():  # a tensor subclass's code never runs
            return _scan(
                shell=shell,
                namespace=namespace,
                device=device,
                deep=deep,
                max_depth=max_depth,
                keep_refs=keep_refs,
                budget_s=budget_s,
                variables_only=variables_only,
                without=without,
                grown=grown_on_rerun,
            )
    finally:
        if collecting:
            gc.enable()


def _scan(
    *,
    shell: Any,
    namespace: dict,
    device,
    deep: bool,
    max_depth: int,
    keep_refs: bool,
    budget_s: Optional[float],
    variables_only: bool,
    without: frozenset,
    grown: frozenset,
) -> Scan:
    walker = Walker(max_depth=max_depth, keep_refs=keep_refs, budget_s=budget_s)
    found = walker.found
    names = PathNames(lambda: best_paths(found.refs))
    notes: list[str] = []
    entries = root_entries(shell, namespace, variables_only)
    if without:
        entries = [entry for entry in entries if entry.key not in without]
    roots = root_ids(entries)
    graphs = walker.graphs
    try:
        root_types, skipped = _scan_roots(walker, entries)
        del entries
        if not walker.ran_out:
            with contextlib.suppress(OutOfTime):  # `unfinished` says where it stopped
                walker.walk_deeper()
        too_deep = walker.too_deep_note()
        if too_deep:
            notes.append(too_deep)
        found.finish()
        buffers = join_numpy_buffers(found, graphs) if walker.classifier.saw_numpy() else None
        found.read_extents()
        if graphs.owners:
            graphs.resolve(set(found.keys))
        if deep:
            scan_unnamed(walker, notes)
            found.finish()
            if buffers is not None:
                buffers.join(found)
            found.read_extents()
    finally:
        del graphs.owners[:]  # tensors the deep scan met: their graphs are not measured
        found.unread = None  # the arrays read last: never kept past the scan
    notes += graphs.notes()
    if walker.opaque:
        notes.append(modules.opaque_note(list(map(names.name_of, walker.opaque))))
    if found.files.left_out:
        groups = walker.groups
        by_holder = files_by(found.files.left_out, lambda row: root_of_row(row, groups).name, True)
        notes.append(mapped_note(by_holder))
    holder_walks = walker.holder_walks
    unread = Unread(
        tuple(
            (root, Unseen(names.name_of(path), kind)) for path, kind, root in holder_walks.unseen
        ),
        # the user's own before a library's (`df.index.values`); a column's part by its column
        tuple(
            (root, names.name_of(listed_path(path, found.composites)))
            for path, root in sorted(
                holder_walks.object_arrays, key=lambda found: library_inside(found[0])
            )
        ),
    )
    unfinished: list[str] = []
    incomplete = ""
    if walker.ran_out or skipped:
        unfinished = _unfinished(walker, names, skipped)
        incomplete = (
            f"incomplete: the scan stopped at its {budget_s:g} s time budget; not searched "
            f"to the end: {'; '.join(unfinished)}"
        )
    if not walker.classifier.array_types:
        notes.append("no array framework (torch, NumPy, CuPy, JAX) is imported")
    if walker.classifier.saw_numpy() and deep:
        notes.append(
            "NumPy arrays are found by name only (the garbage collector does not track them)"
        )
    # the cache of each type met keeps those classes alive, and a class its attributes:
    # gpu_reset's gc.collect() runs while it holds this scan
    walker.kinds.clear()
    listing = functools.partial(
        _listing,
        walker,
        names,
        root_types,
        notes,
        unfinished,
        device,
        deep,
        grown,
        incomplete,
        unread,
    )
    return Scan(
        walker,
        roots,
        root_types,
        notes,
        unfinished,
        deep,
        grown,
        incomplete=incomplete,
        unread=unread,
        _listing=listing,
    )


def _listing(
    walker: Walker,
    names: PathNames,
    root_types: dict[str, str],
    notes: list[str],
    unfinished: list[str],
    device,
    deep: bool,
    grown: frozenset,
    incomplete: str,
    unread: Unread,
) -> tuple[Blocks, LeftoverList]:
    """A scan's blocks and its list (on `device`; with the allocator gaps when `deep`)."""
    found, graphs = walker.found, walker.graphs
    blocks = Blocks(found, names, walker.groups)
    if graphs.by_block:
        blocks.add_graphs(graphs.by_block, graphs.sharing)
    if walker.aliases:
        blocks.add_aliases(alias_rows(found.rows, walker.alias_groups()))
    gaps: list[DeviceGap] = allocator_gaps(blocks.devices, blocks.sizes) if deep else []
    order: Any = range(len(blocks.sizes))
    if device is not None:
        order = [j for j in order if _device_matches(blocks.devices[j], device)]
        gaps = [gap for gap in gaps if _device_matches(gap.device, device)]
    leftovers = listed(
        blocks,
        order,
        root_types,
        gaps=gaps,
        notes=notes,
        deep=deep,
        unfinished=unfinished,
        grown_on_rerun=grown,
        incomplete=incomplete,
        **unread.list_fields(),
    )
    return blocks, leftovers


def listed(
    blocks: Blocks, order: Iterable[int], root_types: dict[str, str], **extra
) -> LeftoverList:
    """The list of `blocks` (those in `order`), biggest first; equal sizes in the order
    found (variables as defined, items by index). ``extra``: `LeftoverList`'s own fields."""
    make = blocks.entry_with_graph if blocks.graph_of else blocks.entry
    sizes, holders = blocks.sizes, blocks.holders
    if order == range(len(sizes)) and (
        not sizes
        or sizes.count(sizes[0]) == len(sizes)  # one size (10^6 alike): at identity speed
        or not any(map(operator.lt, sizes, itertools.islice(sizes, 1, None)))
    ):
        blocks.order = order  # biggest first as found (many arrays of one size): no sort
    else:
        order = blocks.order = sorted(order, key=sizes.__getitem__, reverse=True)
        sizes = list(map(sizes.__getitem__, order))
        holders = list(map(holders.__getitem__, order))
    return LeftoverList._made_on_access(
        make,
        sizes,
        holders,
        group_columns=blocks.group_columns,
        root_types=root_types,
        **extra,
    )


def find_leftovers(
    device=None,
    namespace: Optional[dict] = None,
    deep: bool = False,
    *,
    shell: Any = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    budget_s: Optional[float] = DEFAULT_BUDGET_S,
    grown_on_rerun: frozenset = frozenset(),
) -> LeftoverList:
    """Arrays still alive, by the name a user would type to reach them; biggest first.

    device: None (all), ``"cuda"``, ``"cuda:0"``, ``0`` (cuda:0) or ``"cpu"``.
    namespace: the dict to scan as user variables; by default the running IPython shell's
        ``user_ns`` (then its output history and post-mortem debugger are scanned too, and
        IPython's own names are not taken for user variables; passing that same dict does
        the same), or ``__main__``'s globals outside IPython. The last exception
        (``sys.last_value`` & co.) is always scanned.
    deep: also report arrays alive that no name reaches (torch and CuPy via
        ``gc.get_objects()``, JAX via ``jax.live_arrays()``) as ``<unnamed ...>`` entries,
        and the gap between what was found and ``torch.cuda.memory_allocated`` per device.
    max_depth: how many containers/attributes deep to walk from each root (module nesting
        is free); a note names the roots under which something lay deeper.
    budget_s: seconds the walk may take (None: no limit). When it runs out, the list holds
        what was found so far, ``complete`` is False, and ``unfinished`` (and a note) name
        the containers not searched to the end (``big_list: 1,000,000 items, 37%
        searched``).
    grown_on_rerun: the user's containers that grew on a rerun flagged as a leak, listed
        with the holders the user did not knowingly keep (``colab_gpu_guard.find_leftovers``
        passes the notebook's own).

    Each entry is one block of memory (views and aliases deduplicated; the other names in
    ``shared_with``). Nothing is imported, changed or kept alive.
    """
    if not isinstance(deep, bool):
        raise TypeError("deep must be True or False")
    if namespace is not None and not isinstance(namespace, dict):
        raise TypeError(f"namespace must be a dict, not {type(namespace).__name__}")
    if budget_s is not None and (
        not isinstance(budget_s, (int, float)) or isinstance(budget_s, bool) or budget_s <= 0
    ):
        raise TypeError(f"budget_s must be a number of seconds above 0 or None, not {budget_s!r}")
    return scan(
        device=device,
        namespace=namespace,
        deep=deep,
        shell=shell,
        max_depth=max_depth,
        budget_s=budget_s,
        grown_on_rerun=grown_on_rerun,
    ).leftovers
