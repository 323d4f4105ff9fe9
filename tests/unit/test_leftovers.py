"""find_leftovers: names a user would type, holder kinds, storage deduplication, depth and
cycles, deep scans, and never importing a framework or keeping an array alive."""

from __future__ import annotations

import dataclasses
import gc
import html
import json
import os
import pickle
import subprocess
import sys
import types
import weakref
from pathlib import Path

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")
try:
    import numpy as np
except ImportError:  # the minimal environment
    np = None

from colab_gpu_guard.leftovers import (  # noqa: E402
    HOLDERS,
    Leftover,
    LeftoverList,
    find_leftovers,
)
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from tests.shared_shell import flush_output_history  # noqa: E402


def by_name(items) -> dict[str, Leftover]:
    found = {}
    for item in items:
        found[item.name] = item
        for other in item.shared_with:
            found.setdefault(other, item)
    return found


def test_module_and_optimizer_names_match_named_parameters_and_state():
    model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(), torch.nn.Linear(16, 2)
    )
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    items = find_leftovers(namespace={"model": model, "opt": opt})
    names = by_name(items)
    for name, parameter in model.named_parameters():
        item = names[f"model.{name}"]
        assert item.holder == "user variable"
        assert item.shape == tuple(parameter.shape)
        assert item.dtype == "float32" and item.device == "cpu"
        assert f"model.{name}.grad" in names
        for key in opt.state[parameter]:
            assert f"opt.state[model.{name}][{key!r}]" in names
    for name, _buffer in model.named_buffers():
        assert f"model.{name}" in names
    # the optimizer's own reference to each parameter is listed, not counted again
    weight = names["model.0.weight"]
    assert "opt.param_groups[0]['params'][0]" in weight.shared_with
    storages = [item.storage_id for item in items]
    assert len(storages) == len(set(storages))
    parameters = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(items_of(items, ".weight", ".bias")) == parameters


def items_of(items, *suffixes):
    return [
        item.nbytes
        for item in items
        if item.name.startswith("model.") and item.name.endswith(suffixes)
    ]


def test_view_and_base_count_once():
    base = torch.zeros(1000)
    view = base[100:200]
    reshaped = base.view(10, 100)
    items = find_leftovers(namespace={"base": base, "view": view, "reshaped": reshaped})
    assert len(items) == 1
    item = items[0]
    assert item.name == "base" and item.nbytes == 4000
    assert set(item.shared_with) == {"view", "reshaped"}
    assert items.total_bytes == 4000


def test_a_view_alone_counts_its_whole_storage():
    view = torch.zeros(1000)[:10]
    (item,) = find_leftovers(namespace={"view": view})
    assert item.nbytes == 4000 and item.array_nbytes == 40 and item.shape == (10,)


def test_numpy_view_and_base_count_once():
    np = pytest.importorskip("numpy")
    base = np.zeros(100)
    items = find_leftovers(namespace={"base": base, "tail": base[50:], "t": base.T})
    assert len(items) == 1 and items[0].nbytes == 800 and items[0].framework == "numpy"


@dataclasses.dataclass
class Batch:
    inputs: object
    labels: object


class Holder:
    def __init__(self, value) -> None:
        self.value = value
        self.nested = {"deep": [value]}


def test_names_through_containers_dataclasses_and_objects():
    a, b, c, d, e, f = (torch.full((n + 1,), float(n)) for n in range(6))
    namespace = {
        "outputs": [None, None, None, a],
        "cache": {"key": b, 3: (c,)},
        "batch": Batch(inputs=d, labels=None),
        "holder": Holder(e),
        "bag": {f},
    }
    names = {item.name for item in find_leftovers(namespace=namespace)}
    assert names == {
        "outputs[3]",
        "cache['key']",
        "cache[3][0]",
        "batch.inputs",
        "holder.value",
        "bag{item}",
    }
    item = by_name(find_leftovers(namespace=namespace))["holder.value"]
    assert "holder.nested['deep'][0]" in item.shared_with


def test_sorted_biggest_first():
    namespace = {"small": torch.zeros(10), "big": torch.zeros(1000), "mid": torch.zeros(100)}
    assert [item.name for item in find_leftovers(namespace=namespace)] == ["big", "mid", "small"]


