"""A LEAK line's holders recalled after our own magic failed (issue 31): a bad magic line
raises IPython's UsageError, which becomes ``sys.last_value``; it is not the user's error,
so a traceback a LEAK line named is not recalled as still there because of it. Real
IPython shell, real CPU torch; weakrefs prove the traceback's memory was freed."""

from __future__ import annotations

import gc
import sys

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard.cells.tracker import format_history, memory_history

torch = pytest.importorskip("torch")


def test_a_traceback_a_leak_line_named_is_gone_though_our_usage_error_is_the_last(ip, run_cell):
    run_cell("import torch, weakref\nown_refs = []\nown_kept = []")
    cell = (
        "def own_step():\n"
        "    x = torch.ones(5_000_000)\n"
        "    own_refs.append(weakref.ref(x.untyped_storage()))\n"
        "    if len(own_refs) == 1:\n"
        "        raise ValueError('the first run fails')\n"
        "    own_kept.append(x)\n"
        "own_step()"
    )
    gc.disable()  # the first run's error stays the last one: no collection decides
    try:
        with capture_output():
            first, second = (run_cell(cell).execution_count for _ in range(2))
    finally:
        gc.enable()
    by_cell = {record.cell: record for record in memory_history()}
    record = by_cell[second]
    assert record.rerun_leak and record.rerun_of == first, format_history(memory_history())
    assert record.held_by.startswith("<traceback: own_step() local 'x'>"), record.held_by
    with capture_output() as first_reset:
        ip.run_line_magic("gpu_reset", "")  # drops the user's error: its x is freed
    assert f"holding the memory of [{second}] is gone now" in first_reset.stdout
    refs = ip.user_ns["own_refs"]
    assert refs[0]() is None
    with capture_output():
        bad = run_cell("%gpu_reset --no-such-flag")
    assert type(bad.error_in_exec).__name__ == "UsageError"
    assert type(sys.last_value).__name__ == "UsageError"  # our error is now the last one
    # what the CUDA advisor recalls under an error (`past_leaks.holders_now`), and the
    # dry run's note: the traceback is gone, whatever our own error left behind
    from colab_gpu_guard import gpu_reset
    from colab_gpu_guard.cells import past_leaks
    from colab_gpu_guard.cells.tracker import rerun_leaks

    recalled = past_leaks.holders_now(rerun_leaks(), ip, ip.user_ns)
    assert (f"[{second}]", "") in recalled and "<traceback:" not in str(recalled), recalled
    note = past_leaks.history_note(ip, ip.user_ns, dry_run=False)
    assert note is not None and "<traceback:" not in note, note
    assert f"holding the memory of [{second}] is gone now" in note, note
    notes = "\n".join(gpu_reset().notes)  # the first reset said it: not again
    assert f"[{second}]" not in notes and "<traceback:" not in notes, notes
    for name in ("own_refs", "own_kept", "own_step"):
        ip.user_ns.pop(name, None)
