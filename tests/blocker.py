"""Make some modules look uninstalled in this process (for "no torch, no numpy" tests), and
run a real IPython shell in a subprocess where they are (`run_in_blocked_shell`).

Usage in a subprocess: `import tests.blocker as b; b.block("torch", "numpy")` before
anything imports them. `import torch` then raises ModuleNotFoundError and
`importlib.util.find_spec("torch")` finds nothing, as on a machine without torch.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


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


ROOT = str(Path(__file__).resolve().parents[1])

PRELUDE = textwrap.dedent(
    """
    import sys
    sys.path.insert(0, {root!r})
    from tests.blocker import block
    block("torch", "numpy", "tensorflow", "jax", "cupy")
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "colab_gpu_guard")
    """
)


def run_in_blocked_shell(body: str) -> subprocess.CompletedProcess:
    script = PRELUDE.format(root=ROOT) + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
