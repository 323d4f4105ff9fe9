"""What holds the previous run's objects when a cell runs again, and how much it holds: one
`Holder` record per holder found (a user's container that grew, the output history, a
failed run's traceback); see docs/cells.md, "What holds a rerun's earlier objects"."""

from __future__ import annotations

import keyword
import re
import weakref
from typing import Any, Callable, NamedTuple, Optional

from .failed_runs import in_cycle
from .held_memory import Memory, holding_locals
from .watched import CACHE as CACHED
from .watched import MAX_NAMES, OBJECT, Watched, length_now, reader_of, watch

GRAPH_SCAN_S = 0.5  # the leftovers scan that measures graphs, when a container gained some
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_NAMES = frozenset(keyword.kwlist)
# items that hold no memory worth naming a container for
_EMPTY = (int, float, complex, bool, type(None), weakref.ref)
# what a LEAK line's holders must hold of what a rerun kept (see `Holding.named`)
EXPLAINED_SHARE = 0.5
MINOR_SHARE = 0.1

# what holds the previous run's objects (`Holder.kind`)
VARIABLE = "variable"  # a user's list, dict, set or deque that grew during the rerun
CACHE = "cache"  # a functools cache (named by its function) that grew during the rerun
CYCLE = "cycle"  # what a name held before the rerun, rebound, alive in unreachable cycles
OUTPUT = "output"  # the previous run's displayed result, in the output history
TRACEBACK = "traceback"  # the previous run's error: its traceback frames' locals
# what a container's new items all are (`Growth.items`)
ITEMS = "item"
GRAPHS = "autograd graph"
EXCEPTIONS = "exception"
# why the previous run's error is still alive (`Holder.alive`)
LAST_ERROR = "last error"  # it is the error IPython keeps as the last one
IN_CYCLE = "in a cycle"  # in a reference cycle with IPython's record of the run
ALIVE = "alive"  # something else holds it


class Growth(NamedTuple):
    """How a user's container grew during a rerun: `count` items, all `items` (`ITEMS`,
    `GRAPHS`, `EXCEPTIONS`); `graphs`: the tensors with an autograd graph among them (or
    one level in), `graph_nbytes` what those saved (None: not measured); `earlier_graphs`
    / `earlier_nbytes`: the same of the previous run's items, where measured (this run's
    graphs may keep less than the previous run's: a rerun that rebuilt the model leaves
    the old weights to the old graphs alone); `locals`: the new exceptions' traceback
    locals that hold memory (the first two, as the leftovers scan names them)."""

    count: int
    items: str
    graphs: int
    graph_nbytes: Optional[int]
    earlier_graphs: int = 0
    earlier_nbytes: Optional[int] = None
    locals: tuple[str, ...] = ()


class Holder(NamedTuple):
    """One thing that holds the previous run's objects, made where it is found.

    kind: `VARIABLE`, `OUTPUT` or `TRACEBACK`; name: the name a user types ("losses",
    "Out[7]"; "" for a traceback); held: ((device, bytes), ...) the previous run's objects
    hold in it, or None where that is not known (its autograd graphs were not measured);
    growth: how a `VARIABLE` grew; cell: the `OUTPUT` entry's number, or the failed run of
    a `TRACEBACK`; locals: a `TRACEBACK`'s frame locals that hold memory (the first two);
    alive: why that error is still alive (`LAST_ERROR`, `IN_CYCLE`, `ALIVE`). Worded by
    `history_text.holder_words`."""

    kind: str
    name: str
    held: Optional[tuple]
    growth: Optional[Growth] = None
    cell: Optional[int] = None
    locals: tuple[str, ...] = ()
    alive: str = ""
    what: str = ""  # a `CYCLE`'s object's class

    def share(self, kept: tuple) -> int:
        """The bytes it holds of `kept` ((device, bytes), ...), on the devices kept on; all
        of it where its bytes are not known."""
        devices = dict(kept)
        if self.held is None:
            return sum(amount for amount in devices.values() if amount > 0)
        return sum(nbytes for device, nbytes in self.held if device in devices)


