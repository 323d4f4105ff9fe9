"""Tensors whose memory is other tensors': wrapper subclasses (a quantized weight, a
nested tensor with the jagged layout, DTensor) hold none of their own, their inner tensors
(attributes or slots) hold it; a nested tensor with torch's older layout has a storage but
no shape. Each is counted once, at the bytes that die with it (weakrefs), listed once as
the tensor it is (its dtype, and its layout or class), and read without running the
subclass's code."""

from __future__ import annotations

import gc
import re
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import find_leftovers, gpu_reset  # noqa: E402
from colab_gpu_guard.cells.history_text import START_AFRESH


class Int8Weight(torch.Tensor):
    """A weight kept as int8 values and a scale, shown as float32 (torchao's pattern)."""

    calls: list = []

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, dtype=torch.float32)

    def __init__(self, data, scale):
        self.data_int8 = data
        self.scale = scale

    def __tensor_flatten__(self):
        Int8Weight.calls.append("__tensor_flatten__")
        return ["data_int8", "scale"], None

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        Int8Weight.calls.append(str(func))
        raise NotImplementedError(func)


class Tagged(torch.Tensor):
    """A plain subclass (a storage of its own) with a tensor in a slot."""

    __slots__ = ("mask",)


def storages(*tensors) -> list[weakref.ref]:
    return [weakref.ref(tensor.untyped_storage()) for tensor in tensors]


def by_name(items) -> dict[str, int]:
    return {item.name: item.nbytes for item in items}


def test_a_wrapper_subclass_counts_its_inner_tensors_once():
    """A 1024x1024 weight as int8 + scale: 1 MiB + 4 KiB, not 4 MiB for the float32 it
    shows (and 5 MiB with its inner tensors), listed once as ``w`` (not as its inner
    tensors and a 0-byte ``w``); the reset frees exactly those bytes."""
    data, scale = torch.zeros(1024, 1024, dtype=torch.int8), torch.ones(1024)
    w = Int8Weight(data, scale)
    Int8Weight.calls.clear()
    found = find_leftovers(namespace={"w": w})
    assert by_name(found) == {"w": 1024 * 1024 + 4096}, str(found)
    (entry,) = found
    assert (entry.dtype, entry.kind, entry.shape) == ("float32", "Int8Weight", (1024, 1024))
    assert found.groups().total_bytes == 1024 * 1024 + 4096
    watch = storages(data, scale)
    namespace = {"w": w}
    del w, data, scale
    report = gpu_reset("w", namespace=namespace)
    gc.collect()
    assert all(ref() is None for ref in watch)
    assert report.estimated_bytes == report.released_bytes == 1024 * 1024 + 4096, str(report)
    assert Int8Weight.calls == []  # neither its dispatch nor its flatten ran


def test_a_jagged_nested_tensor_counts_its_values_and_offsets_once():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor(
            [torch.ones(1000, 8), torch.ones(500, 8)], layout=torch.jagged
        )
    values, offsets = nt.values(), nt.offsets()
    expected = values.untyped_storage().nbytes() + offsets.untyped_storage().nbytes()
    found = find_leftovers(namespace={"nt": nt})
    assert found.groups().total_bytes == expected == 1500 * 8 * 4 + 3 * 8, str(found)
    (entry,) = found
    assert (entry.name, entry.nbytes, entry.type_text) == ("nt", expected, "float32 jagged")
    assert (entry.dtype, entry.kind) == ("float32", "jagged")
    # the ragged dimension's symbol (j1, j2, ...) counts the process's nested tensors
    assert re.search(r"nt  float32 jagged \[2xj\d+x8\] cpu", str(found)), str(found)