def test_equal_sizes_are_listed_in_the_order_found():
    namespace = {name: torch.zeros(4) for name in ("b", "c", "a")}
    namespace["big"] = torch.zeros(8)
    namespace["layers"] = [torch.zeros(4) for _ in range(12)]
    found = find_leftovers(namespace=namespace)
    names = ["big", "b", "c", "a"] + [f"layers[{n}]" for n in range(12)]  # 10 after 9
    assert [item.name for item in found] == names


def test_entries_read_later_are_what_the_scan_saw():
    """A scan's list makes each entry when it is first read: what it shows is still the
    scan's snapshot, whatever happened to the arrays since."""
    namespace = {"x": torch.zeros(10), "pair": [torch.zeros(3), torch.zeros(3)]}
    found = find_leftovers(namespace=namespace)
    namespace["x"].resize_(2)
    del namespace["pair"]
    namespace["x"] = torch.zeros(99)
    gc.collect()
    assert [(item.name, item.shape, item.nbytes) for item in found] == [
        ("x", (10,), 40),
        ("pair[0]", (3,), 12),
        ("pair[1]", (3,), 12),
    ]
    assert all(type(item.shape) is tuple for item in found)


def test_the_list_reads_like_a_list():
    namespace = {f"t{n}": torch.zeros(n + 1) for n in range(6)}
    found = find_leftovers(namespace=namespace)
    second = found[1]  # made first, out of order
    everything = list(found)
    assert everything[1] is second and found[-1] is everything[-1]
    assert [item.name for item in everything] == [f"t{n}" for n in range(5, -1, -1)]
    assert found == everything and found[1:3] == everything[1:3] and found[::-2] == everything[::-2]
    assert found != everything[:-1] and found != "t5"
    assert len(found) == 6 and found.index(second) == 1 and second in found
    with pytest.raises(IndexError):
        found[6]
    with pytest.raises(TypeError):
        found["t0"]
    assert found.total_bytes == sum(item.nbytes for item in everything) == 21 * 4
    copy = pickle.loads(pickle.dumps(found))
    assert copy == found and copy.notes == found.notes and copy.total_bytes == found.total_bytes


def test_freeable_bytes_count_what_no_user_variable_holds(ip, run_cell):
    flush_output_history(ip)
    run_cell("import torch\nkept_here = torch.zeros(100)")
    try:
        run_cell("torch.zeros(50)")  # held by the output history only
        found = find_leftovers()
        freeable = found.freeable_bytes
        assert freeable >= 200
        assert freeable == sum(item.nbytes for item in found if item.holder != "user variable")
        made = LeftoverList(list(found))
        assert made.freeable_bytes == freeable and made.total_bytes == found.total_bytes
    finally:
        flush_output_history(ip)
        ip.user_ns.pop("kept_here", None)


def test_long_sequences_of_arrays_are_named_item_by_item():
    """Long lists take C-level shortcuts (one array type; rows of plain values): every
    array in them is still found and named, grads and arrays hidden in a row included."""
    data = [torch.zeros(2) for _ in range(40)]
    params = tuple(torch.zeros(2, requires_grad=True) for _ in range(20))
    params[3].grad = torch.ones(2)
    pairs = [(n, f"w{n}") for n in range(100)] + [(1, torch.zeros(3))]
    records = [{"id": n} for n in range(100)] + [{"t": torch.zeros(5)}]
    mixed = [(n, n) for n in range(50)] + [{"m": torch.zeros(6)}]
    numbers = list(range(1000))
    arrays = [torch.zeros(1)] * 10 + [np.zeros(1)] * 10 if np is not None else []
    namespace = {
        "data": data,
        "params": params,
        "pairs": pairs,
        "records": records,
        "mixed": mixed,
        "numbers": numbers,
        "arrays": arrays,
    }
    names = by_name(find_leftovers(namespace=namespace))
    assert {f"data[{n}]" for n in range(40)} <= set(names)
    assert {f"params[{n}]" for n in range(20)} <= set(names)
    assert "params[3].grad" in names and "params[2].grad" not in names
    assert names["pairs[100][1]"].shape == (3,)
    assert names["records[100]['t']"].shape == (5,)
    assert names["mixed[50]['m']"].shape == (6,)
    if np is not None:
        assert "arrays[0]" in names and "arrays[10]" in names
        assert "arrays[9]" in names["arrays[0]"].shared_with


def _nested(value, levels: int, container=list):
    for _ in range(levels):
        value = [value] if container is list else {"k": value}
    return value


