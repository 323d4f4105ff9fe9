"""Tensor metadata read in bulk (`array_columns`, what a scan of many tensors uses) is the
metadata read one tensor at a time (`array_info`), field by field, for every kind of
tensor a notebook holds; and the bulk read leaves no torch.Size behind."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.frameworks.torch_arrays import array_columns, array_info  # noqa: E402


def tensors() -> list:
    base = torch.arange(24, dtype=torch.float32)
    loaded_slice = torch.zeros(100)[:10].clone()
    loaded_slice.set_(torch.zeros(100).untyped_storage(), 0, (10,))  # storage > span
    return [
        torch.tensor(1.5),  # 0-d
        torch.zeros(3, dtype=torch.int64),
        base,
        base[4:10],  # a view with an offset
        base.view(4, 6),
        base.view(4, 6).t(),  # not contiguous
        torch.ones(2, 3, 4, dtype=torch.float16),
        torch.empty(0),
        torch.empty(0, 5),
        torch.zeros(5, requires_grad=True) * 2,  # with a grad_fn
        torch.nn.Parameter(torch.ones(7)),
        loaded_slice,
        torch.tensor(True),
    ]


@pytest.mark.parametrize("order", ["given", "reversed", "only_1d", "only_2d"])
def test_bulk_columns_equal_one_at_a_time(order):
    items = tensors()
    if order == "reversed":
        items.reverse()
    elif order == "only_1d":
        items = [item for item in items if item.dim() == 1]
    elif order == "only_2d":
        items = [item for item in items if item.dim() >= 2]
    expected = [array_info(item) for item in items]
    columns = array_columns(items)
    rows = list(zip(*columns))
    assert [tuple(info) for info in expected] == rows
    for row, item in zip(rows, items):
        assert row[0] == tuple(item.shape) and type(row[0]) is tuple
        assert row[5] == item.untyped_storage().nbytes()


def test_vectors_of_one_length_share_one_shape_and_host_memory_is_keyed_by_address():
    items = [torch.zeros(3) for _ in range(50)] + [torch.ones(3)[:3]]
    shapes, _, devices, _, keys, _, ids = columns = array_columns(items)
    assert list(zip(*columns)) == [tuple(array_info(item)) for item in items]
    assert len(set(map(id, shapes))) == 1 and shapes[0] == (3,)
    addresses = [item.untyped_storage().data_ptr() for item in items]
    assert keys == ids == addresses and set(devices) == {"cpu"}


@pytest.mark.gpu
def test_host_and_device_tensors_read_together_are_keyed_apart():
    items = [torch.zeros(3), torch.zeros(3, device="cuda"), torch.ones(4)]
    _, _, devices, _, keys, _, ids = columns = array_columns(items)
    assert list(zip(*columns)) == [tuple(array_info(item)) for item in items]
    assert devices == ["cpu", "cuda:0", "cpu"]
    pointers = [item.untyped_storage().data_ptr() for item in items]
    assert keys == [pointers[0], ("cuda:0", pointers[1]), pointers[2]] and ids == pointers


def test_storage_larger_than_the_tensor_is_counted_whole():
    items = tensors()
    shape, _, _, nbytes, _, storage_nbytes, _ = (c[-2] for c in array_columns(items))
    assert (shape, nbytes, storage_nbytes) == ((10,), 40, 400)


def test_bulk_read_of_vectors_builds_no_size_per_tensor():
    many = [torch.zeros(2) for _ in range(2000)] + [torch.tensor(0.5) for _ in range(2000)]
    gc.collect()

    def sizes() -> int:
        return sum(1 for obj in gc.get_objects() if type(obj) is torch.Size)

    before = sizes()
    columns = array_columns(many)
    assert sizes() == before
    assert len(set(map(id, columns[0]))) == 2  # (2,) and (), each made once
    assert columns[0][0] == (2,) and columns[0][-1] == ()


def test_a_scan_leaves_torch_one_storage_object_per_tensor_while_the_tensors_live():
    """docs/benchmarks.md: reading a tensor's memory block makes torch keep a Python object
    for it (72 bytes) for as long as the memory lives; it goes with the tensors."""
    import gc
    import sys
    import weakref

    from colab_gpu_guard import find_leftovers

    tensors = [torch.zeros(2) for _ in range(1000)]
    gc.collect()
    before = len(gc.get_objects())
    find_leftovers(namespace={"tensors": tensors})
    gc.collect()
    assert len(gc.get_objects()) - before >= 1000  # one storage object each, kept
    storage = torch._C.TensorBase.untyped_storage(tensors[0])
    assert sys.getsizeof(storage) <= 128  # 72 with torch 2.13 on Python 3.11
    kept = [weakref.ref(torch._C.TensorBase.untyped_storage(t)) for t in tensors]
    del storage
    gc.collect()
    assert all(ref() is not None for ref in kept)  # torch keeps them while the tensors live
    del tensors
    gc.collect()
    assert all(ref() is None for ref in kept)


def test_no_subclass_torch_function_runs_while_tensors_are_read():
    """A tensor subclass's __torch_function__ is user code: reading its metadata (the
    scan, the reset's proofs, a status) must not run it. torch's getters and methods
    dispatch to it on every call unless subclass dispatch is off."""
    from colab_gpu_guard import find_leftovers, gpu_reset, gpu_status

    calls: list = []

    class Spy(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            calls.append(getattr(func, "__name__", repr(func)))
            return super().__torch_function__(func, types, args, kwargs or {})

    spy = Spy(torch.randn(64, 64)).requires_grad_()
    loss = (torch.randn(8, 64) @ spy).sum()  # a Spy too, with a graph
    namespace = {"spy": spy, "loss": loss, "rows": [spy[0].detach()]}
    calls.clear()
    found = {item.name: item for item in find_leftovers(namespace=namespace)}
    gpu_status(namespace=namespace)
    gpu_reset(namespace=namespace, dry_run=True)
    gpu_reset("rows", namespace=namespace)
    assert calls == []
    assert found["spy"].nbytes == 64 * 64 * 4


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr", "csc", "bsr"])
def test_a_sparse_tensor_counts_every_component_it_keeps(layout):
    """A CSR tensor keeps its compressed rows, column indices and values (it was counted
    as its values alone: 4 MiB of 20 MiB); the bytes are the ones that die with it."""
    import gc
    import weakref

    dense = torch.randn(512, 512)
    dense[dense.abs() < 1.0] = 0
    make = {
        "coo": lambda: dense.to_sparse(),
        "csr": lambda: dense.to_sparse_csr(),
        "csc": lambda: dense.to_sparse_csc(),
        "bsr": lambda: dense.to_sparse_bsr((4, 4)),
    }
    sparse = make[layout]()
    parts = {
        "coo": ("_indices", "_values"),
        "csr": ("crow_indices", "col_indices", "values"),
        "csc": ("ccol_indices", "row_indices", "values"),
        "bsr": ("crow_indices", "col_indices", "values"),
    }[layout]
    storages = [getattr(sparse, name)().untyped_storage() for name in parts]
    expected = sum({s.data_ptr(): s.nbytes() for s in storages}.values())
    watch = [weakref.ref(storage) for storage in storages]
    del storages
    assert array_info(sparse).storage_nbytes == expected
    del sparse
    gc.collect()
    assert all(ref() is None for ref in watch)  # those bytes went with it


@pytest.mark.filterwarnings("ignore:Sparse invariant checks")
def test_a_sparse_tensor_and_its_named_indices_and_values_count_once():
    """``sparse_coo_tensor(i, v)`` keeps ``i`` and ``v`` themselves: the scan counts the
    sparse tensor by its components (``sp._indices()``, ``sp._values()``), one block each
    with ``i`` and ``v`` (it was a block of its own besides them: 19 MiB for 9.5). Deleting
    ``sp`` frees nothing while ``i`` and ``v`` live, and the reset says who holds it;
    alone, it is listed once as the tensor it is, and the reset frees exactly its
    components, proven by their storages' weakrefs."""
    import gc
    import weakref

    from colab_gpu_guard import find_leftovers, gpu_reset

    i = torch.randint(0, 1000, (2, 500_000))
    v = torch.randn(500_000)
    sp = torch.sparse_coo_tensor(i, v, (1000, 1000))
    total = i.nbytes + v.nbytes
    found = find_leftovers(namespace={"sp": sp, "i": i, "v": v})
    groups = found.groups()
    assert (groups.blocks, groups.total_bytes) == (2, total), str(found)
    assert {item.name: item.shared_with for item in found} == {
        "i": ("sp._indices()",),
        "v": ("sp._values()",),
    }, str(found)
    report = gpu_reset("sp", namespace={"sp": sp, "i": i, "v": v})
    assert (report.estimated_bytes, report.released_bytes) == (0, 0), str(report)
    assert "still held by `i`, `v`" in "\n".join(report.notes), str(report)

    alone = {"sp": sp}
    (entry,) = find_leftovers(namespace=alone)
    assert (entry.name, entry.nbytes, entry.array_nbytes) == ("sp", total, total)
    assert (entry.dtype, entry.kind) == ("float32", "sparse_coo")
    assert (entry.shape, entry.device) == ((1000, 1000), "cpu")
    watch = [weakref.ref(i.untyped_storage()), weakref.ref(v.untyped_storage())]
    del sp, i, v
    gc.collect()
    assert all(ref() is not None for ref in watch)  # the namespace's sparse tensor holds them
    report = gpu_reset("sp", namespace=alone)
    assert all(ref() is None for ref in watch)
    assert report.estimated_bytes == report.released_bytes == total, str(report)