class Named(NamedTuple):
    """What a LEAK line names as holding what a rerun kept (`Holding.named`): holders;
    explained: whether they hold most of it (else each is named with its bytes, and the
    rest is said to be held by something else); grew: the user's containers named as
    holding it."""

    holders: tuple[Holder, ...]
    explained: bool
    grew: tuple[str, ...]


NAMED_NONE = Named((), True, ())


class Holding(NamedTuple):
    """What holds the previous run's objects. new / previous: host bytes this run's objects
    and the previous run's hold in the holders found; holders: each of them; held:
    ((device, bytes), ...) the previous run's objects hold in them. What a LEAK line names
    of them is `named`."""

    new: int
    previous: int
    holders: tuple[Holder, ...] = ()
    held: tuple = ()

    def named(self, kept: tuple) -> Named:
        """What a LEAK line names for a rerun that kept `kept` ((device, bytes), ...) again.

        A holder is named as holding the kept memory only where the previous run's objects
        in it hold at least `MINOR_SHARE` of it (on the devices it was kept on), and those
        holders only where together they hold at least `EXPLAINED_SHARE` of it. Else every
        holder found is named with the bytes it holds, and the line says the rest is held
        by something else: a list that gained a 4-byte tensor is not what keeps 4 MiB
        (the cell may call a function that fills a list it does not name). A holder whose
        bytes are not known counts as holding all of it."""
        total = sum(amount for _device, amount in kept if amount > 0)
        shares = [(holder, holder.share(kept)) for holder in self.holders]
        found = [(holder, nbytes) for holder, nbytes in shares if nbytes > 0]
        major = [(holder, nbytes) for holder, nbytes in found if nbytes >= MINOR_SHARE * total]
        grew = tuple(holder.name for holder, _nbytes in major if holder.kind == VARIABLE)
        if major and sum(nbytes for _holder, nbytes in major) >= EXPLAINED_SHARE * total:
            return Named(tuple(holder for holder, _nbytes in major), True, grew)
        if not found:
            return NAMED_NONE
        return Named(tuple(holder for holder, _nbytes in found), False, grew)


NOTHING = Holding(0, 0)


class RerunHolders:
    """The lengths read before a rerun, and the `Holding` after it."""

    def __init__(self, namespace: Optional[dict], outputs: Callable[[], dict], maxlen: int):
        self._namespace = namespace
        self._outputs = outputs
        self._maxlen = maxlen
        self._names: dict[str, tuple] = {}  # source -> the names it mentions

    def _mentioned(self, source: str) -> tuple:
        names = self._names.get(source)
        if names is None:
            if len(self._names) > 2 * self._maxlen:
                self._names.clear()
            found = dict.fromkeys(_NAME.findall(source))
            names = tuple(name for name in found if name not in _NOT_NAMES)[:MAX_NAMES]
            self._names[source] = names
        return names

    def before(self, source: str) -> dict:
        """{label: `watched.Watched`} of the containers `source` names, or reaches in one
        step: a function of the notebook it names fills (``step()`` filling a global
        ``cache``, or a function that ``step()`` calls: `CALL_DEPTH` levels), an object's
        attribute (``trainer.history``), a list a module's hook fills, a user module's
        global (``nbutils._cache``), a functools cache (`MAX_NAMES` names in all), read
        before it runs."""
        return watch(self._namespace, self._mentioned(source))

    def clear(self) -> None:
        self._names.clear()

    def after(self, before: dict, result: Any, previous: Any) -> Holding:
        """What holds the previous run's objects after a rerun: `before` from `before()`,
        `result` this run's ``ExecutionResult``, `previous` the previous run's
        `cell_reruns.PreviousRun` (its cell, whether it displayed a result, a weakref to
        its ``ExecutionResult`` when it failed)."""
        if (
            not before
            and not previous.displayed
            and previous.failed is None
            and getattr(result, "result", None) is None
            and getattr(result, "error_in_exec", None) is None
        ):
            return NOTHING  # nothing could hold either run's objects: most reruns
        try:
            failed = previous.failed() if previous.failed is not None else None
            return _Reading(self, previous.cell).read(before, previous.displayed, result, failed)
        except Exception:  # user objects, a framework, the leftovers scan: nothing found held
            return NOTHING


