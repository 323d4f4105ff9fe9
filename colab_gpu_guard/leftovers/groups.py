"""Leftovers grouped by the variable that holds them: ``model`` (8 tensors, 2 MiB), ``opt``
(12 tensors; shares 4 with model), ``many`` (list of 100,000 tensors), with what the user
did not knowingly keep (output history, tracebacks, the debugger, compiled graphs,
autograd graphs) listed first and what the default ``%gpu_reset`` releases marked.

A group is one root: a user variable, ``Out[N]``, ``_``, one traceback local, the last
exception, a compiled graph. Every block of memory is counted once, in the group of the
name it is listed under (user variables rank first, see `naming.rank`); a group that also
reaches blocks counted elsewhere says so (``shares 4 with model``).
"""

from __future__ import annotations

import collections
import html
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, islice
from operator import itemgetter
from typing import Any, NamedTuple, Optional

from ..units import OUTPUT_HISTORY, TRACEBACK_FRAME, USER_VARIABLE, format_bytes
from .html import groups_html
from .records import Leftover

ENTRIES_SHOWN = 3  # per group, in the text and HTML views
GROUPS_SHOWN = 12  # in the text view (one screen)
UNNAMED = "<no name>"  # the group of a deep scan's unnamed blocks

# what a group's holder is, in words
USER_STATE = "user variable"
AUTOGRAD_GRAPH = "autograd graph"
DEBUGGER_FRAME = "debugger frame"
EXCEPTION = "exception"
COMPILED_GRAPH = "compiled graph"
NO_NAME = "no name (held from C++ or unreachable)"
# released by a plain %gpu_reset (reset.py drops every root but user variables;
# notebook_refs.plan_drop): output history, the last exception with its frames, the
# debugger's frames, torch.compile's graphs
RELEASED_KINDS = frozenset(
    {OUTPUT_HISTORY, TRACEBACK_FRAME, DEBUGGER_FRAME, EXCEPTION, COMPILED_GRAPH}
)

_VARIABLE_ROOT = re.compile(r"Out\[-?\d+\]|[^.\[{]+")


def root_of(name: str, holder: Optional[str] = None) -> str:
    """The group of a leftover's name: ``model.0.weight`` -> ``model``, ``Out[3][0]`` ->
    ``Out[3]``, ``<traceback: f() local 'x'>[0]`` -> ``<traceback: f() local 'x'>``,
    ``<exception E>.args[0]`` -> ``<exception E>``, every ``<unnamed ...>`` -> UNNAMED.
    A user variable's name is never read as one of those labels (``<b>`` is a name); a
    dict's key belongs to the dict's root (``<key of opt.state>`` -> ``opt``)."""
    if name.startswith("<") and holder != USER_VARIABLE:
        if name.startswith("<unnamed"):
            return UNNAMED
        label = _label(name)
        if name.startswith("<key of "):  # `<key of opt.state>.grad`
            return root_of(label[len("<key of ") : -1], holder)
        return label
    match = _VARIABLE_ROOT.match(name)
    return match.group(0) if match else name


def _label(name: str) -> str:
    """The leading ``<...>`` of a name, nested brackets included."""
    depth = 0
    for index, char in enumerate(name):
        if char == "<":
            depth += 1
        elif char == ">":
            depth -= 1
            if depth == 0:
                return name[: index + 1]
    return name


def kind_of(name: str, holder: str) -> str:
    """What holds a group, in words (a `units` holder label, or finer for 'other')."""
    if holder == TRACEBACK_FRAME and name.startswith("<debugger"):
        return DEBUGGER_FRAME
    if holder in (USER_VARIABLE, OUTPUT_HISTORY, TRACEBACK_FRAME):
        return holder
    if name.startswith("<exception"):
        return EXCEPTION
    if name.startswith("<compiled graph"):
        return COMPILED_GRAPH
    if name == UNNAMED:
        return NO_NAME
    return holder


@dataclass(frozen=True)
class GroupShare:
    """Blocks a group reaches that are counted in another group (``owner``)."""

    owner: str
    count: int


@dataclass(frozen=True)
class LeftoverGroup:
    """The leftovers under one root (a variable, ``Out[N]``, a traceback local, ...).

    count/nbytes: the blocks counted here (each storage once, in one group); devices: where
    they are; shares: blocks this root also reaches that another group counts; hidden:
    the user did not knowingly keep it (output history, frames, graphs); released_by_reset:
    a plain ``%gpu_reset`` drops this holder; entries: the biggest blocks (``count`` in
    all), named as in ``find_leftovers()``; type_name: the root's type, when known.
    """

    name: str
    holder: str
    kind: str
    hidden: bool
    released_by_reset: bool
    count: int
    nbytes: int
    devices: tuple[str, ...] = ()
    type_name: str = ""
    shares: tuple[GroupShare, ...] = ()
    graph_nbytes: int = 0
    entries: tuple[Leftover, ...] = ()

    @property
    def more(self) -> int:
        """Blocks counted here but not in ``entries``."""
        return self.count - len(self.entries)

    def describe(self) -> str:
        """'Sequential: 8 tensors on cpu; shares 4 with model' (no name, no size)."""
        what = self.type_name if self.kind == USER_STATE and self.type_name else self.kind
        noun = "array" if self.count == 1 else "arrays"
        text = f"{what}: {self.count:,} {noun}"
        if self.devices:
            text += f" on {', '.join(self.devices)}"
        if self.graph_nbytes:
            text += f", autograd graphs keep {format_bytes(self.graph_nbytes)}"
        if self.shares:
            text += "; shares " + ", ".join(f"{s.count:,} with {s.owner}" for s in self.shares)
        return text

    def __str__(self) -> str:
        mark = "  [%gpu_reset releases it]" if self.released_by_reset else ""
        return f"{format_bytes(self.nbytes):>10}  {self.name}  {self.describe()}{mark}"

    def to_dict(self) -> dict[str, Any]:
        from ..serialize import to_data

        return to_data(self)


