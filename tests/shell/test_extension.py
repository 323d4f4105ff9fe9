"""%load_ext / %reload_ext / %unload_ext leave exactly what they should."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

from colab_gpu_guard.ipython import magics
from colab_gpu_guard.ipython.registration import registration_for

EVENTS = ("pre_execute", "pre_run_cell", "post_execute", "post_run_cell", "shell_initialized")


def our_magics(shell) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for kind, table in shell.magics_manager.magics.items():
        for name, func in table.items():
            owner = getattr(func, "__self__", None)
            if isinstance(owner, magics.GuardMagics):
                found.setdefault(kind, []).append(name)
    return found


def callbacks(shell) -> dict[str, list]:
    return {event: list(shell.events.callbacks.get(event, [])) for event in EVENTS}


def custom_exc(shell):
    return shell.custom_exceptions, shell.CustomTB


def test_unload_removes_everything_load_added(bare_shell):
    events_before = callbacks(bare_shell)
    exc_before = custom_exc(bare_shell)
    bare_shell.run_line_magic("load_ext", "colab_gpu_guard")
    assert "seed_all" in our_magics(bare_shell)["line"]
    bare_shell.run_line_magic("seed_all", "1 --every-cell")  # adds a pre_run_cell callback
    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")
    assert our_magics(bare_shell) == {}
    assert callbacks(bare_shell) == events_before
    assert custom_exc(bare_shell) == exc_before
    ours = {cls.__name__ for cls in magics.MAGIC_CLASSES}
    assert not ours & set(bare_shell.magics_manager.registry)
    assert not [c for c in bare_shell.configurables if isinstance(c, magics.GuardMagics)]


def test_unload_lets_the_magics_and_what_they_hold_go(bare_shell):
    """IPython lists every Magics instance in shell.configurables and never takes it out:
    an unload that left them there kept the old magics, their registration and what they
    hold (the memory tracker with its cells' records, the error advisor) alive for the rest
    of the session."""
    bare_shell.run_line_magic("load_ext", "colab_gpu_guard")
    bare_shell.run_cell("pass", store_history=True)
    bare_shell.run_line_magic("seed_all", "1 --every-cell")
    registration = registration_for(bare_shell)
    refs = [weakref.ref(instance) for instance in registration.magics]
    refs.append(weakref.ref(registration))
    del registration
    configurables = len(bare_shell.configurables)
    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")
    assert len(bare_shell.configurables) == configurables - len(magics.MAGIC_CLASSES)
    gc.collect()
    assert [ref() for ref in refs] == [None] * len(refs)


def test_reload_ten_times_leaves_one_of_each(bare_shell):
    bare_shell.run_line_magic("load_ext", "colab_gpu_guard")
    bare_shell.run_line_magic("seed_all", "1 --every-cell")
    once_magics = our_magics(bare_shell)
    once_events = {e: len(c) for e, c in callbacks(bare_shell).items()}
    for _ in range(10):
        bare_shell.run_line_magic("reload_ext", "colab_gpu_guard")
    assert our_magics(bare_shell) == once_magics
    for names in our_magics(bare_shell).values():
        assert len(names) == len(set(names))
    after = {e: len(c) for e, c in callbacks(bare_shell).items()}
    # every-cell reseeding is switched off by the reload (it was the old load's state)
    assert after["pre_run_cell"] <= once_events["pre_run_cell"]
    bare_shell.run_line_magic("seed_all", "1 --every-cell")
    again = {e: len(c) for e, c in callbacks(bare_shell).items()}
    assert again == once_events
    assert len([c for c in bare_shell.configurables if isinstance(c, magics.GuardMagics)]) == len(
        magics.MAGIC_CLASSES
    )
    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")


def test_load_ext_imports_no_heavy_module():
    script = textwrap.dedent(
        """
        import sys
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        before = set(sys.modules)
        ip.run_line_magic("load_ext", "colab_gpu_guard")
        heavy = {"torch", "numpy", "ipywidgets", "tensorflow", "jax", "cupy"}
        print("HEAVY:", sorted(heavy & (set(sys.modules) - before)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    assert out.split("HEAVY:", 1)[1].strip() == "[]"


def test_load_ext_leaves_the_rest_of_the_package_for_first_use():
    """%load_ext imports the IPython layer and the per-cell engine, and not NVML, the
    advisor, the leftovers scan, the status views or seeding: those come when first used."""
    script = textwrap.dedent(
        """
        import sys
        from IPython.testing.globalipapp import start_ipython
        ip = start_ipython()
        ip.run_line_magic("load_ext", "colab_gpu_guard")
        ours = {name.split(".")[1] for name in sys.modules if name.startswith("colab_gpu_guard.")}
        print("ROOMS:", " ".join(sorted(ours)))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout
    rooms = set(out.split("ROOMS:", 1)[1].split())
    assert "ipython" in rooms and "cells" in rooms
    assert not rooms & {"nvml", "advisor", "leftovers", "status", "seeding", "reset"}, rooms
