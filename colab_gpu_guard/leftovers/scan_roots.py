"""The roots a scan starts from: the notebook's (`notebook_refs.roots`), the graphs
torch.compile's caches hold, and what process-wide registries keep (`registries`)."""

from __future__ import annotations

import itertools
from typing import Any, Optional

from .. import notebook_refs
from ..frameworks import torch_compile
from ..units import OTHER
from .kinds import ATOMIC
from .registries import (
    FINALIZER,
    LOGGER,
    MODULE_GLOBAL,
    THREAD,
    finalizers,
    logging_registry,
    module_globals,
    threads,
)
from .root_refs import COMPILED_GRAPH

# the root kinds of what process-wide registries keep (`registries`)
REGISTRY_KINDS = frozenset({COMPILED_GRAPH, LOGGER, FINALIZER, THREAD, MODULE_GLOBAL})


def _is_variable(root: notebook_refs.Root) -> bool:
    return root.key.kind == notebook_refs.VARIABLE


def root_entries(
    shell, namespace: Optional[dict], variables_only: bool = False
) -> list[notebook_refs.Root]:
    """Every root a scan starts from, in order: the notebook's (`notebook_refs.roots`),
    then the graphs torch.compile's caches hold (never a user variable; freed by dynamo's
    reset), then what process-wide registries keep (`registries`: loggers with handlers,
    ``weakref.finalize``'s finalizers, running threads, the globals of the user's own
    modules); `variables_only`: the namespace's variables alone (they come first)."""
    found = notebook_refs.roots(shell, namespace if namespace is not None else {})
    if variables_only:
        return list(itertools.takewhile(_is_variable, found))
    entries = list(found)
    for graph in torch_compile.compiled_graphs(namespace):
        key = notebook_refs.RootKey(COMPILED_GRAPH, graph.label)
        entries.append(notebook_refs.Root(key, graph.label, OTHER, graph.value))
    for name, logger in logging_registry():
        label = f"<logging.getLogger({name!r})>" if name else "<logging.getLogger()>"
        entries.append(_registry_root(LOGGER, name, label, logger))
    for label, record in finalizers():
        entries.append(_registry_root(FINALIZER, label, label, record))
    for label, thread in threads():
        entries.append(_registry_root(THREAD, label, label, thread))
    for label, value in module_globals(namespace):
        entries.append(_registry_root(MODULE_GLOBAL, label, label, value))
    return entries


def _registry_root(kind: str, key: str, label: str, value: Any) -> notebook_refs.Root:
    return notebook_refs.Root(notebook_refs.RootKey(kind, key), label, OTHER, value)


def root_ids(entries: list[notebook_refs.Root]) -> list[tuple]:
    """(key, label, id(value)) of each root that can hold an array (a plain value as a
    root, such as a blanked ``_``, reaches nothing)."""
    return [
        (entry.key, entry.label, id(entry.value))
        for entry in entries
        if type(entry.value) not in ATOMIC
    ]
