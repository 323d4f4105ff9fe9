"""Which group a root's arrays are listed under, and what holds that group, in words: a
`RootRef` made where the scan meets the root (`root_ref`), read by the groups; no group is
ever worked out from the text of a name."""

from __future__ import annotations

from typing import NamedTuple

from .. import notebook_refs
from ..units import OTHER, OUTPUT_HISTORY, TRACEBACK_FRAME, USER_VARIABLE
from .registries import FINALIZER, LOGGER, MODULE_GLOBAL, THREAD

# Root kinds beside the notebook's own (`notebook_refs`' VARIABLE, OUT, ...) and the
# registries' (`registries`: LOGGER, MODULE_GLOBAL, FINALIZER, THREAD)
COMPILED_GRAPH = "compiled graph"  # a graph torch.compile installed
UNNAMED_ROOT = "unnamed"  # a deep scan's array that no root reaches

# What holds a group, in words (a group's `kind`)
USER_STATE = USER_VARIABLE
AUTOGRAD_GRAPH = "autograd graph"
DEBUGGER_FRAME = "debugger frame"
EXCEPTION = "exception"
GREW_ON_RERUN = "grew on rerun"  # a user container a rerun flagged as a leak added to
NO_NAME = "no name in the notebook"  # what refers to it: the entry says (deep scan)
RUNNING_THREAD = "running thread"  # a thread's target and arguments, until it ends

UNNAMED = "<no name>"  # the group of a deep scan's unnamed blocks

# the notebook's output history: IPython's Out[N] and the names and hooks that alias it
_OUTPUT_SOURCES = frozenset(
    {
        notebook_refs.OUT,
        notebook_refs.UNDERSCORE,
        notebook_refs.DISPLAYHOOK,
        notebook_refs.HIDDEN_UNDERSCORE,
        notebook_refs.OUTPUT_NAME_KIND,
        notebook_refs.LAST_RESULT,
    }
)
_KIND_OF_SOURCE = {
    notebook_refs.VARIABLE: USER_STATE,
    notebook_refs.DEBUGGER: DEBUGGER_FRAME,
    COMPILED_GRAPH: COMPILED_GRAPH,
    LOGGER: LOGGER,
    MODULE_GLOBAL: MODULE_GLOBAL,
    FINALIZER: FINALIZER,
    THREAD: RUNNING_THREAD,
    UNNAMED_ROOT: NO_NAME,
    **dict.fromkeys(_OUTPUT_SOURCES, OUTPUT_HISTORY),
}
_HOLDER_OF_KIND = {
    USER_STATE: USER_VARIABLE,
    OUTPUT_HISTORY: OUTPUT_HISTORY,
    TRACEBACK_FRAME: TRACEBACK_FRAME,
    DEBUGGER_FRAME: TRACEBACK_FRAME,
}


class RootRef(NamedTuple):
    """The group of a root: its name as listed (``model``, ``Out[3]``, ``<exception E>``),
    what holds it in words (a group kind: ``user variable``, ``output history``, ...) and
    the kind of root it is (`notebook_refs`' ``out``, ``underscore``, ...; this module's
    ``logger``, ...)."""

    name: str
    kind: str
    source: str

    @property
    def holder(self) -> str:
        """The `units` holder label of the group's root."""
        return _HOLDER_OF_KIND.get(self.kind, OTHER)

    @property
    def is_output(self) -> bool:
        """``Out[N]`` itself (not a name or hook that aliases an output)."""
        return self.source == notebook_refs.OUT


def root_ref(source: str, label: str, holder: str, group: str = "") -> RootRef:
    """The group of a root of kind `source` labelled `label` and held by `holder`
    (a `units` holder label); `group`: the name it is listed under where not its label
    (an exception's ``args`` are listed under the exception)."""
    if source == notebook_refs.EXCEPTION:  # the exception itself, or its frames' locals
        kind = TRACEBACK_FRAME if holder == TRACEBACK_FRAME else EXCEPTION
    else:
        kind = _KIND_OF_SOURCE.get(source, holder)
    return RootRef(group or label, kind, source)


UNNAMED_REF = RootRef(UNNAMED, NO_NAME, UNNAMED_ROOT)