@dataclass(frozen=True)
class LeftoverGroups:
    """Leftovers by the root holding them: hidden holders first, then the user's own
    state, each biggest first. ``blocks``/``total_bytes``: every block, counted once."""

    groups: tuple[LeftoverGroup, ...] = ()
    blocks: int = 0
    total_bytes: int = 0
    notes: tuple[str, ...] = ()
    group_count: Optional[int] = None  # groups in all, when `groups` are only the first

    def __iter__(self):
        return iter(self.groups)

    def __len__(self) -> int:
        return len(self.groups)

    def __getitem__(self, index):
        return self.groups[index]

    def named(self, name: str) -> Optional[LeftoverGroup]:
        return next((group for group in self.groups if group.name == name), None)

    @property
    def released_bytes(self) -> int:
        """What a plain ``%gpu_reset`` would release (groups it drops)."""
        return sum(group.nbytes for group in self.groups if group.released_by_reset)

    @property
    def total_groups(self) -> int:
        return len(self.groups) if self.group_count is None else self.group_count

    def heading(self) -> str:
        return (
            f"leftovers: {self.blocks:,} block(s), {format_bytes(self.total_bytes)} in "
            f"{self.total_groups} group(s); hidden holders first"
        )

    def lines(self, groups: int = GROUPS_SHOWN, entries: int = ENTRIES_SHOWN) -> list[str]:
        """The groups (at most `groups`), each with its biggest `entries`, indented."""
        lines = []
        for group in self.groups[:groups]:
            lines.append(str(group))
            lines += [f"    {entry}" for entry in group.entries[:entries]]
            more = group.count - min(len(group.entries), entries)
            if more > 0 and group.count > 1:
                lines.append(f"    ... {more:,} more in {group.name}")
        shown = self.groups[:groups]
        if self.total_groups > len(shown):
            size = format_bytes(self.total_bytes - sum(group.nbytes for group in shown))
            lines.append(f"... {self.total_groups - len(shown)} more group(s), {size}")
        return lines

    def __str__(self) -> str:
        if not self.groups:
            return "leftovers: no arrays held"
        lines = [self.heading()] + [f"  {line}" for line in self.lines()]
        return "\n".join(lines + [f"  note: {note}" for note in self.notes])

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self) if not cycle else "LeftoverGroups(...)")

    def _repr_html_(self) -> str:
        if not self.groups:
            return "<div>no arrays held</div>"
        return groups_html(self.groups) + "".join(
            f"<div>note: {html.escape(str(note))}</div>" for note in self.notes
        )

    def to_dict(self) -> dict[str, Any]:
        from ..serialize import to_data

        return to_data(self)


# ---------------------------------------------------------------- building


class Blocks(NamedTuple):
    """A list's blocks as columns, biggest first: what grouping needs without making
    every entry. ``shared_at``: positions of blocks reached by more than one name;
    ``graphs``: position -> bytes its autograd graph keeps (counted in its size)."""

    sizes: Sequence[int]
    holders: Sequence[str]
    devices: Sequence[str]
    roots: Sequence[str]
    shared_at: Sequence[int] = ()
    graphs: Optional[dict[int, int]] = None


def _columns_of(items: Sequence[Leftover]) -> tuple[Blocks, list[Leftover]]:
    """Columns of a plain list of entries, each storage once (the first entry naming it)."""
    seen: set = set()
    kept = []
    for item in items:
        key = (item.device, item.storage_id)
        if key not in seen:
            seen.add(key)
            kept.append(item)
    kept.sort(key=lambda item: -item.nbytes)
    blocks = Blocks(
        [item.nbytes for item in kept],
        [item.holder for item in kept],
        [item.device for item in kept],
        [root_of(item.name, item.holder) for item in kept],
        [index for index, item in enumerate(kept) if item.shared_with],
        {index: item.graph_nbytes for index, item in enumerate(kept) if item.graph_nbytes},
    )
    return blocks, kept


