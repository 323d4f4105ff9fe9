"""What holds the previous run's objects when a cell runs again, and how much it holds.

Around a rerun (a cell whose source ran before): before it runs, the identities and
lengths of the user's top-level lists, dicts, sets and deques that the source names, or
that a function of the notebook it names does (``step()`` filling a global ``cache``, or
a function that ``step()`` calls, a few levels down; a few ``len`` calls: the cell named
them, so there are few); after it, which of them grew during the run. The items a
container gained are this run's objects, and the same number of items before them the
previous run's (the cell added them last time). Two more holders are looked at: the
previous run's displayed result, still in the output history (``Out[7]``), and the
previous run's error, still alive: its traceback frames keep their locals, named as the
leftovers scan names them (``<traceback: f() local 'x'>``). IPython's
record of a failed run and the error's traceback refer to each other, so a failed run's
locals wait for the garbage collector even once a newer error has replaced it.

A `Holding` says, in words, what holds the previous run's objects (```losses`` (grew by
1 autograd graph, 16 MiB saved)`), and how many host bytes this run's and the previous
run's objects hold there: what tells that a rerun kept host memory again where the memory
counters cannot (a block the heap had freed and reuses leaves the resident size as it
was). A LEAK line names a holder only where it holds a good part of what the rerun kept
(`Holding.named`). What an autograd graph saved is what the leftovers scan measures
(`leftovers.graphs`: storages no name reaches), read from one scan bounded by
`GRAPH_SCAN_S`.

Never calls user code: lengths and items are read with the built-in types' own methods (a
subclass through its built-in part), arrays as `held_memory` reads them.
"""

from __future__ import annotations

import collections
import itertools
import keyword
import re
import types
import weakref
from typing import Any, Callable, NamedTuple, Optional

from ..units import OUTPUT_HISTORY, format_bytes
from .failed_runs import in_cycle
from .held_memory import Memory, holding_locals

GRAPH_SCAN_S = 0.5  # the leftovers scan that measures graphs, when a container gained some
MAX_NAMES = 256  # names of one source looked up before and after a rerun
CALL_DEPTH = 3  # levels of the notebook's functions a rerun cell calls, looked into
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_NAMES = frozenset(keyword.kwlist)
_LENGTH_OF = (
    (list, list.__len__),
    (dict, dict.__len__),
    (set, set.__len__),
    (collections.deque, collections.deque.__len__),
)
# items that hold no memory worth naming a container for
_EMPTY = (int, float, complex, bool, type(None), weakref.ref)
GRAPH_NOTE_MIN = 2**20  # the previous run's graphs keeping this much more are named
# what a LEAK line's holders must hold of what a rerun kept (see `Holding.named`)
EXPLAINED_SHARE = 0.5
MINOR_SHARE = 0.1
# the end of a LEAK line whose holders hold less than `EXPLAINED_SHARE` of what it kept
UNEXPLAINED = "; the rest by something else: find_leftovers() lists what is alive"


def _with_bytes(words: str, nbytes: int) -> str:
    """A holder's words with the bytes it holds of the kept memory: "`losses` (grew by 1
    item; 4 B of it)"."""
    amount = f"{format_bytes(nbytes)} of it"
    return f"{words[:-1]}; {amount})" if words.endswith(")") else f"{words} ({amount})"


class Holding(NamedTuple):
    """What holds the previous run's objects. new / previous: host bytes this run's objects
    and the previous run's hold in the holders found; text: the holders, all of them ("" when
    none was found); grew: the user's containers among them (their names); held: ((device,
    bytes), ...) the previous run's objects hold in them, per device; parts: each holder as
    (words, container name or "", ((device, bytes), ...) the previous run's objects hold in
    it, or None where that is not known: the autograd graphs in it were not measured). What
    a LEAK line names of them is `named`."""

    new: int
    previous: int
    text: str
    grew: tuple = ()
    held: tuple = ()
    parts: tuple = ()

    def named(self, kept: tuple) -> tuple[str, tuple]:
        """(the LEAK line's holders, the containers named as holding it) for a rerun that
        kept `kept` ((device, bytes), ...) again.

        A holder is named as holding the kept memory only where the previous run's objects
        in it hold at least `MINOR_SHARE` of it (on the devices it was kept on), and those
        holders only where together they hold at least `EXPLAINED_SHARE` of it. Else every
        holder found is named with the bytes it holds, and the line says the rest is held
        by something else: a list that gained a 4-byte tensor is not what keeps 4 MiB
        (the cell may call a function that fills a list it does not name). A `Holding`
        made without parts names its text; a holder whose bytes are not known counts as
        holding all of it."""
        if not self.parts:
            return self.text, self.grew
        devices = dict(kept)
        total = sum(amount for amount in devices.values() if amount > 0)
        shares = [
            (
                words,
                name,
                total
                if held is None
                else sum(nbytes for device, nbytes in held if device in devices),
            )
            for words, name, held in self.parts
        ]
        major = [entry for entry in shares if entry[2] > 0 and entry[2] >= MINOR_SHARE * total]
        if major and sum(entry[2] for entry in major) >= EXPLAINED_SHARE * total:
            return ", ".join(entry[0] for entry in major), tuple(e[1] for e in major if e[1])
        found = [entry for entry in shares if entry[2] > 0]
        if not found:
            return "", ()
        texts = [_with_bytes(words, nbytes) for words, _name, nbytes in found]
        return ", ".join(texts) + UNEXPLAINED, tuple(e[1] for e in major if e[1])


