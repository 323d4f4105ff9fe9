"""The running IPython shell, its user namespace and where it keeps the output history."""

from __future__ import annotations

import re
import sys
from typing import Any, Optional

UNDERSCORES = ("_", "__", "___")
OUTPUT_NAME = re.compile(r"_[0-9]+").fullmatch  # _12: an output history name, in C


def running_shell() -> Any:
    """The running IPython shell, or None; never imports IPython."""
    if "IPython" not in sys.modules:
        return None
    try:
        from IPython import get_ipython
    except ImportError:  # IPython half imported (its import failed, or is under way)
        return None
    return get_ipython()


def resolve_namespace(shell: Any, namespace: Optional[dict]) -> tuple[Any, dict]:
    """(shell, user namespace): by default the running shell's; a namespace that *is* the
    running shell's ``user_ns`` brings its shell along (so ``Out``, ``_`` and IPython's own
    names are not taken for user variables); outside IPython, ``__main__``'s globals."""
    if shell is None:
        running = running_shell()
        if namespace is None or getattr(running, "user_ns", None) is namespace:
            shell = running
    if namespace is None:
        if shell is not None:
            namespace = shell.user_ns
        else:
            main = sys.modules.get("__main__")
            namespace = getattr(main, "__dict__", {}) if main is not None else {}
    return shell, namespace


def namespace_to_scan(shell: Any) -> Optional[dict]:
    """The ``namespace`` argument that scans `shell`: None for the running shell (the scan
    finds it, with its output history and tracebacks), else that shell's ``user_ns``
    (scanned as plain variables: another shell's history is not ours to drop)."""
    if shell is None or shell is running_shell():
        return None
    return getattr(shell, "user_ns", None)


def hidden_namespace(shell: Any) -> dict:
    hidden = getattr(shell, "user_ns_hidden", None) if shell is not None else None
    return hidden if isinstance(hidden, dict) else {}


def ipython_names(shell: Any, namespace: dict, names) -> list[str]:
    """Those of `names` that are IPython's own (put in the namespace by IPython, as its
    hidden namespace records), not user variables."""
    hidden = hidden_namespace(shell)
    return [name for name in names if name in hidden and hidden[name] is namespace.get(name)]


def is_output_name(name: str) -> bool:
    """``_12``-style names IPython creates for output history."""
    return len(name) > 1 and name[0] == "_" and name[1:].isdigit()


# ---------------------------------------------------------------- output history


def output_history(shell: Any) -> dict:
    """IPython's ``Out`` / ``_oh`` dict (one object), or {}."""
    if shell is None:
        return {}
    out = getattr(shell, "user_ns", {}).get("_oh")
    if not isinstance(out, dict):
        out = getattr(getattr(shell, "history_manager", None), "output_hist", None)
    return out if isinstance(out, dict) else {}


def managed_underscores(shell: Any) -> dict[str, Any]:
    """``_``, ``__``, ``___`` as IPython set them (not when the user assigned them)."""
    found: dict[str, Any] = {}
    if shell is None:
        return found
    user_ns = getattr(shell, "user_ns", {})
    hidden = hidden_namespace(shell)
    hook = getattr(shell, "displayhook", None)
    for name in UNDERSCORES:
        if name not in user_ns:
            continue
        value = user_ns[name]
        if (name in hidden and hidden[name] is value) or (
            hook is not None and getattr(hook, name, None) is value
        ):
            found[name] = value
    return found


def stale_hidden_underscores(shell: Any) -> dict[str, Any]:
    """``_``, ``__``, ``___`` values IPython keeps only in ``user_ns_hidden``.

    The display hook pushes each new output into ``user_ns`` *and* ``user_ns_hidden``;
    ``%reset -f out`` then blanks only the ``user_ns`` copies, and a ``_ = ...`` of the
    user's own replaces only those too. The hidden copy keeps the old output alive, out of
    every name a user can see (and IPython 9 stops updating ``_`` after such a reset,
    taking the mismatch for a user assignment)."""
    found: dict[str, Any] = {}
    if shell is None:
        return found
    user_ns = getattr(shell, "user_ns", {})
    hidden = hidden_namespace(shell)
    for name in UNDERSCORES:
        if name in hidden and hidden[name] is not user_ns.get(name):
            found[name] = hidden[name]
    return found


def hidden_underscore_label(name: str) -> str:
    return f"<user_ns_hidden[{name!r}]>"


def displayhook_values(shell: Any) -> dict[str, Any]:
    hook = getattr(shell, "displayhook", None)
    found = {}
    for name in UNDERSCORES:
        value = getattr(hook, name, None)
        if value is not None:
            found[name] = value
    return found


def last_result(shell: Any) -> Any:
    return getattr(getattr(shell, "last_execution_result", None), "result", None)
