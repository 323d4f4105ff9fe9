"""What autograd graphs hold: the tensors a ``grad_fn``'s graph saved that no name
reaches, counted in the entry of the tensor owning the graph. See docs/leftovers.md."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple, Optional

from ..frameworks import torch as torch_support
from ..frameworks.base import ArrayInfo
from ..units import OTHER, counted, format_bytes
from .found import Ref

NODE_BUDGET = 50_000  # graph nodes visited per scan, all owners together
FIX = "fix: .item() for a loss you only log, .detach() for a tensor you keep"
_NO_SAVED: tuple = ((), False)
SHARERS_SHOWN = 3  # other graphs named in an entry's sharing note


class Graph(NamedTuple):
    """What one block's autograd graph holds beyond named memory: ``tensors`` saved storages,
    ``nbytes`` of them counted in this entry, ``shared_nbytes`` of them also held by other
    entries' graphs (counted once, under the first owner found). ``shared_with`` names
    those other entries and ``counted_under`` where the shared memory is counted ("" for
    this entry), where the list names them (empty otherwise)."""

    tensors: int
    nbytes: int
    shared_nbytes: int
    shared_with: tuple[str, ...] = ()
    counted_under: tuple[str, ...] = ()
    leaves: int = 0  # of `tensors`: leaves it accumulates into (weights) and their grads

    def summary(self) -> str:
        """'2 saved tensors, 32 MiB', '4 leaf tensors and grads, 8 MiB' (and what other
        graphs share)."""
        saved = self.tensors - self.leaves
        parts = [f"{saved} saved tensor{'s' * (saved != 1)}"] if saved or not self.leaves else []
        if self.leaves:
            parts.append(f"{self.leaves} leaf tensor{'s' * (self.leaves != 1)} and grads")
        text = f"{', '.join(parts)}, {format_bytes(self.nbytes)}"
        if self.shared_nbytes:
            text += f" ({format_bytes(self.shared_nbytes)} {self._sharing()})"
        return text

    def _sharing(self) -> str:
        """'shared with the graph of `b`, counted once under `a`' (or 'here')."""
        if not self.shared_with:
            return "shared with other graphs, counted once"
        shown = _quoted(self.shared_with)
        plural = "s" * (len(self.shared_with) > 1)
        under = _quoted([name for name in self.counted_under if name])
        places = (["here"] if "" in self.counted_under else []) + (
            [f"under {under}"] if under else []
        )
        return f"shared with the graph{plural} of {shown}, counted once {' and '.join(places)}"

    def text(self) -> str:
        return f"autograd graph: {self.summary()} ({FIX})"


def _same(info: ArrayInfo) -> ArrayInfo:
    return info


def _quoted(names: Sequence[str]) -> str:
    """'`a`, `b`, `c` (+3 more)' for a `named_few` tuple: its names quoted, the entry after
    them (how many more) as it is."""
    shown = ", ".join(f"`{name}`" for name in names[:SHARERS_SHOWN])
    return " ".join([shown, *names[SHARERS_SHOWN:]])


def named_few(names: list[str], total: int) -> tuple[str, ...]:
    """The first `SHARERS_SHOWN` of `total` names, then one '(+N more)' entry for the rest
    (`_quoted` reads the tuple by that layout)."""
    more = total - SHARERS_SHOWN
    return tuple(names[:SHARERS_SHOWN]) + ((f"(+{more} more)",) if more > 0 else ())


def _graph_owners(arrays: dict[Hashable, list]) -> list[tuple[Hashable, Any]]:
    """(storage key, tensor) for each storage among ``arrays`` (key -> arrays on it) that a
    plain torch tensor with a ``grad_fn`` lives in (a subclass is skipped: reading its
    ``grad_fn`` could run its ``__torch_function__``)."""
    torch = torch_support.loaded()
    if torch is None:
        return []
    tensor_type = torch.Tensor
    grad_fn = torch._C.TensorBase.__dict__["grad_fn"].__get__
    owners = []
    for key, found in arrays.items():
        for array in found:
            if type(array) is not tensor_type:
                continue
            try:
                if grad_fn(array) is not None:
                    owners.append((key, array))
                    break
            except Exception:  # torch: reading a user tensor's grad_fn
                continue
    return owners


class _Saved(NamedTuple):
    info: ArrayInfo
    weak: Optional[weakref.ref]
    ident: int
    owners: list  # owner storage keys, first found first


class _Held(NamedTuple):
    """A tensor a node keeps, read like a SavedTensor (its ``data``)."""

    data: Any


def _leaf_reader(node_type: type, torch) -> Any:
    """AccumulateGrad: the leaf it accumulates into (``variable``, a parameter or any
    tensor created with requires_grad) and the leaf's ``.grad``, which the graph keeps
    alive however the leaf is named (after ``del model`` or a rerun that rebuilt it, only
    the graph holds the old weights); read through torch's own descriptors."""
    variable = node_type.__dict__.get("variable")
    following = node_type.__dict__.get("next_functions")
    if variable is None or following is None:
        return None
    grad = torch._C.TensorBase.__dict__["grad"].__get__
    plain = (torch.Tensor, torch.nn.Parameter)

    def read(node) -> tuple:
        leaf = variable.__get__(node)
        if type(leaf) not in plain:  # a subclass's getters may run its __torch_function__
            return ()
        held = grad(leaf)
        return (_Held(leaf),) if held is None else (_Held(leaf), _Held(held))

    return (read, following.__get__)