def test_a_sparse_tensor_over_more_memory_than_it_uses_advises_copying_the_tensor():
    """A sparse tensor made on a slice of a bigger tensor keeps that tensor's whole storage
    once the bigger one is gone: the note says so, and the fix is the tensor's own clone
    (which keeps only what it uses), not a clone of a component."""
    from colab_gpu_guard import find_leftovers

    big = torch.randn(1_000_000)
    sv = torch.sparse_coo_tensor(torch.zeros(1, 10, dtype=torch.long), big[:10], (10,))
    del big
    assert sv._values().untyped_storage().nbytes() == 4_000_000  # the premise
    (entry,) = find_leftovers(namespace={"sv": sv})
    assert (entry.name, entry.nbytes) == ("sv", 4_000_000 + 80)
    # the layout is a field of its own, in the JSON too; the note is chosen by it
    assert {key: entry.to_dict()[key] for key in ("dtype", "kind")} == {
        "dtype": "float32",
        "kind": "sparse_coo",
    }
    assert entry.view_text() == (
        "view: uses 120 B of the 3.81 MiB it keeps alive (keep sv.clone(): it copies only "
        "what sv uses)"
    )
    copied = sv.clone()._values()
    assert copied.untyped_storage().nbytes() == copied.nbytes  # the fix does keep less
