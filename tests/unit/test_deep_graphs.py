"""The deep scan measures the autograd graphs of tensors no name reaches (issue 14): an
unnamed result carries what its graph saved, those saved tensors (kept only from C++, so
the collector sees at most a Python wrapper nobody refers to) are not listed apart, and
weakrefs to every storage prove the bytes an entry names are the bytes that die when its
holder goes."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402

ROWS, WIDTH = 1024, 256  # one activation: 1 MiB of float32
MiB = 2**20


class Hidden:
    """An object of the user's that no name reaches once the list holding it is gone."""


def watched(tensor, watch: list):
    storage = tensor.untyped_storage()  # torch keeps its Python object while the memory lives
    watch.append((weakref.ref(storage), storage.nbytes(), storage.data_ptr()))
    return tensor


def relu_loss(layer, watch: list):
    """(relu(layer(x))).sum(): the graph saves x and the ReLU's output (layer's weight is a
    name's); every storage the step makes is watched."""
    x = watched(torch.randn(ROWS, WIDTH), watch)
    hidden = watched(torch.relu(watched(layer(x), watch)), watch)
    return watched(hidden.sum(), watch)


def square_loss(layer, watch: list):
    """(t * t).sum() with t = layer(x): the product saves t itself (an input, not an output),
    a tensor with a graph of its own that lives only inside the loss's graph."""
    x = watched(torch.randn(ROWS, WIDTH), watch)
    t = watched(layer(x), watch)
    return watched((watched(t * t, watch)).sum(), watch)


def dead_bytes(watch: list) -> int:
    gc.collect()
    return sum(size for weak, size, _address in watch if weak() is None)


def ours(found, watch: list) -> list:
    """The deep scan's unnamed entries on storages this test made (it sees the process)."""
    addresses = {address for weak, _size, address in watch if weak() is not None}
    return [
        item for item in found if item.name.startswith("<unnamed") and item.storage_id in addresses
    ]


def test_an_unnamed_result_carries_its_graph_and_those_bytes_die_with_its_holder():
    torch.manual_seed(0)
    layer = torch.nn.Linear(WIDTH, WIDTH)
    watch: list = []
    holder = {"loss": relu_loss(layer, watch)}  # a dict no name reaches...
    kept = [Hidden()]
    kept[0].loss = relu_loss(layer, watch)  # ...and an object only a list the scan skips holds
    found = find_leftovers(namespace={"layer": layer}, deep=True)
    entries = ours(found, watch)
    # one entry per result: the two saved tensors (x and the ReLU's output) are its graph
    assert len(entries) == 2, [item.name for item in found]
    for item in entries:
        assert item.graph_tensors == 2
        assert item.graph_nbytes == 2 * ROWS * WIDTH * 4
        assert item.nbytes == 4 + item.graph_nbytes
        assert "autograd graph: 2 saved tensors, 2 MiB" in str(item)
    by_holder = {("dict" in item.name): item for item in entries}
    assert set(by_holder) == {True, False}, [item.name for item in entries]
    # no saved tensor listed again as '<unnamed ...: no Python referrer>'
    assert not [item for item in ours(found, watch) if "no Python referrer" in item.name]

    before = dead_bytes(watch)
    del holder
    assert dead_bytes(watch) - before == by_holder[True].nbytes
    before = dead_bytes(watch)
    del kept
    assert dead_bytes(watch) - before == by_holder[False].nbytes
    del found, entries, by_holder, item


def test_a_tensor_inside_an_unnamed_graph_is_part_of_that_graph():
    """t = layer(x) has a graph of its own (it saved x); the loss's graph saved t. t lives
    only in the loss's graph: one entry, the loss, whose graph holds t and x."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(WIDTH, WIDTH)
    watch: list = []
    holder = {"loss": square_loss(layer, watch)}
    found = find_leftovers(namespace={"layer": layer}, deep=True)
    entries = ours(found, watch)
    assert len(entries) == 1, [(item.name, item.nbytes) for item in entries]
    (item,) = entries
    assert item.graph_tensors == 2  # x (saved by t's addmm) and t (saved by the product)
    assert item.graph_nbytes == 2 * ROWS * WIDTH * 4
    before = dead_bytes(watch)
    del holder
    assert dead_bytes(watch) - before == item.nbytes
    del found, entries, item


def test_a_named_graph_saving_an_unnamed_owner_keeps_it_out_of_the_unnamed_list():
    """The normal scan's graphs come first: a named loss whose graph saved t leaves nothing
    of t for the deep scan to list."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(WIDTH, WIDTH)
    watch: list = []
    loss = square_loss(layer, watch)
    found = find_leftovers(namespace={"layer": layer, "loss": loss}, deep=True)
    assert ours(found, watch) == []
    (item,) = [item for item in found if item.name == "loss"]
    assert item.graph_nbytes == 2 * ROWS * WIDTH * 4
    del found, item, loss
