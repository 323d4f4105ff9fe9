"""The one IPython shell the tests share (IPython's global test shell), and forgetting
its output history."""

from __future__ import annotations


def global_shell():
    """IPython's real global test shell (an InteractiveShell), started once per process."""
    import IPython
    from IPython.testing.globalipapp import start_ipython

    return start_ipython() or IPython.get_ipython()


def flush_output_history(shell) -> None:
    """``%reset -f out``, then what it forgets: IPython's flush clears ``_``/``__``/``___``
    in ``user_ns`` but not in ``user_ns_hidden``, and from then on the display hook takes
    them for user-assigned and stops updating them (later tests rely on ``_``)."""
    shell.run_line_magic("reset", "-f out")
    for name in ("_", "__", "___"):
        if name in shell.user_ns_hidden and name in shell.user_ns:
            shell.user_ns_hidden[name] = shell.user_ns[name]
