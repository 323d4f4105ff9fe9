"""One accounting for a LEAK line and %gpu_status (issue 34): the validation cell of
notebooks/memory_leaks.ipynb run three times. What a LEAK line says `val_losses` holds of
the previous run (that run's autograd graph) is the figure %gpu_status gives the same
graph, then and later, and the storages' own sizes: the saved `batch` and the layer's
output, each counted once. Real IPython shell, real CPU torch."""

from __future__ import annotations

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard.cells.tracker import format_history, memory_history
from colab_gpu_guard.units import format_bytes

torch = pytest.importorskip("torch")

CELL = (
    "batch = torch.randn(2048, 1024, device=device)\n"
    "val_loss = model(batch).pow(2).mean()\n"
    "val_losses.append(val_loss)\n"
    "model(batch)"
)


def graph_figures() -> dict[str, int]:
    """{name: graph bytes} as %gpu_status counts them now."""
    from colab_gpu_guard import find_leftovers

    return {item.name: item.graph_nbytes for item in find_leftovers() if item.graph_tensors}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_a_leak_lines_graph_figure_is_gpu_statuss_for_the_same_graph(ip, run_cell, device):
    run_cell(
        f"import torch\ndevice = {device!r}\n"
        "model = torch.nn.Linear(1024, 1024).to(device)\nval_losses = []"
    )
    runs, figures_then = [], []
    with capture_output():
        for _ in range(3):
            runs.append(run_cell(CELL).execution_count)
            figures_then.append(graph_figures())
    by_cell = {record.cell: record for record in memory_history()}
    history = format_history(memory_history())
    batch = ip.user_ns["batch"].untyped_storage().nbytes()
    # the layer's output, displayed (Out), and what pow saved
    output = ip.user_ns["Out"][runs[-1]].untyped_storage().nbytes()
    graph = batch + output  # an earlier run's graph, once `batch` names another tensor
    figures_now = graph_figures()
    for index, cell in enumerate(runs[1:], start=1):
        record = by_cell[cell]
        assert record.rerun_leak, history
        (holder,) = [item for item in record.holders if item.name == "val_losses"]
        previous = f"val_losses[{index - 1}]"
        said = holder.growth.earlier_nbytes
        assert said == graph, history
        assert said == figures_then[index][previous] == figures_now[previous]
        assert f"the previous run's graph keeps {format_bytes(graph)}" in record.held_by
        where = "cpu" if device == "cpu" else "cuda:0"
        assert dict(holder.held)[where] >= graph  # and the 4-byte loss itself
    for name in ("model", "val_losses", "batch", "val_loss", "device"):
        ip.user_ns.pop(name, None)
    ip.run_line_magic("gpu_reset", "")
