"""Leftovers grouped by the root holding them (a variable, ``Out[N]``, a traceback local,
the last exception, a compiled graph), hidden holders first and the names that only share
memory last: ``LeftoverList.groups()``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from ..units import (
    OUTPUT_HISTORY,
    TRACEBACK_FRAME,
    USER_VARIABLE,
    counted,
    escape_html,
    escape_lines,
    escape_text,
    format_bytes,
)
from .html import advice_html, groups_html
from .records import Leftover
from .registries import FINALIZER, LOGGER, MODULE_GLOBAL
from .root_refs import (
    AUTOGRAD_GRAPH,
    COMPILED_GRAPH,
    DEBUGGER_FRAME,
    EXCEPTION,
    GREW_ON_RERUN,
    NO_NAME,
    RUNNING_THREAD,
    USER_STATE,
    RootRef,
)
from .tally import RootTally, tally_roots

ENTRIES_SHOWN = 3  # per group, in the text and HTML views
GROUPS_SHOWN = 12  # in the text view (one screen)

# released by a plain %gpu_reset (reset.py drops every root but user variables;
# notebook_refs.plan_drop): output history, the last exception with its frames, the
# debugger's frames, torch.compile's graphs
RELEASED_KINDS = frozenset(
    {OUTPUT_HISTORY, TRACEBACK_FRAME, DEBUGGER_FRAME, EXCEPTION, COMPILED_GRAPH}
)
# what a plain %gpu_reset releases, by kind, as the "to free" line names it
_RELEASED_WORDS = {
    OUTPUT_HISTORY: "output history",
    TRACEBACK_FRAME: "the last error",
    EXCEPTION: "the last error",
    DEBUGGER_FRAME: "the debugger's frames",
    COMPILED_GRAPH: "torch.compile's graphs",
}
# the user's own variables: `del name` frees them
OWN_KINDS = frozenset({USER_STATE, AUTOGRAD_GRAPH, GREW_ON_RERUN})
# who keeps a hidden group's memory, as its badge says it
_BADGES = {
    GREW_ON_RERUN: "rerun leak",
    AUTOGRAD_GRAPH: "autograd graphs",
    DEBUGGER_FRAME: "kept by the debugger",
    COMPILED_GRAPH: "kept by torch.compile",
    LOGGER: "kept by logging",
    MODULE_GLOBAL: "kept by your module",
    FINALIZER: "kept by weakref.finalize",
    RUNNING_THREAD: "kept by a running thread",
    NO_NAME: "no name",
}
# what frees a registry's memory (%gpu_reset never deletes, runs or stops these), in the
# order the "to free" line names them
_REGISTRY_FIXES = {
    LOGGER: "`logger.removeHandler(handler)` for what a logger's handler keeps",
    MODULE_GLOBAL: "`del module.name` (or assigning it anew) for your modules' globals",
    FINALIZER: "a weakref.finalize keeps its arguments until it runs (`.detach()` lets go)",
    RUNNING_THREAD: "a running thread keeps its target and arguments until it ends",
}


def _joined(words: list[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


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
        """'Sequential: 8 arrays on cpu; shares 4 arrays with model', 'Tensor: no array of
        its own; shares 1 array with big' (a view whose memory is counted under big), 'list:
        2 arrays on cpu, autograd graphs keep 32 MiB' - no name, no size."""
        what = self.kind
        if self.type_name and self.kind in (USER_STATE, AUTOGRAD_GRAPH):
            what = self.type_name
        elif self.type_name and self.kind == GREW_ON_RERUN:
            what = f"{self.type_name}, {what}"
        if self.shares_only:  # a view, an alias: its memory is counted there
            text = f"{what}: no array of its own"
        else:
            text = f"{what}: {counted(self.count, 'array')}"
        if self.devices:
            text += f" on {', '.join(self.devices)}"
        if self.graph_nbytes:
            text += f", autograd graphs keep {format_bytes(self.graph_nbytes)}"
        return "; ".join(part for part in (text, self.shares_text()) if part)

    def shares_text(self) -> str:
        """'shares 4 arrays with model, 1 array with opt' ('' for none)."""
        if not self.shares:
            return ""
        return "shares " + ", ".join(
            f"{counted(share.count, 'array')} with {share.owner}" for share in self.shares
        )

    @property
    def shares_only(self) -> bool:
        """No array of its own: every array it reaches is counted in another group."""
        return not self.count and bool(self.shares)

    @property
    def single(self) -> Optional[Leftover]:
        """The group's one array where it holds just one (``x``, ``Out[7][1]``): the views
        list it once, as that entry (named from the root), not as the group and its member;
        None otherwise."""
        if self.count == 1 and len(self.entries) == 1:
            return self.entries[0]
        return None

    @property
    def reset_frees(self) -> bool:
        """A plain %gpu_reset frees memory here (a holder that only shares another's
        memory is dropped by it, but frees nothing)."""
        return self.released_by_reset and self.nbytes > 0

    @property
    def hidden_word(self) -> str:
        """The badge of a holder the user may not know keeps memory: who keeps it, in words
        ("kept by IPython" for output history and the last error; a user's list that grew
        on a flagged rerun is named for what it is)."""
        return _BADGES.get(self.kind, "kept by IPython")

    @property
    def mark(self) -> str:
        """'  [%gpu_reset releases it]' where a plain reset frees memory here; '' otherwise."""
        return "  [%gpu_reset releases it]" if self.reset_frees else ""

    def text_lines(self, entries: int = ENTRIES_SHOWN) -> list[str]:
        """The group as the text views list it: its line, then its biggest `entries`
        (indented) and how many more; a group that is one array itself is that array's
        lines. What else names an array, its autograd graph, what it shares go on lines of
        their own under its name (a line of a few hundred characters wraps unreadably)."""
        single = self.single
        if single is not None and entries:
            head, more = single.text_parts()
            more += [self.shares_text()] if self.shares else []
            return _entry_lines(head, more, self.mark, "")
        lines = [str(self)]
        for entry in self.entries[:entries]:
            lines += _entry_lines(*entry.text_parts(), "", "    ")
        more = self.count - min(len(self.entries), entries)
        if more > 0 and self.count > 1:
            lines.append(escape_text(f"    ... {more:,} more in {self.name}"))
        return lines

    def __str__(self) -> str:
        """The group's line, its names (the notebook's) escaped (`units.escape_text`)."""
        text = f"{format_bytes(self.nbytes):>10}  {self.name}  {self.describe()}{self.mark}"
        return escape_text(text)

    def to_dict(self) -> dict[str, Any]:
        from ..serialize import to_data

        return to_data(self)


