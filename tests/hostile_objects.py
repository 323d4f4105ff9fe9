"""Objects whose every method a scan must never call: each records the call in
`Recorder.calls`, and most raise or sleep 5 s, so a scan that calls one is seen and slow."""

from __future__ import annotations

import time


class Recorder:
    calls: list[str] = []


class HostileList(list):
    def __iter__(self):
        Recorder.calls.append("list.__iter__")
        raise RuntimeError("never iterate me")

    def __len__(self):
        Recorder.calls.append("list.__len__")
        time.sleep(5)
        return 0

    def __getitem__(self, index):
        Recorder.calls.append("list.__getitem__")
        raise RuntimeError("never index me")


class HostileDict(dict):
    def items(self):
        Recorder.calls.append("dict.items")
        raise RuntimeError("never")

    def __iter__(self):
        Recorder.calls.append("dict.__iter__")
        raise RuntimeError("never")

    def values(self):
        Recorder.calls.append("dict.values")
        raise RuntimeError("never")

    def keys(self):
        Recorder.calls.append("dict.keys")
        raise RuntimeError("never")

    def __len__(self):
        Recorder.calls.append("dict.__len__")
        return 0


class HostileObject:
    def __init__(self, t) -> None:
        self.t = t

    def __getattr__(self, name):
        Recorder.calls.append(f"__getattr__({name})")
        time.sleep(5)
        raise AttributeError(name)

    def __getattribute__(self, name):
        if name != "__class__":
            Recorder.calls.append(f"__getattribute__({name})")
        return object.__getattribute__(self, name)

    def __eq__(self, other):
        Recorder.calls.append("__eq__")
        raise RuntimeError("never compare me")

    __hash__ = object.__hash__


class DictProperty:
    def __init__(self, t) -> None:
        self.t = t

    @property
    def __dict__(self):  # type: ignore[override]
        Recorder.calls.append("__dict__ property")
        time.sleep(5)
        return {}

    @property
    def expensive(self):
        Recorder.calls.append("property")
        import torch

        return torch.zeros(1)