def test_cycles_and_depth_limit():
    """Arrays 16 and 95 containers deep are found by their path (the walk goes on from
    where each stretch of its recursion stopped); past `max_depth` a note names the
    variable; deep plain data and cycles make no note."""
    looped: list = [torch.zeros(5)]
    looped.append(looped)
    deep, deeper = _nested(torch.zeros(7), 16), _nested(torch.zeros(9), 95, dict)
    plain = _nested([1, "x", (2.0,)], 60)
    found = find_leftovers(namespace={"looped": looped, "deep": deep, "deeper": deeper, "p": plain})
    assert [item.name for item in found] == [
        "deeper" + "['k']" * 95,
        "deep" + "[0]" * 16,
        "looped[0]",
    ]
    assert found.limits == ()
    too_deep = {"far": _nested(torch.zeros(3), 150), "deep": deep, "plain": _nested(1, 150)}
    found = find_leftovers(namespace=too_deep)
    assert [item.name for item in found] == ["deep" + "[0]" * 16]
    assert found.limits == (
        "not searched deeper than 100 containers, inside `far`, `plain` "
        "(find_leftovers(max_depth=...) searches deeper)",
    )
    assert find_leftovers(namespace={"far": too_deep["far"]}, max_depth=200)[0].nbytes == 12
    shallow = find_leftovers(namespace={"deep": deep, "looped": looped}, max_depth=10)
    assert [item.name for item in shallow] == ["looped[0]"]
    assert shallow.limits[0].startswith("not searched deeper than 10 containers, inside `deep`")


def test_arrays_past_the_depth_limit_are_not_called_nameless():
    """The deep scan finds what lay past the limit; it does not say no name reaches it."""
    deep = _nested(torch.zeros(11), 12)
    found = find_leftovers(namespace={"deep": deep}, max_depth=5, deep=True)
    assert found.limits[0].startswith("not searched deeper than 5 containers, inside `deep`")
    unnamed = [item for item in found if item.shape == (11,)]
    assert len(unnamed) == 1 and unnamed[0].name.startswith("<unnamed #")
    assert found.limits[1].endswith("reached by no name in the notebook down to the depth searched")


def test_device_filter():
    namespace = {"x": torch.zeros(3)}
    assert len(find_leftovers(device="cpu", namespace=namespace)) == 1
    assert find_leftovers(device="cuda", namespace=namespace) == []
    assert find_leftovers(device=0, namespace=namespace) == []


def test_bad_arguments():
    with pytest.raises(TypeError):
        find_leftovers(namespace=[1, 2])
    with pytest.raises(TypeError):
        find_leftovers(namespace={}, deep="yes")


def test_scan_keeps_nothing_alive():
    namespace = {"x": torch.zeros(100), "nested": {"k": [torch.ones(3)]}}
    refs = [weakref.ref(namespace["x"]), weakref.ref(namespace["nested"]["k"][0])]
    items = find_leftovers(namespace=namespace, deep=True)
    assert len(items) >= 2
    namespace.clear()
    assert all(ref() is None for ref in refs)


def test_deep_finds_unnamed_tensors_and_says_who_refers_to_them():
    # a module's global: modules are machinery the walk does not enter, so no name reaches it
    hidden = types.ModuleType("hidden_state")
    hidden.cache = {"hidden": torch.zeros(12345)}
    namespace = {"state": hidden}
    assert find_leftovers(namespace=namespace) == []
    deep = find_leftovers(namespace=namespace, deep=True)
    unnamed = [item for item in deep if item.nbytes == 12345 * 4]
    assert unnamed and unnamed[0].name.startswith("<unnamed")
    assert unnamed[0].holder == "other"
    assert "referenced by a dict" in unnamed[0].name
    assert any("reached by no name" in note for note in deep.notes)
    # its group says what is known (no name), not a guess (C++) the entry contradicts
    group = next(g for g in deep.groups() if any(e.nbytes == 12345 * 4 for e in g.entries))
    assert group.kind == "no name in the notebook"


def test_text_html_and_json_escape_names():
    items = find_leftovers(namespace={"cache": {"<script>": torch.zeros(4)}})
    assert "cache['<script>']" in str(items)
    page = items._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;" in page
    data = json.loads(json.dumps(items.to_dict()))
    assert data["leftovers"][0]["name"] == "cache['<script>']"
    assert "no arrays found" in str(LeftoverList())


# ---------------------------------------------------------------- in a real shell