class _Grown(NamedTuple):
    """A user's container that grew during a rerun, as read: its name, what its new items
    hold (`new`) and how many there are, whether they all are tensors with a graph, the
    exceptions among them, and what its items from before this run hold (`earlier`)."""

    name: str
    new: Memory
    count: int
    all_graphs: bool
    errors: list
    earlier: Memory
    kind: str = VARIABLE


class _Reading:
    """One `Holding`, read after one rerun: what the previous run's objects and this run's
    hold (each block counted once, under the previous run if it holds it too)."""

    def __init__(self, holders: RerunHolders, previous_cell: Optional[int]) -> None:
        self.holders = holders
        self.previous_cell = previous_cell
        self.seen: set = set()
        self.previous: list[Memory] = []
        self.new: list[Memory] = []
        self.containers: list[_Grown] = []
        # the output history's entry and the previous error's traceback, with what they
        # hold (`Holder.held` is filled in once the graphs are measured)
        self.others: list[tuple[Holder, Memory]] = []

    def memory(self, into: list) -> Memory:
        memory = Memory(self.seen)
        into.append(memory)
        return memory

    def read(
        self, before: dict, displayed_before: bool, result: Any, previous_result: Any
    ) -> Holding:
        self._containers(before)
        if displayed_before:
            self._output()
        error = getattr(previous_result, "error_in_exec", None)
        if isinstance(error, BaseException):
            self._previous_error(error, previous_result)
        value = getattr(result, "result", None)
        if value is not None:
            cell = getattr(result, "execution_count", None)
            if self.holders._outputs().get(cell) is value:
                self.memory(self.new).add(value)
        error = getattr(result, "error_in_exec", None)
        if isinstance(error, BaseException):
            self.memory(self.new).add(error)
        memories = self.previous + self.new
        if any(memory.owners for memory in memories):
            sizes = _graph_sizes(self.holders._namespace)
            if sizes is not None:
                for memory in memories:
                    memory.add_graphs(sizes)
        # a container holds the previous run's objects where its items from before this
        # run's hold memory: one that gained a string names nothing
        holders = [
            Holder(grown.kind, grown.name, _held(grown.earlier), _growth(grown))
            for grown in self.containers
            if grown.earlier.total or grown.earlier.owners
        ]
        holders += [holder._replace(held=_held(memory)) for holder, memory in self.others]
        held: dict[str, int] = {}
        for memory in self.previous:
            for device, nbytes in memory.by_device.items():
                held[device] = held.get(device, 0) + nbytes
        return Holding(
            sum(memory.host for memory in self.new),
            sum(memory.host for memory in self.previous),
            tuple(holders),
            tuple(held.items()),
        )

    def _containers(self, before: dict) -> None:
        namespace = self.holders._namespace or {}
        for label, watched in before.items():
            if watched.kind == OBJECT:
                self._rebound(watched)
                continue
            if watched.name is not None and namespace.get(watched.name) is not watched.container:
                continue  # rebound: the container from before is not what the name holds
            length = length_now(watched)
            count = length - watched.length
            if count <= 0:
                continue
            items = reader_of(watched)
            added = items(length, count, 0)
            previous = self.memory(self.previous)
            for item in items(length, count, count):
                previous.add(item)
            if added and all(type(item) in _EMPTY for item in added):
                continue  # numbers, weakrefs: they hold none of the memory
            memory = self.memory(self.new)
            for item in added:
                memory.add(item)
            owners = {id(owner) for owner in memory.owners}  # items, or one level in them
            all_graphs = bool(added) and all(id(item) in owners for item in added)
            errors = [item for item in added if isinstance(item, BaseException)]
            kind = CACHE if watched.kind == CACHED else VARIABLE
            self.containers.append(_Grown(label, memory, count, all_graphs, errors, previous, kind))

    def _rebound(self, watched: Watched) -> None:
        """A name the rerun rebound, whose object from before is still alive only through
        unreachable reference cycles (``model = Net()`` where the model hooks its own
        bound method): garbage the collector has not freed yet, with the arrays a
        collection would free with it (the previous run's objects)."""
        from .cycles import dying_with, held_under  # a flagged rerun's, never at %load_ext

        ref = watched.container
        old = ref()
        if old is None or (self.holders._namespace or {}).get(watched.name) is old:
            return
        what = type(old).__name__
        del old
        memory = self.memory(self.previous)
        kinds = tuple(kind for kind in (memory._tensor, memory._ndarray) if kind is not None)
        arrays = dying_with(ref, lambda item: issubclass(type(item), kinds))
        if arrays is None:
            return
        for array in arrays:
            memory.add(array, 0, errors=False)
        del arrays
        self.others.append((Holder(CYCLE, watched.name or "", None, what=what), memory))
        # what the object the name holds now holds: this run's, where the host figure
        # is not exact
        now = (self.holders._namespace or {}).get(watched.name)
        if now is not None:
            new = self.memory(self.new)
            for array in held_under(now, lambda item: issubclass(type(item), kinds)):
                new.add(array, 0, errors=False)

    def _output(self) -> None:
        outputs = self.holders._outputs()
        cell = self.previous_cell
        if cell in outputs:
            memory = self.memory(self.previous)
            memory.add(outputs[cell])
            if memory.total:
                self.others.append((Holder(OUTPUT, f"Out[{cell}]", None, cell=cell), memory))

    def _previous_error(self, error: BaseException, previous_result: Any) -> None:
        memory = self.memory(self.previous)
        memory.add(error)
        held = holding_locals(error)
        if held:
            labels = tuple(label for label, _size in held[:2])
            alive = self._why_alive(error, previous_result)
            holder = Holder(
                TRACEBACK, "", None, cell=self.previous_cell, locals=labels, alive=alive
            )
            self.others.append((holder, memory))

    def _why_alive(self, error: BaseException, previous_result: Any) -> str:
        from .. import notebook_refs
        from ..notebook_refs.roots import users_exceptions  # the user's: not our UsageError

        shell, _namespace = notebook_refs.resolve_namespace(None, self.holders._namespace)
        exceptions, _tracebacks, _sources = users_exceptions(shell)
        if any(exception is error for exception in exceptions):
            return LAST_ERROR
        return IN_CYCLE if in_cycle(error, previous_result) else ALIVE


