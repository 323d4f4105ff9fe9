"""Make some modules look uninstalled in this process (for "no torch, no numpy" tests).

Usage in a subprocess: `import tests.blocker as b; b.block("torch", "numpy")` before
anything imports them. `import torch` then raises ModuleNotFoundError and
`importlib.util.find_spec("torch")` finds nothing, as on a machine without torch.
"""

from __future__ import annotations

import sys


class _Blocker:
    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, fullname, path=None, target=None):
        if fullname.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def block(*names: str) -> None:
    for name in list(sys.modules):
        if name.partition(".")[0] in names:
            raise RuntimeError(f"{name} is already imported; block it earlier")
    sys.meta_path.insert(0, _Blocker(set(names)))