def test_holder_kinds_in_a_real_shell(ip, run_cell):
    reset.gpu_reset(shell=ip)
    run_cell("import torch\nmine = torch.zeros(100)")
    run_cell("torch.ones(200)")
    with capture_output():
        run_cell(
            "def train():\n    batch = torch.ones(300)\n"
            "    raise ValueError('x', torch.ones(400))\ntrain()"
        )
    try:
        items = find_leftovers()
        holders = {item.name: item.holder for item in items}
        out_name = next(name for name in holders if name.startswith("Out["))
        assert holders["mine"] == "user variable"
        assert holders[out_name] == "output history"
        assert holders["<traceback: train() local 'batch'>"] == "traceback frame"
        assert holders["<exception ValueError>.args[1]"] == "other"
        assert set(holders.values()) <= set(HOLDERS)
        out_item = next(item for item in items if item.name == out_name)
        assert "_" in out_item.shared_with or "__" in out_item.shared_with
        # IPython's own names are not user variables
        assert not any(name.startswith(("In", "_i", "_oh", "exit")) for name in holders)
        # passing the shell's own namespace is the same scan
        same = {item.name: item.holder for item in find_leftovers(namespace=ip.user_ns)}
        assert same == holders
    finally:
        reset.gpu_reset("mine", shell=ip)


# ---------------------------------------------------------------- imports