LINE_WIDTH = 100  # an entry's line, the group's indent included (the views add 2 to 4)


def _entry_lines(head: str, more: list[str], mark: str, indent: str) -> list[str]:
    """An entry as the text views list it: on one line where it fits `LINE_WIDTH`; else
    what it is (and `mark`) on its line, and what else names it, its autograd graph, what
    it shares each on a line of its own, under its name (a line of a few hundred characters
    wraps unreadably). Escaped: the names are the notebook's."""
    line = indent + "  ".join([head, *more]) + mark
    if len(line) <= LINE_WIDTH:
        return [escape_text(line)]
    under = indent + " " * 14  # the bytes column (10) and its gap, then 2 in from the name
    return [escape_text(indent + head + mark)] + [escape_text(under + item) for item in more]


@dataclass(frozen=True)
class LeftoverGroups:
    """Leftovers by the root holding them: hidden holders first, then the user's own
    state, each biggest first, then the names that only share memory listed above.
    ``blocks``/``total_bytes``: every block, counted once."""

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
            return "leftovers: no arrays found"
        return (
            f"leftovers: {format_bytes(self.total_bytes)} in {counted(self.blocks, 'array')}, "
            "by what holds them"
        )

    def lines(self, groups: int = GROUPS_SHOWN, entries: int = ENTRIES_SHOWN) -> list[str]:
        """The groups (at most `groups`), each with its biggest `entries`, indented; a group
        that is one array itself is that array's line only (listed once)."""
        lines = []
        for group in self.groups[:groups]:
            lines += group.text_lines(entries)
        shown = self.groups[:groups]
        if self.total_groups > len(shown):
            rest = self.total_groups - len(shown)
            size = format_bytes(self.total_bytes - sum(group.nbytes for group in shown))
            lines.append(f"... {counted(rest, 'more holder')}, {size}")
        return lines

    def advice(self, groups: int = GROUPS_SHOWN) -> str:
        """What frees the memory of the first `groups` groups, in one line: ``del`` for the
        user's own variables, ``%gpu_reset`` for what it releases, named by kind; '' when
        neither is listed."""
        shown = self.groups[:groups]
        parts = []
        if any(group.kind in OWN_KINDS and group.nbytes for group in shown):
            parts.append("`del name` for your own variables")
        kinds_released = [group.kind for group in shown if group.released_by_reset]
        # a holder named on a row only ("also: Out[3]"): `del x` alone frees nothing
        kinds_released += [
            ref.kind
            for group in shown
            for entry in group.entries[:ENTRIES_SHOWN]
            for ref in entry.shared_roots
            if ref.kind in RELEASED_KINDS
        ]
        released = dict.fromkeys(_RELEASED_WORDS[kind] for kind in kinds_released)
        if released:
            parts.append(f"%gpu_reset releases {_joined(list(released))}")
        kinds = {group.kind for group in shown if group.nbytes}
        parts += [fix for kind, fix in _REGISTRY_FIXES.items() if kind in kinds]
        return f"to free: {'; '.join(parts)}" if parts else ""

    def __str__(self) -> str:
        if not self.groups:
            return "leftovers: no arrays found"
        lines = [self.heading()] + [f"  {line}" for line in self.lines()]
        advice = self.advice()
        lines += [f"  {advice}"] if advice else []
        return escape_lines(lines + [f"  note: {note}" for note in self.notes])

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self) if not cycle else "LeftoverGroups(...)")

    def _repr_html_(self) -> str:
        if not self.groups:
            return "<div>no arrays found</div>"
        return (
            groups_html(self.groups)
            + advice_html(self.advice())
            + "".join(f"<div>note: {escape_html(note)}</div>" for note in self.notes)
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
    refs: Optional[dict[str, RootRef]] = None  # a group's name -> its root's group record


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
    refs: dict[str, RootRef] = {}
    for item in kept:
        for ref in (item.root, *item.shared_roots) if item.root is not None else ():
            refs.setdefault(ref.name, ref)
    blocks = Blocks(
        [item.nbytes for item in kept],
        [item.holder for item in kept],
        [item.device for item in kept],
        # an entry read from a document written before its group was kept: its own group
        [item.root.name if item.root is not None else item.name for item in kept],
        [index for index, item in enumerate(kept) if item.shared_roots],
        {index: item.graph_nbytes for index, item in enumerate(kept) if item.graph_nbytes},
        refs=refs,
    )
    return blocks, kept


def _reaches(root: str, names: Iterable[str]) -> bool:
    """Whether any of `names` is the variable `root` or a path under it (``b`` for ``b``;
    ``c[0]``, ``tr.history`` for ``c``, ``tr``)."""
    under = (f"{root}[", f"{root}.")
    return any(name == root or name.startswith(under) for name in names)


def _named_on_row(root: str, position: int, items, owner: Optional[RootTally]) -> bool:
    """Whether the listed row of block `position` (among its group's first entries) names
    `root` or a path under it in its "also:" (``b`` for ``b = a``, ``c[0]`` for ``c = [a]``)."""
    if owner is None or position not in owner.positions[:ENTRIES_SHOWN]:
        return False
    return _reaches(root, items[position].shared_with)


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
    order = tally_roots(blocks, entries_per_group)
    shares: dict[str, dict[str, int]] = {}
    counted: set = set()  # (a root, a block) whose share is counted
    # roots that share a block whose listed row does not name them ("also: b, c[0]")
    unnamed_shares: set[str] = set()
    refs = dict(blocks.refs or {})
    for position in blocks.shared_at:
        owner = blocks.roots[position]
        others = items[position].shared_roots
        by_output = blocks.holders[position] == OUTPUT_HISTORY
        beside_out = any(other.is_output for other in others)
        for ref in others:
            other = ref.name
            if other == owner:
                continue
            if (
                other not in order
                and ref.kind == OUTPUT_HISTORY
                and (by_output or (beside_out and not ref.is_output))
            ):
                continue  # `_`, `__`, `_18` beside `Out[18]`: the entry's row names them
            counts = shares.setdefault(other, {})
            counts[owner] = counts.get(owner, 0) + 1
            counted.add((other, position))
            if not _named_on_row(other, position, items, order.get(owner)):
                unnamed_shares.add(other)
            if other not in order:  # reaches only blocks another group counts
                order[other] = RootTally(ref.holder)
                refs.setdefault(other, ref)
    # a variable reaching a container another root reached first (``b = {'x': a}``), and
    # Out[N] showing one (``model`` as a cell's last line: `del model` alone frees nothing)
    for other, positions in (blocks.aliased or {}).items():
        for position in positions:
            owner = roots[position]
            if owner == other or (other, position) in counted:
                continue
            counts = shares.setdefault(other, {})
            counts[owner] = counts.get(owner, 0) + 1
            unnamed_shares.add(other)
            if other not in order:
                ref = refs.get(other)
                order[other] = RootTally(ref.holder if ref is not None else USER_VARIABLE)
    graph_bytes = dict.fromkeys(order, 0)
    for position, nbytes in (blocks.graphs or {}).items():
        graph_bytes[roots[position]] += nbytes
    types = root_types or {}
    grown = frozenset(grown_on_rerun)
    made = []
    for name, tally in order.items():
        if not tally.count and name not in unnamed_shares:
            continue  # `b = a`, `Out[3]` showing `x`: the row of what it shares names it
        entries = tuple(items[position] for position in tally.positions)
        graph = graph_bytes[name]
        ref = refs.get(name)
        kind = ref.kind if ref is not None else tally.holder
        if kind == USER_STATE and graph:
            kind = AUTOGRAD_GRAPH
        elif kind == USER_STATE and _reaches(name, grown):  # `tr` for `tr.history`
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
    # the holders of memory first, hidden ones (output history, frames, graphs) before the
    # user's own, each biggest first; then the names that only share memory listed above
    # (a view, `Out[N]` showing `model`); equal sizes in the order found
    made.sort(key=lambda group: (group.shares_only, not group.hidden, -group.nbytes))
    return LeftoverGroups(tuple(made), len(blocks.sizes), sum(blocks.sizes), tuple(notes))