def test_a_deep_scan_does_not_call_torchs_own_meta_tensors_memory():
    """Making a jagged nested tensor leaves three tensors on the meta device in torch's
    caches, for good: a deep scan listed them as "the memory of 3 more arrays is alive but
    reached by no name", at 0 B. A meta tensor holds no memory: none is listed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor([torch.ones(10, 8), torch.ones(5, 8)], layout=torch.jagged)
    del nt
    gc.collect()
    meta = [obj for obj in gc.get_objects() if type(obj) is torch.Tensor and obj.is_meta]
    assert meta  # the premise: torch keeps some
    deep = find_leftovers(namespace={}, deep=True)
    assert not [item for item in deep if item.device == "meta"], str(deep)


def test_a_nested_tensor_of_the_older_layout_is_counted_with_its_ragged_sizes():
    """It has a storage but no shape (``.shape`` raises): it was left out of the list."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor([torch.ones(1000, 8), torch.ones(500, 8)])
    (item,) = find_leftovers(namespace={"nt": nt})
    assert (item.name, item.nbytes, item.shape) == ("nt", 48_000, (2, "*", 8))
    assert "float32 [2x*x8] cpu" in str(find_leftovers(namespace={"nt": nt}))


def test_a_tensor_in_a_subclass_slot_is_found():
    t = torch.ones(1000).as_subclass(Tagged)
    t.mask = torch.zeros(2000, dtype=torch.bool)
    assert by_name(find_leftovers(namespace={"t": t})) == {"t": 4000, "t.mask": 2000}


def test_dtensor_counts_its_local_shard_held_in_a_slot():
    """DTensor keeps its shard in a slot (``_local_tensor``) and shows the global shape:
    the shard is what it holds (on one rank of eight, an eighth of the global bytes)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        dt = distribute_tensor(torch.ones(512, 512), mesh, [Shard(0)])
        found = find_leftovers(namespace={"dt": dt})
        # with its device mesh's ranks (`mesh.mesh`, kept by `dt._spec.mesh`): 4 bytes here
        rank_map = mesh.mesh.untyped_storage().nbytes()
        assert by_name(found) == {"dt": 512 * 512 * 4 + rank_map}, str(found)
        assert [(item.dtype, item.kind) for item in found] == [("float32", "DTensor")]
    finally:
        dist.destroy_process_group()


def test_a_displayed_wrapper_is_measured_by_its_inner_tensors():
    """The line under a result that keeps memory measures a wrapper by its inner tensors
    (its shown float32 size would be 4x the int8 weight's; 0 would hide it)."""
    from colab_gpu_guard.cells.output_warning import held_arrays

    data, scale = torch.zeros(1024, 1024, dtype=torch.int8), torch.ones(1024)
    w = Int8Weight(data, scale)
    Int8Weight.calls.clear()
    expected = {"cpu": 1024 * 1024 + 4096}
    assert held_arrays(w, include_cpu=True) == expected
    assert held_arrays([w, data], include_cpu=True) == expected  # shared: counted once
    assert Int8Weight.calls == []


def test_a_rerun_keeping_subclass_tensors_names_their_list(ip, run_cell):
    """torchvision's ``tv_tensors.Image`` is a tensor subclass: a list gaining one per
    rerun holds what each run kept, and the LEAK line names it with its bytes (subclasses
    were not measured: "held by something else"). No subclass code runs."""
    from tests.records import reruns

    run_cell(
        "import torch\nimages_s = []\nimage_calls_s = []\n"
        "class Image_s(torch.Tensor):\n"
        "    @classmethod\n"
        "    def __torch_function__(cls, func, types, args=(), kwargs=None):\n"
        "        image_calls_s.append(func)\n"
        "        return super().__torch_function__(func, types, args, kwargs or {})\n"
    )
    flagged, history = reruns(
        run_cell, "images_s.append(torch.ones(5_000_000).as_subclass(Image_s))"
    )
    assert ip.user_ns["image_calls_s"] == []
    for record in flagged:
        assert (
            record.rerun_leak and record.held_by == f"`images_s` (grew by 1 item; {START_AFRESH})"
        ), history
    for name in ("images_s", "image_calls_s", "Image_s"):
        ip.user_ns.pop(name, None)