NOTHING = Holding(0, 0, "")


_BASES: dict[type, Optional[tuple]] = {}


def _base(kind: type) -> Optional[tuple]:
    """(built-in container type, its __len__) of a type, or None (memoised: read before
    every rerun for each name the cell mentions)."""
    try:
        return _BASES[kind]
    except KeyError:
        pass
    found = None
    for base, length in _LENGTH_OF:
        if kind is base or issubclass(kind, base):
            found = (base, length)
            break
    if len(_BASES) > 1024:
        _BASES.clear()
    _BASES[kind] = found
    return found


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _items(value: Any, base: type, end: int, count: int, skip: int) -> list:
    """The `count` items before the last `skip` ones of a container of length `end`, in
    order (a set's items have no order: none)."""
    start = max(0, end - skip - count)
    stop = end - skip
    if start >= stop:
        return []
    if base is list:
        return list.__getitem__(value, slice(start, stop))
    if base is dict:
        values = reversed(dict.values(value))
    elif base is collections.deque:
        values = collections.deque.__reversed__(value)
    else:
        return []
    return list(itertools.islice(values, skip, skip + stop - start))[::-1]


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
        """{name: (id, length)} of the containers `source` names, or a function of the
        notebook that it names does (``step()`` filling a global ``cache``), or one those
        call in turn (``train()`` calling ``step()``: `CALL_DEPTH` levels, `MAX_NAMES`
        names in all), read before it runs."""
        namespace = self._namespace
        if not namespace:
            return {}
        lengths: dict = {}
        seen: set = set()
        try:
            names: Any = self._mentioned(source)
            budget = MAX_NAMES
            for _level in range(CALL_DEPTH + 1):
                called = self._read_lengths(names, lengths, seen)
                if not called or budget <= 0:
                    break
                more = dict.fromkeys(itertools.chain.from_iterable(called))
                names = list(itertools.islice(more, budget))
                budget -= len(names)
        except Exception:
            return {}
        return lengths

    def _read_lengths(self, names: Any, lengths: dict, seen: set) -> list:
        """Each container among `names` not read yet: (id, length) into `lengths`; returns
        the names used by the notebook's functions among them not looked into yet (their
        ids go into `seen`)."""
        namespace, bases = self._namespace, _BASES
        called: list = []
        for name in names:
            value = namespace.get(name)
            if value is None or name in lengths:
                continue
            kind = type(value)
            if kind is types.FunctionType:
                if value.__globals__ is namespace and id(value) not in seen:
                    seen.add(id(value))
                    called.append(value.__code__.co_names)
                continue
            found = bases[kind] if kind in bases else _base(kind)
            if found is not None:
                lengths[name] = (id(value), found[1](value))
        return called

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
        except Exception:
            return NOTHING


