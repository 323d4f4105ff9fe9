"""The one IPython shell the tests share (IPython's global test shell), forgetting its
output history and what its tracebacks left cached, and the widget models open in it."""

from __future__ import annotations

import re
import sys

_OUTPUT_NAME = re.compile(r"_\d+")


def global_shell():
    """IPython's real global test shell (an InteractiveShell), started once per process."""
    import IPython
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or IPython.get_ipython()


def flush_output_history(shell) -> None:
    """What ``%reset -f out`` forgets, without its two full collections of the heap (0.2 s
    each in a process that ran a thousand tests; the test that needs one runs it): `Out`,
    ``_N`` in both namespaces, and ``_``/``__``/``___`` in the display hook, ``user_ns``
    and ``user_ns_hidden`` (IPython's flush leaves the hidden copies, and from then on the
    display hook takes ``_`` for user-assigned and stops updating it; later tests rely on
    ``_``)."""
    hook = shell.displayhook
    for namespace in (shell.user_ns, shell.user_ns_hidden):
        for name in [name for name in namespace if _OUTPUT_NAME.fullmatch(name)]:
            del namespace[name]
    output = shell.user_ns.get("_oh")
    if output is not None:
        output.clear()
    hook._, hook.__, hook.___ = "", "", ""
    for name, value in (("_", hook._), ("__", hook.__), ("___", hook.___)):
        shell.user_ns[name] = value
        if name in shell.user_ns_hidden:
            shell.user_ns_hidden[name] = value


def forget_the_traceback_sources() -> None:
    """What IPython 8+'s tracebacks left in `executing` (through stack_data): it keeps the
    source and syntax tree of every cell a traceback went through, with a node map, for the
    rest of the process. A notebook's few tracebacks cost little; a thousand tests' made a
    third of the objects every later full collection went over. Private caches: where a
    version of `executing` has none of these names, nothing is cleared."""
    module = sys.modules.get("executing.executing")
    if module is None:
        return
    base = module.Source
    for klass in (base, *base.__subclasses__()):  # each keeps its own (stack_data's Source)
        for name in ("__source_cache_with_lines", "__executing_cache", "__source_cache"):
            cache = vars(klass).get(name)
            if isinstance(cache, dict):
                cache.clear()
    for cached in (
        base.__dict__.get("statements_at_line"),
        module.__dict__.get("statement_containing_node"),
    ):
        clear = getattr(cached, "cache_clear", None)
        if clear is not None:
            clear()


def open_models() -> dict:
    """The kernel's registry of open widget models, by model id (ipywidgets 8 keeps it in
    its widget module, 7 on the class; empty while ipywidgets is not imported): a model
    left open stays there and in the front end."""
    if "ipywidgets" not in sys.modules:
        return {}
    import ipywidgets
    from ipywidgets.widgets import widget

    registry = getattr(widget, "_instances", None)
    return dict(ipywidgets.Widget.widgets if registry is None else registry)
