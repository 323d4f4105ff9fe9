"""What memory a value holds through arrays, per device, read without calling user code: the
measure a rerun uses to tell what holds the previous run's objects (see docs/cells.md,
"The memory a value holds")."""

from __future__ import annotations

import sys
import types
from collections.abc import Hashable, Iterator
from typing import Any, Optional

from ..frameworks import numpy as numpy_support
from ..frameworks import torch as torch_support

MAX_ITEMS = 64
HOST = "cpu"
_PACKAGE = __name__.partition(".")[0]


class Memory:
    """Bytes per device of the arrays added (``by_device``), each block counted once
    (``seen``: storage keys, shareable between measures so a block counts in one only)."""

    def __init__(self, seen: Optional[set] = None) -> None:
        self.by_device: dict[str, int] = {}
        self.seen: set = set() if seen is None else seen
        self.owners: list = []  # tensors with an autograd graph (see `add_graphs`)
        self.graph_nbytes: Optional[int] = None  # what their graphs saved, once measured
        torch = torch_support.loaded()
        self._tensor_types: tuple = ()
        self._tensor: Optional[type] = None
        self._grad_fn: Any = None
        if torch is not None:
            self._tensor_types = (torch.Tensor, torch.nn.Parameter)
            self._tensor = torch.Tensor
            self._grad_fn = torch._C.TensorBase.__dict__["grad_fn"].__get__
        self._ndarray = numpy_support.array_type()

    @property
    def host(self) -> int:
        return self.by_device.get(HOST, 0)

    @property
    def total(self) -> int:
        return sum(self.by_device.values())

    def _block(self, key: Hashable, device: str, nbytes: int) -> bool:
        """Count a block once; whether it was new."""
        if key in self.seen:
            return False
        self.seen.add(key)
        self.by_device[device] = self.by_device.get(device, 0) + nbytes
        return True

    def add_graphs(self, sizes: dict) -> None:
        """Count what the owners' graphs saved: ``sizes`` maps a storage key to its graph
        (`leftovers.graphs.Graph`), as the leftovers scan measured it."""
        self.graph_nbytes = 0
        for owner in self.owners:
            info = torch_support.array_info(owner)
            graph = sizes.get(info.storage_key)
            if graph is not None and ("graph", info.storage_key) not in self.seen:
                self.seen.add(("graph", info.storage_key))
                self.graph_nbytes += graph.nbytes
                self.by_device[info.device] = self.by_device.get(info.device, 0) + graph.nbytes

    def _add_subclass(self, tensor: Any, inner: bool = True) -> None:
        """A tensor subclass (torchvision's ``tv_tensors.Image``, a quantized weight),
        read with subclass dispatch off: its ``__torch_function__`` never runs. A wrapper
        subclass holds no memory of its own: its inner tensors are counted."""
        with torch_support.no_subclass_dispatch():
            info = torch_support.array_info(tensor)
            new = self._block(info.storage_key, info.device, info.storage_nbytes)
            if new and self._grad_fn(tensor) is not None:
                self.owners.append(tensor)
        if new and inner and not info.storage_nbytes and info.storage_key[0] == "tensor":
            from ..leftovers.readers import inner_tensors

            for value in inner_tensors(tensor, self._tensor):  # type: ignore[arg-type]
                self._add_subclass(value, inner=False)

    def add(self, value: Any, depth: int = 1, errors: bool = True) -> None:
        """Count what `value` holds: an array, the arrays of a tuple/list/dict `depth` levels
        down, or (`errors`) what an exception's traceback frames hold."""
        kind = type(value)
        try:
            if kind in self._tensor_types:
                info = torch_support.array_info(value)
                new = self._block(info.storage_key, info.device, info.storage_nbytes)
                if new and self._grad_fn(value) is not None:
                    self.owners.append(value)
            elif self._tensor is not None and issubclass(kind, self._tensor):
                self._add_subclass(value)
            elif kind is self._ndarray:
                info = numpy_support.array_info(value)
                self._block(info.storage_key, info.device, info.storage_nbytes)
            elif kind is bytes or kind is bytearray:
                self._block(("bytes", id(value)), HOST, len(value))
            elif depth > 0 and kind in (tuple, list, dict):
                items = dict.values(value) if kind is dict else value
                if len(items) <= MAX_ITEMS:
                    for item in items:
                        self.add(item, depth - 1, errors)
            elif errors and isinstance(value, BaseException):
                for _label, local in traceback_locals(value):
                    self.add(local, 1, errors=False)
        except Exception:  # a user object or a framework's array that cannot be read: not counted
            return


def _frames(exception: BaseException) -> Iterator[types.FrameType]:
    from ..notebook_refs import exception_chain

    seen: set[int] = set()
    for link in exception_chain(exception):
        tb = link.exception.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if id(frame) not in seen:
                seen.add(id(frame))
                yield frame
            tb = tb.tb_next


def traceback_locals(exception: BaseException) -> list[tuple[str, Any]]:
    """(label, value) for each local of the function frames on `exception`'s traceback (and
    its chained exceptions'), labelled ``<traceback: f() local 'x'>``; frames of this
    package are left out. Reads ``frame.f_locals`` of finished frames only."""
    from ..notebook_refs import frame_calls, is_function_frame

    running = set()
    frame: Optional[types.FrameType] = sys._getframe()
    while frame is not None:
        running.add(id(frame))
        frame = frame.f_back
    frames = []
    for frame in _frames(exception):
        if id(frame) in running or not is_function_frame(frame):
            continue
        module = frame.f_globals.get("__name__")
        if type(module) is str and module.partition(".")[0] == _PACKAGE:
            continue
        frames.append(frame)
    found = []
    for frame, call in zip(frames, frame_calls(frames)):  # named as the status names them
        for name, value in list(dict.items(frame.f_locals)):
            found.append((f"<traceback: {call} local {name!r}>", value))
    return found


def holding_locals(exception: BaseException, seen: Optional[set] = None) -> list[tuple[str, int]]:
    """(label, bytes) of the traceback locals of `exception` that hold arrays, biggest
    first; each block counted under the first local found holding it."""
    shared = set() if seen is None else seen
    sizes = []
    for label, value in traceback_locals(exception):
        memory = Memory(shared)
        memory.add(value, 1, errors=False)  # the error itself, in IPython's frames: not a holder
        if memory.total:
            sizes.append((label, memory.total))
    return sorted(sizes, key=lambda item: -item[1])
