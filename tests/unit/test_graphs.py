"""Memory kept alive by autograd graphs, attributed to the tensor that owns the graph
(`leftovers/graphs.py`): real CPU tensors, and weakrefs to storages taken independently
(forward hooks, the test's own tensors) prove the bytes each entry names are the bytes
that die when the owner goes."""

from __future__ import annotations

import gc
import json
import weakref

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from colab_gpu_guard.leftovers import find_leftovers, graphs  # noqa: E402

ROWS, WIDTH = 1024, 256  # one activation: 1 MiB of float32


def storage_weak(tensor) -> tuple[weakref.ref, int]:
    storage = tensor.untyped_storage()  # torch keeps its Python object while the memory lives
    return weakref.ref(storage), storage.nbytes()


def watched_model(watch: list) -> nn.Module:
    """A model whose forward hooks keep a weakref to every activation's storage."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))

    def hook(_module, inputs, output):
        for tensor in (*inputs, output):
            watch.append(storage_weak(tensor))

    for layer in model:
        layer.register_forward_hook(hook)
    return model


def dead_bytes(watch: list, alive_before: set) -> int:
    """Bytes of the storages alive before (by index) that are gone now, each counted once."""
    gc.collect()
    seen, total = set(), 0
    for index in alive_before:
        weak, size = watch[index]
        if weak() is None and id(weak) not in seen:
            seen.add(id(weak))
            total += size
    return total


def alive_now(watch: list) -> set:
    gc.collect()
    unique, indices = set(), set()
    for index, (weak, _size) in enumerate(watch):
        storage = weak()
        if storage is not None and id(storage) not in unique:
            unique.add(id(storage))
            indices.add(index)
    return indices


def five_losses():
    watch: list = []
    model = watched_model(watch)
    outs = [model(torch.randn(ROWS, WIDTH)).sum() for _ in range(5)]
    for out in outs:
        watch.append(storage_weak(out))
    return model, outs, watch


def test_each_output_carries_its_graph_and_those_are_the_bytes_that_die():
    model, outs, watch = five_losses()
    namespace = {"model": model, "outs": outs}
    found = find_leftovers(namespace=namespace)
    entries = {item.name: item for item in found}
    for index in range(5):
        item = entries[f"outs[{index}]"]
        # the input and the ReLU's output: Linear keeps its input, ReLU its result
        assert item.graph_tensors == 2
        assert item.graph_nbytes == 2 * ROWS * WIDTH * 4
        assert item.nbytes == item.graph_nbytes + 4
        assert "autograd graph: 2 saved tensors, 2 MiB" in str(item)
        assert ".item()" in str(item) and ".detach()" in str(item)
    assert [item.name for item in found][:5] == [f"outs[{i}]" for i in range(5)]
    named_total = sum(item.nbytes for item in found if item.name.startswith("outs"))

    before = alive_now(watch)
    del outs, found, entries, item
    namespace.pop("outs")
    assert dead_bytes(watch, before) == named_total


def test_the_graph_fields_are_in_json_and_html():
    model, outs, _watch = five_losses()
    found = find_leftovers(namespace={"model": model, "outs": outs})
    data = json.loads(json.dumps(found.to_dict()))
    first = data["leftovers"][0]
    assert first["name"] == "outs[0]"
    assert first["graph_tensors"] == 2
    assert first["graph_nbytes"] == 2 * ROWS * WIDTH * 4
    assert first["graph_shared_nbytes"] == 0
    assert data["total_bytes"] == sum(item["nbytes"] for item in data["leftovers"])
    page = found._repr_html_()
    assert "autograd graph" in page and "2 saved tensors, 2 MiB" in page
    assert ".detach()" in page


def test_a_running_total_names_the_graphs_it_shares_with_and_where_they_are_counted():
    """`total = total + loss` keeps every step's graph, as `losses` does: the total's entry
    names the first graphs it shares with and how many more, and where they are counted."""
    weight = torch.randn(WIDTH, WIDTH, requires_grad=True)
    losses, total = [], 0
    for _ in range(6):
        loss = (torch.randn(ROWS, WIDTH) @ weight).relu().mean()
        losses.append(loss)
        total = total + loss
    namespace = {"losses": losses, "t": total, "weight": weight}
    found = {item.name: item for item in find_leftovers(namespace=namespace)}
    text = str(found["t"])
    assert found["t"].graph_shared_with == ("losses[0]", "losses[1]", "losses[2]", "(+3 more)")
    assert "shared with the graphs of `losses[0]`, `losses[1]`, `losses[2]` (+3 more)" in text
    assert "counted once under `losses[0]`, `losses[1]`, `losses[2]` (+3 more))" in text
    assert found["t"].graph_nbytes == 0  # every saved tensor is counted under a loss
    assert sum(item.graph_nbytes for item in found.values()) == sum(
        found[f"losses[{step}]"].graph_nbytes for step in range(6)
    )
    assert "shared with the graph of `t`, counted once here" in str(found["losses[3]"])


def test_a_graph_keeps_the_weights_it_accumulates_into_once_no_name_does():
    """`loss.backward()` ran, then `model` was deleted (or a rerun rebuilt it): the loss's
    graph still holds the old weights and their grads (its AccumulateGrad nodes), so the
    loss's entry counts them, and the bytes it names are the bytes that die with it."""
    model = nn.Linear(WIDTH, WIDTH)
    loss = model(torch.randn(ROWS, WIDTH)).sum()
    loss.backward()
    watch = [storage_weak(t) for t in (model.weight, model.weight.grad, model.bias)]
    watch.append(storage_weak(model.bias.grad))
    named = {item.name: item for item in find_leftovers(namespace={"model": model, "loss": loss})}
    assert named["loss"].graph_nbytes == 0  # the model names them
    del model
    found = {item.name: item for item in find_leftovers(namespace={"loss": loss})}
    held = sum(size for _weak, size in watch)
    assert found["loss"].graph_tensors == 4 and found["loss"].graph_nbytes == held
    assert found["loss"].graph_leaves == 4  # the weight, the bias and their grads
    assert "autograd graph: 4 leaf tensors and grads, " in str(found["loss"])
    assert all(weak() is not None for weak, _size in watch)
    del loss, found
    gc.collect()
    assert all(weak() is None for weak, _size in watch)  # what the entry counted went