def _growth(grown: _Grown) -> Growth:
    """How `grown` grew, as its words say it."""
    new, earlier = grown.new, grown.earlier
    if grown.all_graphs:
        items = GRAPHS
    elif grown.errors and len(grown.errors) == grown.count:
        items = EXCEPTIONS
    else:
        items = ITEMS
    labels: list[str] = []
    if items == EXCEPTIONS:
        for error in grown.errors:
            labels += [label for label, _size in holding_locals(error)]
    return Growth(
        grown.count,
        items,
        len(new.owners),
        new.graph_nbytes,
        len(earlier.owners),
        earlier.graph_nbytes if earlier.owners else None,
        tuple(dict.fromkeys(labels))[:2],
    )


def _held(memory: Memory) -> Optional[tuple]:
    """((device, bytes), ...) `memory` counted; None where it has autograd graphs that
    were not measured (the scan did not finish): what they saved is not known."""
    if memory.owners and memory.graph_nbytes is None:
        return None
    return tuple(memory.by_device.items())


def _graph_sizes(namespace: Optional[dict]) -> Optional[dict]:
    """storage key -> `Graph` for every named tensor's autograd graph, from one leftovers
    scan of the notebook (None when it did not finish within `GRAPH_SCAN_S`)."""
    from ..leftovers.scan import scan

    done = scan(namespace=namespace, budget_s=GRAPH_SCAN_S)
    if not done.leftovers.complete:
        return None
    return done.walker.graphs.by_block
