"""Tensors whose memory is other tensors', in a real shell: sparse tensors (their indices
and values), a nested tensor with the jagged layout (its values and offsets), a wrapper
subclass (a quantized weight's int8 data and scale). Each is listed once, as the tensor a
user made (its name, dtype, layout or class and shape, its bytes those of what it keeps),
by `%gpu_status` and `%gpu_reset`; a deep scan does not find it again as memory no name
reaches; `%gpu_reset NAME` frees exactly what it keeps (weakrefs prove it)."""

from __future__ import annotations

import re

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402

pytestmark = [
    pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta"),
    pytest.mark.filterwarnings("ignore:Sparse invariant checks"),
]

PARTS = {
    "sparse_coo": ("_indices", "_values"),
    "sparse_csr": ("crow_indices", "col_indices", "values"),
    "sparse_csc": ("ccol_indices", "row_indices", "values"),
    "sparse_bsr": ("crow_indices", "col_indices", "values"),
}


def run(run_cell, source: str):
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec
    return result


def magic(ip, name: str, line: str = "") -> str:
    """What `%name line` shows as text: printed, or its report displayed (a magic
    displays its report as text and HTML, for the front end to choose)."""
    with capture_output() as captured:
        result = ip.run_cell(f"%{name} {line}", store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    shown = [output.data["text/plain"] for output in captured.outputs]
    return captured.stdout + "".join(shown)


def kept_bytes(tensor) -> int:
    """What a sparse tensor keeps alive: its components' storages, each once (read here
    through torch, not through the package)."""
    layout = str(tensor.layout).rpartition(".")[2]
    storages = [getattr(tensor, part)().untyped_storage() for part in PARTS[layout]]
    return sum({storage.data_ptr(): storage.nbytes() for storage in storages}.values())


def test_each_sparse_layout_is_listed_once_as_the_tensor_the_user_made(shell, run_cell):
    run(
        run_cell,
        "dense = torch.randn(256, 256); dense[dense.abs() < 1.0] = 0\n"
        "coo = dense.to_sparse(); csr = dense.to_sparse_csr()\n"
        "csc = dense.to_sparse_csc(); bsr = dense.to_sparse_bsr((4, 4))\n"
        "del dense",
    )
    ns = shell.user_ns
    made = ("bsr", "coo", "csc", "csr")
    listed = {item.name: item for item in find_leftovers(shell=shell)}
    assert not [name for name in listed if name.startswith(tuple(f"{n}." for n in made))]
    found = {name: listed[name] for name in made}
    for name in found:
        layout = str(ns[name].layout).rpartition(".")[2]
        assert (found[name].dtype, found[name].kind) == ("float32", layout)
        assert found[name].shape == (256, 256)
        assert found[name].nbytes == kept_bytes(ns[name]), name
    status = magic(shell, "gpu_status")
    for name in found:
        layout = str(ns[name].layout).rpartition(".")[2]
        assert f"  {name}  float32 {layout} [256x256] cpu  (user variable)" in status, status
    assert "_indices()" not in status and "values()" not in status, status
    assert "Tensor: " not in status, status  # no group of a tensor's own parts
    total = sum(kept_bytes(ns[name]) for name in found)
    alone = find_leftovers(namespace={name: ns[name] for name in made})
    assert alone.groups().total_bytes == total


def test_a_deep_scan_does_not_find_named_sparse_tensors_again(shell, run_cell):
    """The deep scan looks for tensors alive that no name reaches: a sparse tensor a name
    reaches is not one of them (each named sparse tensor, and a sparse gradient, was
    listed again as `<unnamed #N: referenced by a dict of N entries>` with "no array of
    its own")."""
    run(
        run_cell,
        "sp = torch.randn(100, 100).to_sparse(); csr = torch.randn(50, 50).to_sparse_csr()\n"
        "emb = torch.nn.Embedding(1000, 16, sparse=True)\n"
        "emb(torch.arange(10)).sum().backward()",
    )
    assert shell.user_ns["emb"].weight.grad.layout == torch.sparse_coo  # the premise
    deep = find_leftovers(shell=shell, deep=True)
    names = [item.name for item in deep]
    assert {"sp", "csr", "emb.weight.grad"} <= set(names), names
    # what other tests left behind may be alive and unnamed: none of it is these tensors
    unnamed = [item for item in deep if item.holder == "other"]
    assert not [item for item in unnamed if item.kind.startswith("sparse_")], str(deep)
    assert not [name for name in names if name.endswith(("_values()", "_indices()"))], names
    assert "no array of its own" not in str(deep), str(deep)


def test_a_sparse_tensor_sharing_named_tensors_is_named_beside_them(shell, run_cell):
    """``sparse_coo_tensor(i, v)`` keeps ``i`` and ``v`` themselves: each is listed once
    with the sparse tensor's component beside it, and deleting the sparse tensor frees
    nothing while they live."""
    run(
        run_cell,
        "i = torch.randint(0, 1000, (2, 50_000)); v = torch.randn(50_000)\n"
        "sp = torch.sparse_coo_tensor(i, v, (1000, 1000))",
    )
    status = magic(shell, "gpu_status")
    assert "  i  int64 [2x50000] cpu  (user variable)  also: sp._indices()" in status, status
    assert "  v  float32 [50000] cpu  (user variable)  also: sp._values()" in status, status
    dry = magic(shell, "gpu_reset", "sp --dry-run")
    assert "still held by `i`, `v`" in dry, dry


def test_gpu_reset_of_a_sparse_tensor_frees_what_it_keeps(shell, run_cell):
    run(
        run_cell,
        "csr = torch.randn(500, 500).to_sparse_csr()\n"
        "refs['parts'] = [weakref.ref(part.untyped_storage()) for part in "
        "(csr.crow_indices(), csr.col_indices(), csr.values())]\n"
        "kept = " + "sum({s.data_ptr(): s.nbytes() for s in (csr.crow_indices().untyped_storage(), "
        "csr.col_indices().untyped_storage(), csr.values().untyped_storage())}.values())",
    )
    kept = shell.user_ns["kept"]
    (entry,) = [item for item in find_leftovers(shell=shell) if item.name == "csr"]
    assert entry.nbytes == kept
    text = magic(shell, "gpu_reset", "csr")
    assert all(ref() is None for ref in shell.user_ns["refs"]["parts"]), text
    from colab_gpu_guard.units import format_bytes

    assert f"freed: {format_bytes(kept)} of tensors" in text, text
    assert "csr" not in shell.user_ns


def test_a_jagged_nested_tensor_and_a_wrapper_subclass_are_listed_once(shell, run_cell):
    """Each was a group of its inner tensors with a 0-byte line of its own
    (``jag._values``, ``jag._offsets``, ``jag  0 B``); now one line, its bytes those of
    its inner tensors, read without running the subclass's code."""
    from tests.unit.test_tensor_wrappers import Int8Weight

    shell.user_ns["Int8Weight"] = Int8Weight
    run(
        run_cell,
        "import warnings\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')\n"
        "    jag = torch.nested.nested_tensor(\n"
        "        [torch.ones(1000, 8), torch.ones(500, 8)], layout=torch.jagged)\n"
        "w = Int8Weight(torch.zeros(1024, 1024, dtype=torch.int8), torch.ones(1024))\n"
        "refs['w'] = [weakref.ref(w.data_int8.untyped_storage()), "
        "weakref.ref(w.scale.untyped_storage())]",
    )
    ns = shell.user_ns
    jag_bytes = sum(
        part.untyped_storage().nbytes() for part in (ns["jag"].values(), ns["jag"].offsets())
    )
    Int8Weight.calls.clear()
    status = magic(shell, "gpu_status")
    # the ragged dimension's symbol (j1, j2, ...) counts the process's nested tensors
    assert re.search(r"  jag  float32 jagged \[2xj\d+x8\] cpu  \(user variable\)", status), status
    assert "  w  float32 Int8Weight [1024x1024] cpu  (user variable)" in status, status
    assert "jag._values" not in status and "w.data_int8" not in status, status
    found = {item.name: item.nbytes for item in find_leftovers(shell=shell)}
    assert found["jag"] == jag_bytes and found["w"] == 1024 * 1024 + 4096, found
    text = magic(shell, "gpu_reset", "w")
    assert all(ref() is None for ref in ns["refs"]["w"]), text
    assert "freed: 1 MiB of tensors" in text, text
    assert Int8Weight.calls == []  # neither its dispatch nor its flatten ran
