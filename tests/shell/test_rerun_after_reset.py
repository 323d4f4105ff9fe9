"""A rerun after a `%gpu_reset` that freed the previous run's objects is not flagged
(issue 34): a training loop stopped by KeyboardInterrupt with two 16 MiB locals, the reset
(weakrefs prove both freed), the loop run again. Whatever the reset cell's own figures
say (a cell that resets and then allocates as much hides its free in its net change),
the rerun is judged on what is found holding the earlier run's objects. Real IPython
shell, real CPU torch."""

from __future__ import annotations

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard.cells.tracker import format_history, memory_history

torch = pytest.importorskip("torch")

MiB = 2**20
LOOP = (
    "def train_loop():\n"
    "    activations = torch.ones(4 * MiB)\n"  # 16 MiB
    "    gradients = torch.ones(4 * MiB)\n"
    "    loop_refs.extend([weakref.ref(activations), weakref.ref(gradients)])\n"
    "    raise KeyboardInterrupt\n"
    "train_loop()"
)


@pytest.mark.parametrize(
    "reset",
    ["%gpu_reset", "get_ipython().run_line_magic('gpu_reset', '')\nspare = torch.ones(8 * MiB)"],
    ids=["reset", "reset then allocate as much"],
)
def test_a_rerun_after_a_reset_that_freed_the_earlier_run_is_not_flagged(ip, run_cell, reset):
    run_cell(f"import torch, weakref\nMiB = {MiB}\nloop_refs = []")
    with capture_output():
        first = run_cell(LOOP).execution_count
        run_cell(reset)
        refs = ip.user_ns["loop_refs"]
        assert len(refs) == 2 and all(ref() is None for ref in refs)  # the reset freed both
        second = run_cell(LOOP).execution_count
        third = run_cell(LOOP).execution_count  # no reset: the second run's error holds it
    by_cell = {record.cell: record for record in memory_history()}
    history = format_history(memory_history())
    again, leak = by_cell[second], by_cell[third]
    assert again.rerun_of == first and not again.rerun_leak, history
    assert leak.rerun_of == second and leak.rerun_leak, history
    size = torch.ones(4 * MiB).untyped_storage().nbytes()
    assert 2 * size - MiB <= leak.leak_bytes < 2 * size + MiB, history
    assert leak.held_by.startswith("<traceback: train_loop() local 'activations'>"), history
    assert refs[2]() is not None and refs[3]() is not None  # the second run's, still held
    ip.run_line_magic("gpu_reset", "")
    assert all(ref() is None for ref in refs)
    for name in ("loop_refs", "train_loop", "spare", "MiB"):
        ip.user_ns.pop(name, None)
