"""Leftovers grouped by the root holding them (a variable, ``Out[N]``, a traceback local,
the last exception, a compiled graph), hidden holders first: ``LeftoverList.groups()``."""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ..units import OUTPUT_HISTORY, TRACEBACK_FRAME, USER_VARIABLE, format_bytes
from .html import groups_html
from .naming import listed_names
from .records import Leftover
from .tally import UNNAMED, RootTally, holder_of_root, root_of, tally_roots

ENTRIES_SHOWN = 3  # per group, in the text and HTML views
GROUPS_SHOWN = 12  # in the text view (one screen)

# what a group's holder is, in words
USER_STATE = "user variable"
AUTOGRAD_GRAPH = "autograd graph"
DEBUGGER_FRAME = "debugger frame"
EXCEPTION = "exception"
COMPILED_GRAPH = "compiled graph"
GREW_ON_RERUN = "grew on rerun"  # a user container a rerun flagged as a leak added to
NO_NAME = "no name in the notebook"  # what refers to it: the entry says (deep scan)
# released by a plain %gpu_reset (reset.py drops every root but user variables;
# notebook_refs.plan_drop): output history, the last exception with its frames, the
# debugger's frames, torch.compile's graphs
RELEASED_KINDS = frozenset(
    {OUTPUT_HISTORY, TRACEBACK_FRAME, DEBUGGER_FRAME, EXCEPTION, COMPILED_GRAPH}
)


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
        """'Sequential: 8 arrays on cpu; shares 4 with model', 'Tensor: no array of its own;
        shares 1 with big' (a view whose block is counted under big) - no name, no size."""
        what = self.kind
        if self.type_name and self.kind in (USER_STATE, GREW_ON_RERUN):
            what = self.type_name if self.kind == USER_STATE else f"{self.type_name}, {what}"
        if not self.count and self.shares:  # a view, an alias: its memory is counted there
            text = f"{what}: no array of its own"
        else:
            text = f"{what}: {self.count:,} {'array' if self.count == 1 else 'arrays'}"
        if self.devices:
            text += f" on {', '.join(self.devices)}"
        if self.graph_nbytes:
            text += f", autograd graphs keep {format_bytes(self.graph_nbytes)}"
        if self.shares:
            text += "; shares " + ", ".join(f"{s.count:,} with {s.owner}" for s in self.shares)
        return text

    @property
    def reset_frees(self) -> bool:
        """A plain %gpu_reset frees memory here (a holder that only shares another's
        memory is dropped by it, but frees nothing)."""
        return self.released_by_reset and self.nbytes > 0

    @property
    def hidden_word(self) -> str:
        """The badge of a hidden holder: a user's list that grew on a flagged rerun is no
        secret, so it is named for what it is."""
        return "rerun leak" if self.kind == GREW_ON_RERUN else "hidden"

    def __str__(self) -> str:
        mark = "  [%gpu_reset releases it]" if self.reset_frees else ""
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
        if not self.blocks and not self.groups:
            return "leftovers: no arrays held"
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
    aliased: Optional[dict[str, list[int]]] = None  # a variable -> blocks it reaches as an alias


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
    grown_on_rerun: Iterable[str] = (),
) -> LeftoverGroups:
    """Group `items` (a `LeftoverList` or any list of entries) by root.

    blocks: the list's columns when it has them (a scan's list: entries are then made only
    for the shown and the shared blocks); root_types: root name -> its type's name;
    grown_on_rerun: user variables that grew on a rerun flagged as a leak.
    entries_per_group: how many entries each group keeps (None: all; anything else but a
    whole number >= 0 is a ValueError). Each group's root, count, bytes and devices come
    from `tally` (worked per run of one root).
    """
    if entries_per_group is not None and (
        not isinstance(entries_per_group, int) or entries_per_group < 0
    ):
        raise ValueError(
            f"entries_per_group must be a whole number >= 0 or None, not {entries_per_group!r}"
        )
    if blocks is None:
        blocks, items = _columns_of(items)
    roots = blocks.roots
    order = tally_roots(roots, blocks.sizes, blocks.holders, blocks.devices, entries_per_group)
    shares: dict[str, dict[str, int]] = {}
    counted: set = set()  # (a root, a block) whose share is counted
    for position in blocks.shared_at:
        owner = blocks.roots[position]
        others = dict.fromkeys(map(root_of, listed_names(items[position].shared_with)))
        by_output = blocks.holders[position] == OUTPUT_HISTORY
        beside_out = any(name.startswith("Out[") for name in others)
        for other in others:
            if other == owner:
                continue
            if (
                other not in order
                and holder_of_root(other) == OUTPUT_HISTORY
                and (by_output or (beside_out and not other.startswith("Out[")))
            ):
                continue  # `_`, `__`, `_18` beside `Out[18]`: the entry's row names them
            counts = shares.setdefault(other, {})
            counts[owner] = counts.get(owner, 0) + 1
            counted.add((other, position))
            if other not in order:  # reaches only blocks another group counts
                order[other] = RootTally(holder_of_root(other))
    # a variable reaching a container another root reached first (``b = {'x': a}``)
    for other, positions in (blocks.aliased or {}).items():
        for position in positions:
            owner = roots[position]
            if owner == other or (other, position) in counted:
                continue
            counts = shares.setdefault(other, {})
            counts[owner] = counts.get(owner, 0) + 1
            if other not in order:
                order[other] = RootTally(USER_VARIABLE)
    graph_bytes = dict.fromkeys(order, 0)
    for position, nbytes in (blocks.graphs or {}).items():
        graph_bytes[roots[position]] += nbytes
    types = root_types or {}
    grown = frozenset(grown_on_rerun)
    made = []
    for name, tally in order.items():
        entries = tuple(items[position] for position in tally.positions)
        graph = graph_bytes[name]
        kind = kind_of(name, tally.holder)
        if kind == USER_STATE and graph:
            kind = AUTOGRAD_GRAPH
        elif kind == USER_STATE and name in grown:
            kind = GREW_ON_RERUN
        made.append(
            LeftoverGroup(
                name=name,
                holder=tally.holder,
                kind=kind,
                hidden=kind != USER_STATE,
                released_by_reset=kind in RELEASED_KINDS,
                count=tally.count,
                nbytes=tally.nbytes,
                devices=tuple(tally.devices),
                type_name=types.get(name, ""),
                shares=tuple(GroupShare(o, n) for o, n in shares.get(name, {}).items()),
                graph_nbytes=graph,
                entries=entries,
            )
        )
    # hidden holders first, then by size; equal sizes in the order found
    made.sort(key=lambda group: (not group.hidden, -group.nbytes))
    return LeftoverGroups(tuple(made), len(blocks.sizes), sum(blocks.sizes), tuple(notes))
