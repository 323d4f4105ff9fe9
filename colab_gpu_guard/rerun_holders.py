"""What holds the previous run's objects, when a rerun kept memory again.

At the end of a run that kept memory, the lengths of the user's top-level lists, dicts,
sets and deques that the cell's source names are noted (a few ``len`` calls: the cell
named them, so there are few). When the next run of that source keeps memory again (a
flagged rerun, rare), the lengths are read again: a container that grew holds the new
run's objects, and the ones before (``losses`` grew by 1 item; for a list, how many of the
new items are tensors with an autograd graph). The previous run's displayed result still
in the output history (``Out[7]``) is named too.

Never calls user code: lengths are read with the built-in type's own ``__len__`` (a
subclass is read through its built-in part), items by the built-in list's slicing.
"""

from __future__ import annotations

import collections
import re
from typing import Any, Callable, Optional

from .frameworks import torch as torch_support
from .output_warning import held_arrays
from .units import OUTPUT_HISTORY

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LENGTH_OF = (
    (list, list.__len__),
    (dict, dict.__len__),
    (set, set.__len__),
    (collections.deque, collections.deque.__len__),
)


def _length(value: Any) -> Optional[int]:
    kind = type(value)
    for base, length in _LENGTH_OF:
        if kind is base or issubclass(kind, base):
            return length(value)
    return None


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _graphs(items: list) -> int:
    """How many of `items` are torch tensors carrying an autograd graph."""
    tensor = torch_support.tensor_type()
    if tensor is None:
        return 0
    # exact tensors only: a subclass's __torch_function__ would run on reading grad_fn
    return sum(1 for item in items if type(item) is tensor and item.grad_fn is not None)


class RerunHolders:
    """Lengths noted per cell source at the end of runs that kept memory, and the names of
    what grew when a rerun keeps memory again."""

    def __init__(self, namespace: Optional[dict], outputs: Callable[[], dict], maxlen: int):
        self._namespace = namespace
        self._outputs = outputs
        self._maxlen = maxlen
        self._names: dict[str, tuple] = {}  # source -> the names it mentions
        self._lengths: dict[str, dict] = {}  # source -> {name: length} at its last run's end

    def _mentioned(self, source: str) -> tuple:
        names = self._names.get(source)
        if names is None:
            if len(self._names) > 2 * self._maxlen:
                self._names.clear()
            names = self._names[source] = tuple(dict.fromkeys(_NAME.findall(source)))
        return names

    def _read(self, source: str) -> dict:
        namespace = self._namespace
        if not namespace:
            return {}
        lengths = {}
        for name in self._mentioned(source):
            if name in namespace:
                length = _length(namespace[name])
                if length is not None:
                    lengths[name] = length
        return lengths

    def note(self, source: str) -> None:
        """Note the lengths at the end of a run of `source` that kept memory."""
        try:
            lengths = self._read(source)
        except Exception:
            return
        self._lengths.pop(source, None)
        self._lengths[source] = lengths
        if len(self._lengths) > 2 * self._maxlen:
            for stale in list(self._lengths)[: self._maxlen]:
                del self._lengths[stale]

    def forget(self, source: str) -> None:
        self._lengths.pop(source, None)

    def held_by(self, source: str, previous_cell: Optional[int]) -> str:
        """What holds the previous run's objects ("`losses` (grew by 1 item)", "`Out[7]`
        (output history)"), as far as the lengths and the output history tell; else ""."""
        try:
            return self._held_by(source, previous_cell)
        except Exception:
            return ""

    def _held_by(self, source: str, previous_cell: Optional[int]) -> str:
        found = []
        before = self._lengths.get(source)
        if before is not None:
            for name, length in self._read(source).items():
                old = before.get(name)
                if old is None or length <= old:
                    continue
                text = f"`{name}` (grew by {_plural(length - old, 'item')}"
                value = self._namespace[name] if self._namespace else None
                if issubclass(type(value), list):
                    graphs = _graphs(list.__getitem__(value, slice(old, length)))
                    if graphs:
                        text += f", {_plural(graphs, 'autograd graph')}"
                found.append(text + ")")
        if previous_cell is not None:
            outputs = self._outputs()
            if previous_cell in outputs and held_arrays(outputs[previous_cell], True):
                found.append(f"`Out[{previous_cell}]` ({OUTPUT_HISTORY})")
        return ", ".join(found)

    def clear(self) -> None:
        self._lengths.clear()