def test_deep_scan_does_not_list_graph_memory_again_as_unnamed():
    model, outs, watch = five_losses()
    shallow = find_leftovers(namespace={"model": model, "outs": outs})
    deep = find_leftovers(namespace={"model": model, "outs": outs}, deep=True)
    # the deep scan sees the whole process: tensors other tests left alive are not ours
    ours = {storage.data_ptr() for storage in (weak() for weak, _size in watch) if storage}
    unnamed = [item for item in deep if item.name.startswith("<unnamed")]
    assert not [item for item in unnamed if item.storage_id in ours]
    assert deep.total_bytes - sum(item.nbytes for item in unnamed) == shallow.total_bytes


def test_a_tensor_saved_by_two_graphs_is_counted_once_and_reported_as_shared():
    weight = torch.randn(WIDTH, WIDTH, requires_grad=True)
    shared = torch.randn(ROWS, WIDTH)  # saved by both products (needed for weight's grad)
    shared_weak, shared_size = storage_weak(shared)
    first = (shared @ weight).sum()
    second = (shared @ weight).mean()
    del shared
    namespace = {"weight": weight, "first": first, "second": second}
    found = {item.name: item for item in find_leftovers(namespace=namespace)}
    assert found["first"].graph_tensors == 1 and found["second"].graph_tensors == 1
    assert found["first"].graph_nbytes == shared_size  # counted under the first found
    assert found["second"].graph_nbytes == 0
    assert found["first"].graph_shared_nbytes == shared_size
    assert found["second"].graph_shared_nbytes == shared_size
    # which graph counts the shared memory is named, on both sides
    assert found["first"].graph_shared_with == ("second",)
    assert found["first"].graph_counted_under == ("",)
    assert "(1 MiB shared with the graph of `second`, counted once here)" in str(found["first"])
    assert found["second"].graph_shared_with == ("first",)
    assert found["second"].graph_counted_under == ("first",)
    assert "shared with the graph of `first`, counted once under `first`" in str(found["second"])
    assert "weight" in found and found["weight"].graph_tensors == 0  # the parameter
    del found
    namespace.pop("first")
    first = None
    gc.collect()
    assert shared_weak() is not None  # the second graph still holds it
    namespace.pop("second")
    second = None
    gc.collect()
    assert shared_weak() is None