def _node_reader(node_type: type, torch) -> Any:
    """How to read a node type: (saved attribute names, next_functions reader), or None for
    a node to skip."""
    if node_type.__name__ == "AccumulateGrad" and not node_type.__flags__ & (1 << 9):
        return _leaf_reader(node_type, torch)
    base = torch._C._FunctionBase
    if issubclass(node_type, base):  # a custom autograd.Function: a user's class
        descriptors = base.__dict__
        raw, following = descriptors["_raw_saved_tensors"], descriptors["next_functions"]
        return (lambda node: (raw.__get__(node),), following.__get__)
    if node_type.__flags__ & (1 << 9):  # Py_TPFLAGS_HEAPTYPE: not one of torch's C types
        return None
    names = tuple(name for name in dir(node_type) if name.startswith("_raw_saved_"))
    descriptors = [node_type.__dict__[name] for name in names if name in node_type.__dict__]
    following = node_type.__dict__.get("next_functions")
    if following is None:
        return None
    return (lambda node: [d.__get__(node) for d in descriptors], following.__get__)


class Graphs:
    """The tensors with a ``grad_fn`` the walk met (``owners``, held until `resolve`), and
    after it, per owner storage key its `Graph` (``by_block``) and the saved storages'
    keys (``saved_keys``)."""

    def __init__(self, keep_refs: bool = False) -> None:
        self.keep_refs = keep_refs
        self.owners: list = []
        self.by_block: dict[Hashable, Graph] = {}
        self.keys_by_block: dict[Hashable, set] = {}
        self.saved: dict[Hashable, _Saved] = {}
        # storages a name reaches that graphs saved too (not counted: the name's entry is)
        self.named_saved: dict[Hashable, list] = {}  # storage key -> owners, first found first
        self.named_by_block: dict[Hashable, set] = {}  # owner -> such storages its graph saved
        self._rank: dict[Hashable, int] = {}  # owner -> its place in the order found
        self.leaf_keys: set = set()  # storages of leaves (and their grads) graphs keep
        self._leaves: set[int] = set()  # ids of those tensors, while `resolve` runs
        self.nodes = 0
        self.budget_hit = False
        self.unreadable = 0  # saved values a pack hook turned into something not a tensor
        self._readers: dict[type, Any] = {}
        # a saved tensor's metadata as the scan keys it (`numpy_sharing`: over a NumPy buffer)
        self.join: Callable[[ArrayInfo], ArrayInfo] = _same

    def resolve(self, named: set) -> None:
        """Walk the owners' graphs; ``named``: storage keys a name reaches (not counted)."""
        owners, self.owners = self.owners, []
        torch = torch_support.loaded()
        if not owners or torch is None:
            return
        grad_fn = torch._C.TensorBase.__dict__["grad_fn"].__get__
        tensor_type = torch._C.TensorBase
        for tensor in owners:
            try:
                key = torch_support.array_info(tensor).storage_key
                root = grad_fn(tensor)
            except Exception:  # torch: a user tensor's metadata and grad_fn
                continue
            if root is None:
                continue
            keys = self.keys_by_block.setdefault(key, set())
            for saved in self._saved_tensors(root, torch, tensor_type):
                self._add(saved, key, keys, named)
            if self.budget_hit:
                break
        del owners
        self._leaves.clear()
        self.by_block = self.count()

    def _saved_tensors(self, root, torch, tensor_type) -> Iterable:
        """The tensors the graph under ``root`` saved (one owner's walk, within the budget)."""
        seen = {id(root)}
        alive = [root]  # keeps each node's wrapper alive, so ids stay unique meanwhile
        stack = [root]
        readers = self._readers
        while stack:
            if self.nodes >= NODE_BUDGET:
                self.budget_hit = True
                return
            self.nodes += 1
            node = stack.pop()
            kind = type(node)
            reader = readers.get(kind, _NO_SAVED)
            if reader is _NO_SAVED:
                try:
                    reader = readers[kind] = _node_reader(kind, torch)
                except (
                    Exception
                ):  # torch: an autograd node type's readers (private API, varies by version)
                    reader = readers[kind] = None
            if reader is None:
                continue
            read_saved, read_next = reader
            try:
                saved, following = read_saved(node), read_next(node)
            except Exception:  # a node whose buffers were freed by backward()
                continue
            for value in saved:
                values = value if type(value) in (list, tuple) else (value,)
                for item in values:
                    if item is None:
                        continue
                    data = item.data  # the stored tensor; never the unpack hook
                    if data is None:
                        continue  # freed by backward()
                    if isinstance(data, tensor_type):
                        if type(item) is _Held:
                            self._leaves.add(id(data))
                        yield data
                    elif type(data) in (list, tuple):  # e.g. save_on_cpu's (device, tensor)
                        found = [part for part in data if isinstance(part, tensor_type)]
                        self.unreadable += not found
                        yield from found
                    else:
                        self.unreadable += 1
            for child, _index in following:
                if child is not None and id(child) not in seen:
                    seen.add(id(child))
                    alive.append(child)
                    stack.append(child)

    def _add(self, tensor, owner: Hashable, keys: set, named: set) -> None:
        try:
            info = self.join(torch_support.array_info(tensor))
        except Exception:  # torch: a saved tensor's metadata
            return
        key = info.storage_key
        if self._leaves and id(tensor) in self._leaves:
            self.leaf_keys.add(key)
        if key in keys:
            return
        if key in named:
            mine = self.named_by_block.setdefault(owner, set())
            if key not in mine:
                mine.add(key)
                self.named_saved.setdefault(key, []).append(owner)
            return
        keys.add(key)
        saved = self.saved.get(key)
        if saved is not None:
            saved.owners.append(owner)
            return
        weak = None
        if self.keep_refs:
            try:  # torch keeps a storage's Python object while its memory lives
                weak = weakref.ref(tensor.untyped_storage())
            except Exception:  # torch: a storage's Python object
                weak = None
        self.saved[key] = _Saved(info, weak, id(tensor), [owner])

    def count(
        self, unnamed: Optional[dict] = None, gone: frozenset = frozenset()
    ) -> dict[Hashable, Graph]:
        """Per owner block its `Graph` (``by_block``). For a drop not yet made (a dry run):
        ``unnamed``, the storages a name reaches now that would lose every name (key ->
        bytes), graph memory then; ``gone``, the owners that would go, whose share the
        owners that stay count instead."""
        by_block = {}
        for owner in self.keys_by_block:
            if owner in gone:
                continue
            keys = self._keys_of(owner, unnamed)
            counted = shared = 0
            for key in keys:
                owners = self._owners_of(key, gone)
                size = unnamed[key] if unnamed and key in unnamed else self._size(key)
                if owners[0] == owner:
                    counted += size
                if len(owners) > 1:
                    shared += size
            if keys:
                leaves = len(keys & self.leaf_keys) if self.leaf_keys else 0
                by_block[owner] = Graph(len(keys), counted, shared, leaves=leaves)
        return by_block

    def _keys_of(self, owner: Hashable, unnamed: Optional[dict]) -> set:
        keys = self.keys_by_block.get(owner, set())
        named = self.named_by_block.get(owner)
        return keys | named.intersection(unnamed) if unnamed and named else keys

    def _owners_of(self, key: Hashable, gone: frozenset = frozenset()) -> list:
        saved = self.saved.get(key)
        owners = saved.owners if saved is not None else self.named_saved[key]
        return [owner for owner in owners if owner not in gone] if gone else owners

    def _size(self, key: Hashable) -> int:
        return self.saved[key].info.storage_nbytes

    def sharing(
        self, owner: Hashable, unnamed: Optional[dict] = None, gone: frozenset = frozenset()
    ) -> tuple[list, list]:
        """The other owners whose graphs saved some of what ``owner``'s did, and the owners
        that shared memory is counted under (``owner`` itself included), in the order found
        (``unnamed``, ``gone``: as `count`)."""
        others: set = set()
        counters: set = set()
        for key in self._keys_of(owner, unnamed):
            owners = self._owners_of(key, gone)
            if len(owners) > 1:
                others.update(owners)
                counters.add(owners[0])
        others.discard(owner)
        if len(self._rank) != len(self.keys_by_block):  # owners are only ever added
            self._rank = {key: index for index, key in enumerate(self.keys_by_block)}
        rank = self._rank.__getitem__
        return sorted(others, key=rank), sorted(counters, key=rank)

    def resolve_unnamed(self, arrays: dict[Hashable, list], named: set) -> set:
        """Measure the graphs of tensors no name reaches (the deep scan's: storage key ->
        the arrays found on it), as `resolve` does for named ones; returns the keys that
        belong to those graphs (saved by one, or a tensor inside another's graph), which
        are graph memory rather than blocks of their own. ``named``: keys a name reaches.

        A tensor whose storage another unnamed tensor's graph saved is part of that graph
        (freed with it), so only the outermost owners are measured: a first walk finds
        them, the second counts their graphs."""
        owners = _graph_owners(arrays)
        if not owners:
            return set()
        probe = Graphs()
        probe.owners = [tensor for _key, tensor in owners]
        probe.resolve(named)
        outer = [
            (key, tensor)
            for key, tensor in owners
            if key not in probe.saved or all(owner == key for owner in probe.saved[key].owners)
        ]
        self.owners = [tensor for _key, tensor in outer]
        self.resolve(named | {key for key, _tensor in outer})
        return {key for key in arrays if key in self.saved}

    def add_reach(self, reach: dict[Hashable, set], named: bool = True) -> None:
        """Each root that reaches an owner's storage reaches what its graph saved (not
        `named`: only what no name reaches)."""
        if not self.saved and not (named and self.named_saved):
            return
        owners = self.keys_by_block.keys()
        for keys in reach.values():
            for owner in owners & keys:  # in C: a root may reach 10^6 blocks
                for graph_keys in self.saved_by(owner, named):
                    keys |= graph_keys

    def saved_by(self, owner: Hashable, named: bool = True) -> list[set]:
        """The storages ``owner``'s graph saved: those counted as graph memory, and (when
        `named`) those a name reaches too."""
        found = [self.keys_by_block.get(owner), named and self.named_by_block.get(owner)]
        return [keys for keys in found if keys]

    def refs(self, start: int) -> dict[Hashable, Ref]:
        """A `Ref` per saved storage (its weakref is to the storage: a saved output is a
        new tensor object each time it is read)."""
        return {
            key: Ref(None, OTHER, None, 0, start + index, "torch", s.info, s.weak, s.ident)
            for index, (key, s) in enumerate(self.saved.items())
        }

    def notes(self) -> list[str]:
        notes = []
        if self.budget_hit:
            notes.append(
                f"autograd graphs: stopped after {NODE_BUDGET:,} nodes; the graph sizes shown "
                "are lower bounds".replace(",", " ")
            )
        if self.unreadable:
            notes.append(
                f"autograd graphs: {counted(self.unreadable, 'saved value')} packed by a "
                "saved_tensors_hooks pack hook were not measured"
            )
        return notes