class _Reading:
    """One `Holding`, read after one rerun: what the previous run's objects and this run's
    hold (each block counted once, under the previous run if it holds it too)."""

    def __init__(self, holders: RerunHolders, previous_cell: Optional[int]) -> None:
        self.holders = holders
        self.previous_cell = previous_cell
        self.seen: set = set()
        self.previous: list[Memory] = []
        self.new: list[Memory] = []
        # (name, what its new items hold, how many, all tensors with a graph?, exceptions,
        # what its items from before this run hold)
        self.containers: list[tuple[str, Memory, int, bool, list, Memory]] = []
        # the output history's and tracebacks' names, with what they hold
        self.others: list[tuple[str, Memory]] = []

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
        containers = [entry for entry in self.containers if entry[5].total or entry[5].owners]
        parts = [(self._container_text(*entry), entry[0], _held(entry[5])) for entry in containers]
        parts += [(text, "", _held(memory)) for text, memory in self.others]
        held: dict[str, int] = {}
        for memory in self.previous:
            for device, nbytes in memory.by_device.items():
                held[device] = held.get(device, 0) + nbytes
        return Holding(
            sum(memory.host for memory in self.new),
            sum(memory.host for memory in self.previous),
            ", ".join(part[0] for part in parts),
            tuple(entry[0] for entry in containers),
            tuple(held.items()),
            tuple(parts),
        )

    def _containers(self, before: dict) -> None:
        namespace = self.holders._namespace or {}
        for name, (ident, old) in before.items():
            value = namespace.get(name)
            if value is None or id(value) != ident:
                continue  # rebound: the container from before is not what the name holds
            found = _base(type(value))
            if found is None:
                continue
            base, length = found[0], found[1](value)
            count = length - old
            if count <= 0:
                continue
            added = _items(value, base, length, count, 0)
            previous = self.memory(self.previous)
            for item in _items(value, base, length, count, count):
                previous.add(item)
            if added and all(type(item) in _EMPTY for item in added):
                continue  # numbers, weakrefs: they hold none of the memory
            memory = self.memory(self.new)
            for item in added:
                memory.add(item)
            owners = {id(owner) for owner in memory.owners}  # items, or one level in them
            items_are_graphs = bool(added) and all(id(item) in owners for item in added)
            errors = [item for item in added if isinstance(item, BaseException)]
            self.containers.append((name, memory, count, items_are_graphs, errors, previous))

    def _output(self) -> None:
        outputs = self.holders._outputs()
        cell = self.previous_cell
        if cell in outputs:
            memory = self.memory(self.previous)
            memory.add(outputs[cell])
            if memory.total:
                self.others.append((f"`Out[{cell}]` ({OUTPUT_HISTORY})", memory))

    def _previous_error(self, error: BaseException, previous_result: Any) -> None:
        memory = self.memory(self.previous)
        memory.add(error)
        held = holding_locals(error)
        if held:
            labels = ", ".join(label for label, _size in held[:2])
            self.others.append((f"{labels} ({self._why_alive(error, previous_result)})", memory))

    def _why_alive(self, error: BaseException, previous_result: Any) -> str:
        from .. import notebook_refs

        shell, _namespace = notebook_refs.resolve_namespace(None, self.holders._namespace)
        exceptions, _tracebacks, _sources = notebook_refs.held_exceptions(shell)
        if any(exception is error for exception in exceptions):
            return "the last error's traceback: %gpu_reset releases it"
        where = f"run [{self.previous_cell}]'s error"
        if in_cycle(error, previous_result):
            return (
                f"{where}, in a reference cycle with IPython's record of the run: freed "
                "when the garbage collector runs, or by %gpu_reset"
            )
        return f"{where}, still alive"

    @staticmethod
    def _container_text(
        name: str,
        memory: Memory,
        count: int,
        items_are_graphs: bool,
        errors: list,
        previous: Optional[Memory] = None,
    ) -> str:
        graphs = len(memory.owners)
        graph_text = _plural(graphs, "autograd graph")
        if memory.graph_nbytes is not None:
            graph_text += f", {format_bytes(memory.graph_nbytes)} saved"
            kept = previous.graph_nbytes if previous is not None and previous.owners else None
            # this run's graphs may keep less than the previous run's: a rerun that rebuilt
            # the model leaves the old weights to the old graphs alone
            if kept is not None and kept >= 2 * memory.graph_nbytes + GRAPH_NOTE_MIN:
                older = len(previous.owners)  # type: ignore[union-attr]
                which = "graph keeps" if older == 1 else f"{older} graphs keep"
                graph_text += f"; the previous run's {which} {format_bytes(kept)}"
        if items_are_graphs:
            return f"`{name}` (grew by {graph_text})"
        if errors and len(errors) == count:
            labels: list[str] = []
            for error in errors:
                labels += [label for label, _size in holding_locals(error)]
            holds = f": {', '.join(list(dict.fromkeys(labels))[:2])}" if labels else ""
            return f"`{name}` (grew by {_plural(count, 'exception')}{holds})"
        text = f"`{name}` (grew by {_plural(count, 'item')}"
        return text + (f", {graph_text})" if graphs else ")")


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