def test_named_tensors_and_parameters_are_not_graph_memory():
    torch.manual_seed(0)
    layer = nn.Linear(WIDTH, WIDTH)
    inputs = torch.randn(ROWS, WIDTH)
    out = layer(inputs).relu().sum()
    found = {
        item.name: item
        for item in find_leftovers(namespace={"layer": layer, "x": inputs, "out": out})
    }
    # Linear saved x (named) and its weight (named); only the ReLU's result is the graph's
    assert found["out"].graph_tensors == 1
    assert found["out"].graph_nbytes == ROWS * WIDTH * 4


def test_after_backward_the_graph_holds_nothing():
    model, outs, _watch = five_losses()
    outs[0].backward()
    found = {item.name: item for item in find_leftovers(namespace={"model": model, "outs": outs})}
    assert found["outs[0]"].graph_tensors == 0 and found["outs[0]"].nbytes == 4
    assert found["outs[1]"].graph_tensors == 2


def test_custom_function_and_saved_tensor_hooks_are_read_without_calling_user_code():
    calls = []

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, value):
            kept = value * 2
            ctx.save_for_backward(kept)
            return kept.clone()

        @staticmethod
        def backward(ctx, grad):
            calls.append("backward")
            return grad * 2

    def pack(tensor):
        return tensor

    def unpack(tensor):
        calls.append("unpack")
        return tensor

    leaf = torch.randn(ROWS, WIDTH, requires_grad=True)
    custom = Double.apply(leaf).sum()
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        hooked = (leaf.exp()).sum()  # exp saves its result, through the hooks
    found = {
        item.name: item
        for item in find_leftovers(namespace={"leaf": leaf, "custom": custom, "hooked": hooked})
    }
    assert found["custom"].graph_tensors == 1
    assert found["custom"].graph_nbytes == ROWS * WIDTH * 4
    assert found["hooked"].graph_tensors == 1
    assert found["hooked"].graph_nbytes == ROWS * WIDTH * 4
    assert calls == []


def test_the_node_budget_is_said_when_hit(monkeypatch):
    monkeypatch.setattr(graphs, "NODE_BUDGET", 3)
    model, outs, _watch = five_losses()
    found = find_leftovers(namespace={"model": model, "outs": outs})
    assert any("stopped after 3 nodes" in note and "lower bounds" in note for note in found.notes)
    assert "stopped after 3 nodes" in str(found)


def test_tensors_without_a_graph_are_unchanged():
    many = [torch.zeros(4) for _ in range(100)]
    found = find_leftovers(namespace={"many": many})
    assert all(item.graph_tensors == 0 and item.nbytes == 16 for item in found)
    assert not found.notes


# ---------------------------------------------------------------- %gpu_reset, in a real shell

WATCHED_MODEL = f"""
import torch, weakref
from torch import nn
watch = []
def _watch(_module, inputs, output):
    for tensor in (*inputs, output):
        storage = tensor.untyped_storage()
        watch.append((weakref.ref(storage), storage.nbytes()))
torch.manual_seed(0)
model = nn.Sequential(nn.Linear({WIDTH}, {WIDTH}), nn.ReLU(), nn.Linear({WIDTH}, {WIDTH}))
for layer in model:
    layer.register_forward_hook(_watch)
def kept(tensor):
    _watch(None, (), tensor)
    return tensor
"""


@pytest.fixture
def shell(shell, run_cell):
    """conftest.py's `shell` with WATCHED_MODEL defined in it."""
    result = run_cell(WATCHED_MODEL)
    assert result.error_in_exec is None
    return shell