def group_leftovers(
    items: Sequence[Leftover],
    entries_per_group: Optional[int] = ENTRIES_SHOWN,
    blocks: Optional[Blocks] = None,
    root_types: Optional[dict[str, str]] = None,
    notes: Iterable[str] = (),
) -> LeftoverGroups:
    """Group `items` (a `LeftoverList` or any list of entries) by root.

    blocks: the list's columns when it has them (a scan's list: entries are then made only
    for the shown and the shared blocks); root_types: root name -> its type's name.
    entries_per_group: how many entries each group keeps (None: all).
    """
    if blocks is None:
        blocks, items = _columns_of(items)
    roots, sizes = blocks.roots, blocks.sizes
    counts = collections.Counter(roots)
    totals = dict.fromkeys(counts, 0)
    for root, size in zip(roots, sizes):
        totals[root] += size
    devices: dict[str, dict] = {root: {} for root in counts}
    for root, device in dict.fromkeys(zip(roots, blocks.devices)):
        devices[root][device] = None
    first = dict(zip(reversed(roots), range(len(roots) - 1, -1, -1)))  # first position
    holders = {root: blocks.holders[position] for root, position in first.items()}
    order: dict[str, list] = {}  # root -> [holder, count, nbytes, devices, positions]
    for root in sorted(first, key=first.__getitem__):
        wanted = counts[root] if entries_per_group is None else entries_per_group
        if wanted >= counts[root]:
            positions = list(compress(range(len(roots)), map(root.__eq__, roots)))
        else:
            positions = list(
                islice(
                    compress(
                        range(first[root], len(roots)),
                        map(root.__eq__, islice(roots, first[root], None)),
                    ),
                    wanted,
                )
            )
        order[root] = [holders[root], counts[root], totals[root], devices[root], positions]
    shares: dict[str, dict[str, int]] = {}
    for position in blocks.shared_at:
        owner = blocks.roots[position]
        others = dict.fromkeys(root_of(name) for name in items[position].shared_with)
        for other in others:
            if other == owner or other.startswith("(+"):  # "(+N more)": names not kept
                continue
            if (
                other not in order
                and _holder_of(other) == OUTPUT_HISTORY == blocks.holders[position]
            ):
                continue  # `_`, `__`, `_18` beside `Out[18]`: the owner's row names them
            counts = shares.setdefault(other, {})
            counts[owner] = counts.get(owner, 0) + 1
            if other not in order:  # reaches only blocks another group counts
                order[other] = [_holder_of(other), 0, 0, {}, []]
    graph_bytes = dict.fromkeys(order, 0)
    for position, nbytes in (blocks.graphs or {}).items():
        graph_bytes[roots[position]] += nbytes
    types = root_types or {}
    made = []
    for name, (holder, count, nbytes, devices, positions) in order.items():
        entries = tuple(items[position] for position in positions)
        graph = graph_bytes[name]
        kind = kind_of(name, holder)
        if kind == USER_STATE and graph:
            kind = AUTOGRAD_GRAPH
        made.append(
            LeftoverGroup(
                name=name,
                holder=holder,
                kind=kind,
                hidden=kind != USER_STATE,
                released_by_reset=kind in RELEASED_KINDS,
                count=count,
                nbytes=nbytes,
                devices=tuple(devices),
                type_name=types.get(name, ""),
                shares=tuple(GroupShare(o, n) for o, n in shares.get(name, {}).items()),
                graph_nbytes=graph,
                entries=entries,
            )
        )
    # hidden holders first, then by size; equal sizes in the order found
    made.sort(key=lambda group: (not group.hidden, -group.nbytes))
    return LeftoverGroups(tuple(made), len(blocks.sizes), sum(blocks.sizes), tuple(notes))


_OUTPUT_ROOT = re.compile(
    r"Out\[-?\d+\]|_+|_\d+|<displayhook\..*|<user_ns_hidden.*|<last cell result>"
)


def _holder_of(root: str) -> str:
    """The holder of a root known only by name (one that owns no block)."""
    if _OUTPUT_ROOT.fullmatch(root):
        return OUTPUT_HISTORY
    if root.startswith("<traceback") or root.startswith("<debugger"):
        return TRACEBACK_FRAME
    if root.startswith("<"):
        return "other"
    return USER_VARIABLE


def root_labels(paths: Iterable[tuple], holders: Sequence[str]) -> list[str]:
    """The group of each path (a walk's linked ``(parent, kind, key)`` tuple) held by
    `holders`: a user variable's root label, or another root's label through `root_of`;
    worked out once per parent node (a list's items share one)."""
    paths = list(paths)
    parents = list(map(_PARENT, paths))
    keys = list(map(id, parents))
    by_label: dict[str, str] = {}
    label_of: dict[int, Optional[str]] = {}
    for key, (parent, holder) in dict(zip(keys, zip(parents, holders))).items():
        if parent is None:
            continue
        node = parent
        while node[0] is not None:
            node = node[0]
        root = by_label.get(node[2])
        if root is None:
            root = by_label[node[2]] = root_of(node[2], holder)
        label_of[key] = root
    labels = list(map(label_of.get, keys))
    for position in compress(range(len(keys)), map(id(None).__eq__, keys)):
        # the root itself is the array
        labels[position] = root_of(paths[position][2], holders[position])
    return labels  # type: ignore[return-value]


_PARENT = itemgetter(0)
