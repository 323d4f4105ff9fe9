"""The leftovers scan told what the cell engine knows: which of the notebook's containers
grew on a rerun flagged as a leak (listed with the holders the user did not knowingly keep).
The scan takes it as a parameter; this is where the two meet."""

from __future__ import annotations

from typing import Any, Optional

from .. import leftovers, notebook_refs
from ..leftovers import DEFAULT_BUDGET_S, DEFAULT_MAX_DEPTH, LeftoverList, Scan
from . import tracker


def grown_for(shell: Any = None, namespace: Optional[dict] = None) -> frozenset:
    """The containers that grew on a flagged rerun, for a scan of `shell` and `namespace`:
    those of the shell the scan resolves them to (none outside a shell)."""
    shell, _ = notebook_refs.resolve_namespace(shell, namespace)
    return tracker.grown_on_rerun(shell) if shell is not None else frozenset()


def find_leftovers(
    device: Any = None,
    namespace: Optional[dict] = None,
    deep: bool = False,
    *,
    shell: Any = None,
    max_depth: int = DEFAULT_MAX_DEPTH,
    budget_s: Optional[float] = DEFAULT_BUDGET_S,
) -> LeftoverList:
    """Arrays still alive, by the name a user would type to reach them; biggest first
    (``help(colab_gpu_guard.leftovers.find_leftovers)`` explains the arguments)."""
    return leftovers.find_leftovers(
        device,
        namespace,
        deep,
        shell=shell,
        max_depth=max_depth,
        budget_s=budget_s,
        grown_on_rerun=grown_for(shell, namespace),
    )


def scan(*, shell: Any = None, namespace: Optional[dict] = None, **options: Any) -> Scan:
    """``leftovers.scan`` of `shell` and `namespace`, told what grew on flagged reruns."""
    return leftovers.scan(
        shell=shell, namespace=namespace, grown_on_rerun=grown_for(shell, namespace), **options
    )