@pytest.mark.slow
def test_core_modules_import_no_framework_and_no_ipython():
    root = str(Path(__file__).resolve().parents[2])
    code = (
        "import sys\n"
        "from colab_gpu_guard import leftovers, reset\n"
        "from colab_gpu_guard.cells import tracker\n"
        "leftovers.find_leftovers(namespace={'x': 1}, deep=True)\n"
        "reset.gpu_reset(namespace={'x': 1}, dry_run=True)\n"
        "tracker.format_history(tracker.memory_history())\n"
        "bad = [m for m in ('torch', 'numpy', 'IPython', 'ipywidgets', 'cupy', 'jax') "
        "if m in sys.modules]\n"
        "print('IMPORTED', bad)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert "IMPORTED []" in done.stdout, done.stdout + done.stderr


# ---------------------------------------------------------------- the Scan gpu_reset reads


def test_scan_groups_and_reach_by_root():
    from colab_gpu_guard.frameworks.base import storage_key
    from colab_gpu_guard.leftovers import scan
    from colab_gpu_guard.notebook_refs import VARIABLE

    base = torch.zeros(10)
    namespace = {"base": base, "view": base[2:], "other": [torch.ones(3)]}
    found = scan(namespace=namespace, keep_refs=True)
    assert [item.name for item in found.leftovers] == ["base", "other[0]"]
    group = found.groups[storage_key(str(base.device), base.untyped_storage().data_ptr())]
    assert group.storage_nbytes == 40 and group.device == "cpu"
    assert group.framework == "torch"
    assert group.storage_id == base.untyped_storage().data_ptr()
    assert [ref() for ref in group.weakrefs] == [base, namespace["view"]]
    reach = found.reach_by_root()
    assert {root.key for root in reach if root.kind == VARIABLE} == {"base", "view", "other"}
    assert reach[next(root for root in reach if root.key == "view")] == {group.key}


def test_one_table_for_every_view_of_the_leftovers():
    """The leftovers list, gpu_reset's report, the status snapshot and the panel show the
    same table (one renderer; grouped by root but the panel), with the shared names as a
    column and every name escaped."""
    from colab_gpu_guard.leftovers.html import groups_html, leftovers_table
    from colab_gpu_guard.status import gpu_status, panel_leftovers

    base = torch.zeros(64, 64)
    namespace = {"base": base, "view<b>": base[1:], "small": torch.ones(3)}
    found = find_leftovers(namespace=namespace)
    table = leftovers_table(list(found))
    assert '<th style="text-align:left;padding:0 8px 0 0">also reached as</th>' in table
    assert "view&lt;b&gt;" in table
    assert "<b>" not in table
    page = found._repr_html_()
    assert groups_html(found.groups()) in page
    # `base` is one tensor: listed once, as its group's line, the other names beside it
    assert "<code>base</code>" in page and "also reached as view&lt;b&gt;" in page
    report = reset.gpu_reset(namespace=namespace, dry_run=True)
    assert groups_html(report.held_groups()) in report._repr_html_()
    status = gpu_status(namespace=namespace, history=False)
    assert groups_html(status.leftover_groups) in status._repr_html_()
    # the panel's section: the same groups in order, each opening to its arrays
    groups = status.leftover_groups
    assert panel_leftovers.shown_groups(status) == groups and groups
    for group in groups:
        assert html.escape(group.describe()) in panel_leftovers.render_group_line(group)
        body = panel_leftovers.render_group_body(group)
        for entry in group.entries:
            assert f">{html.escape(entry.name)}" in body
    assert [entry.name for entry in status.leftovers] == [item.name for item in found]


def test_memory_torch_and_numpy_share_is_counted_once():
    """`t.numpy()` and `torch.from_numpy(a)` share their memory with the other framework's
    array: one block each (as the data addresses say), not two."""
    numpy = pytest.importorskip("numpy")
    t = torch.randn(250_000)
    a = numpy.ones(250_000, dtype=numpy.float32)
    namespace = {"t": t, "n": t.numpy(), "a": a, "u": torch.from_numpy(a), "view": a[10:]}
    assert namespace["n"].__array_interface__["data"][0] == t.data_ptr()
    assert namespace["u"].data_ptr() == a.__array_interface__["data"][0]
    items = find_leftovers(namespace=namespace)
    assert sum(item.nbytes for item in items) == 2 * 250_000 * 4
    groups = items.groups()
    assert (groups.blocks, groups.total_bytes) == (2, 2 * 250_000 * 4)
    assert {group.name for group in groups if group.count} == {"t", "a"}
    empty = {"z": numpy.zeros(0), "y": numpy.zeros(0)}  # no memory: never "shared"
    assert all(not group.shares for group in find_leftovers(namespace=empty).groups())

    class Sneaky(numpy.ndarray):  # reading the address never runs a subclass's code
        @property
        def __array_interface__(self):
            raise AssertionError("the scan ran user code")

    sneaky = numpy.ones(1000).view(Sneaky)
    items = find_leftovers(namespace={"s": sneaky, "u": torch.from_numpy(numpy.asarray(sneaky))})
    assert sum(item.nbytes for item in items) == 8000


@pytest.mark.parametrize(
    "make",
    ["torch.from_numpy(a[10:])", "torch.as_tensor(a[:, 3])", "torch.from_numpy(a[5::2])"],
)
def test_a_tensor_over_a_numpy_view_shares_the_arrays_block(make):
    """A tensor over a view of a NumPy array starts inside the array's buffer, at another
    address: it is counted with the array (its block, the whole buffer), not as a block
    of its own; the reset then expects nothing from deleting it, and says who holds it."""
    numpy = pytest.importorskip("numpy")
    a = numpy.ones((1000, 1000), dtype=numpy.float32)
    t = eval(make, {"torch": torch, "a": a})
    pointer = t.untyped_storage().data_ptr()
    start = a.__array_interface__["data"][0]
    assert start <= pointer and pointer + t.untyped_storage().nbytes() <= start + a.nbytes
    for namespace in ({"a": a, "t": t}, {"t": t, "a": a}):
        items = find_leftovers(namespace=namespace)
        groups = items.groups()
        assert (groups.blocks, groups.total_bytes) == (1, a.nbytes), str(items)
        assert [item.nbytes for item in items] == [a.nbytes], str(items)
    report = reset.gpu_reset("t", namespace={"a": a, "t": t})
    assert (report.estimated_bytes, report.released_bytes) == (0, 0), str(report)
    assert "`t`: 3.81 MiB of its memory stays: still held by `a`" in "\n".join(report.notes)
    # the same memory, named only by the tensor: its storage's span, one block
    alone = find_leftovers(namespace={"t": t}).groups()
    assert (alone.blocks, alone.total_bytes) == (1, t.untyped_storage().nbytes())


def test_a_graph_that_saved_a_batch_of_a_named_numpy_array_counts_none_of_it():
    """``torch.from_numpy(X[64:128]) @ w``: the graph saved the batch, which is part of
    ``X``'s buffer: the loss's graph keeps nothing ``X`` does not, so it counts 0 bytes
    (not the batch's 25 KiB again) and is not listed as a hidden holder."""
    numpy = pytest.importorskip("numpy")
    X = numpy.ones((10_000, 100), dtype=numpy.float32)
    w = torch.randn(100, 1, requires_grad=True)
    loss = (torch.from_numpy(X[64:128]) @ w).sum()
    items = find_leftovers(namespace={"X": X, "w": w, "loss": loss})
    groups = items.groups()
    assert (groups.blocks, groups.total_bytes) == (3, X.nbytes + 400 + 4), str(items)
    assert all(not item.graph_nbytes for item in items), str(items)