def test_gpu_reset_of_an_output_with_a_graph_expects_what_it_releases(shell, run_cell):
    from IPython.utils.capture import capture_output

    result = run_cell(f"kept(model(torch.randn({ROWS}, {WIDTH})).sum())")
    assert result.error_in_exec is None
    number = result.execution_count
    del result
    for filler in ("1 + 1", "2 + 2", "3 + 3"):
        run_cell(filler)  # `_`, `__`, `___` move on: only Out[N] / _N hold it
    watch = shell.user_ns["watch"]
    before = alive_now(watch)
    found = {item.name: item for item in find_leftovers(shell=shell)}
    held = found[f"Out[{number}]"]
    assert held.graph_tensors == 2 and held.nbytes == 2 * ROWS * WIDTH * 4 + 4
    del found
    with capture_output() as captured:
        shell.run_line_magic("gpu_reset", "")
    died = dead_bytes(watch, before)
    assert died == held.nbytes
    # released as expected: no ", of ... expected" after the figure
    assert f"freed: {format_size(died)} of tensors\n" in captured.stdout


def test_gpu_reset_of_a_list_of_losses_expects_what_it_releases(shell, run_cell):
    from colab_gpu_guard.reset import apply as reset

    result = run_cell(f"outs = [kept(model(torch.randn({ROWS}, {WIDTH})).sum()) for _ in range(3)]")
    assert result.error_in_exec is None
    del result
    watch = shell.user_ns["watch"]
    before = alive_now(watch)
    dry = reset.gpu_reset("outs", dry_run=True, shell=shell)
    report = reset.gpu_reset("outs", shell=shell)
    died = dead_bytes(watch, before)
    assert died == 3 * (2 * ROWS * WIDTH * 4 + 4)
    assert dry.estimated_bytes == report.estimated_bytes == report.released_bytes == died
    assert "outs" not in shell.user_ns


def format_size(value: int) -> str:
    from colab_gpu_guard.units import format_bytes

    return format_bytes(value)


@pytest.mark.gpu
def test_graph_bytes_on_cuda_are_what_memory_allocated_loses():
    device = torch.device("cuda:0")
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH)).to(device)
    torch.cuda.synchronize()
    outs = [model(torch.randn(ROWS, WIDTH, device=device)).sum() for _ in range(3)]
    torch.cuda.synchronize()
    found = {item.name: item for item in find_leftovers(namespace={"model": model, "outs": outs})}
    entries = [found[f"outs[{index}]"] for index in range(3)]
    for item in entries:
        assert item.device == "cuda:0"
        assert item.graph_tensors == 2 and item.graph_nbytes == 2 * ROWS * WIDTH * 4
    held = sum(item.nbytes for item in entries)
    del found, entries, item
    before = torch.cuda.memory_allocated(device)
    del outs
    gc.collect()
    torch.cuda.synchronize()
    freed = before - torch.cuda.memory_allocated(device)
    # the allocator rounds each block up to 512 bytes: the scalars' 4 bytes take 512 each
    assert held - 3 * 4 + 3 * 512 == freed


def test_a_list_of_losses_is_grouped_as_a_hidden_autograd_graph_holder_first():
    model, outs, watch = five_losses()
    found = find_leftovers(namespace={"model": model, "outs": outs})
    groups = found.groups()
    first = groups[0]
    assert (first.name, first.kind, first.hidden) == ("outs", "autograd graph", True)
    assert first.graph_nbytes == 5 * 2 * ROWS * WIDTH * 4
    assert first.nbytes == first.graph_nbytes + 5 * 4
    assert groups.named("model").kind == "user variable"
    before = alive_now(watch)
    del outs, found, groups, first
    assert dead_bytes(watch, before) == 5 * 2 * ROWS * WIDTH * 4 + 5 * 4


def test_an_entry_keeps_each_figure_of_its_graph():
    """`with_graph` writes each of the graph's figures to the entry's `graph_*` field of the
    same name, and `Leftover.graph()` reads them back unchanged."""
    from colab_gpu_guard.frameworks.base import ArrayInfo
    from colab_gpu_guard.leftovers.graphs import Graph
    from colab_gpu_guard.leftovers.records import leftover_of, with_graph

    info = ArrayInfo((4,), "float32", "cpu", 16, ("cpu", 1), 16, 1)
    graph = Graph(3, 48, 16, ("a", "b"), ("", "c"), 1)
    item = with_graph(leftover_of("x", "user variable", info, "torch"), graph)
    assert item.graph() == graph and item.nbytes == 16 + 48
