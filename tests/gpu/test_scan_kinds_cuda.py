"""The scan's newer kinds on CUDA tensors: sparse tensors by their components, wrapper
subclasses, jagged nested tensors, TorchScript modules, a dry run that re-walks without the
dropped roots, and a failed run's traceback holding CUDA tensors. For each, the bytes the
scan names are the storages' own, and the reset frees exactly them: torch's allocator
(`memory_allocated`) falls by that much and weakrefs prove the storages died. Skipped
without a CUDA device."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import find_leftovers, gpu_reset  # noqa: E402

pytestmark = pytest.mark.gpu
MiB = 2**20
# the caching allocator rounds every block up to 512 bytes: a tensor of n bytes moves
# memory_allocated() by n rounded up to a multiple of 512
BLOCK = 512


def rounded(nbytes: int) -> int:
    return -(-nbytes // BLOCK) * BLOCK


@pytest.fixture(autouse=True)
def settled():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    gc.collect()
    torch.cuda.synchronize()
    yield
    gc.collect()
    torch.cuda.empty_cache()


def storages_of(*tensors) -> dict[int, torch.UntypedStorage]:
    return {t.untyped_storage().data_ptr(): t.untyped_storage() for t in tensors}


def reset_and_measure(namespace: dict, *names: str, storages: dict) -> tuple:
    """gpu_reset(names) over namespace; (report, bytes memory_allocated fell by), with
    every storage in storages proven dead."""
    watch = [weakref.ref(storage) for storage in storages.values()]
    storages.clear()
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    report = gpu_reset(*names, namespace=namespace)
    gc.collect()
    torch.cuda.synchronize()
    fell = before - torch.cuda.memory_allocated()
    assert all(ref() is None for ref in watch), str(report)
    return report, fell


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
@pytest.mark.parametrize("layout", ["coo", "csr"])
def test_a_cuda_sparse_tensor_is_counted_and_freed_by_its_components(layout):
    dense = torch.randn(1024, 1024, device="cuda")
    dense[dense.abs() < 1.0] = 0
    sparse = dense.to_sparse() if layout == "coo" else dense.to_sparse_csr()
    del dense
    parts = (
        (sparse._indices(), sparse._values())
        if layout == "coo"
        else (sparse.crow_indices(), sparse.col_indices(), sparse.values())
    )
    storages = storages_of(*parts)
    del parts
    expected = sum(s.nbytes() for s in storages.values())
    found = find_leftovers(namespace={"sparse": sparse})
    assert found.groups().total_bytes == expected, str(found)
    namespace = {"sparse": sparse}
    del sparse
    report, fell = reset_and_measure(namespace, "sparse", storages=storages)
    assert report.estimated_bytes == report.released_bytes == expected, str(report)
    assert expected <= fell <= sum(rounded(n) for n in (expected,)) + 2 * BLOCK


class Int8Weight(torch.Tensor):
    """A weight kept as int8 values and a scale, shown as float32 (torchao's pattern)."""

    @staticmethod
    def __new__(cls, data, scale):
        return torch.Tensor._make_wrapper_subclass(
            cls, data.shape, dtype=torch.float32, device=data.device
        )

    def __init__(self, data, scale):
        self.data_int8 = data
        self.scale = scale

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        raise NotImplementedError(func)


def test_a_cuda_wrapper_subclass_is_its_inner_tensors():
    data = torch.zeros(4096, 4096, dtype=torch.int8, device="cuda")
    scale = torch.ones(4096, device="cuda")
    w = Int8Weight(data, scale)
    storages = storages_of(data, scale)
    del data, scale
    found = {item.name: item.nbytes for item in find_leftovers(namespace={"w": w})}
    assert found == {"w": 16 * MiB + 16384}, found
    namespace = {"w": w}
    del w
    report, fell = reset_and_measure(namespace, "w", storages=storages)
    assert report.released_bytes == 16 * MiB + 16384, str(report)
    assert fell == 16 * MiB + 16384


def test_a_cuda_jagged_nested_tensor_is_its_values_and_offsets():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nt = torch.nested.nested_tensor(
            [torch.ones(4096, 64), torch.ones(2048, 64)], layout=torch.jagged, device="cuda"
        )
    storages = storages_of(nt.values(), nt.offsets())
    expected = sum(s.nbytes() for s in storages.values())
    assert expected == 6144 * 64 * 4 + 3 * 8
    found = find_leftovers(namespace={"nt": nt})
    assert found.groups().total_bytes == expected, str(found)
    namespace = {"nt": nt}
    del nt
    report, fell = reset_and_measure(namespace, "nt", storages=storages)
    assert report.released_bytes == expected, str(report)
    assert fell == 6144 * 64 * 4 + BLOCK  # the 24-byte offsets take one 512-byte block


@pytest.mark.parametrize("how", ["trace", "script"])
def test_a_cuda_torchscript_model_is_its_parameters(how):
    """A traced module also keeps its example input alive, in C++ where the scan cannot
    look (seen on an H200: memory_allocated fell by the parameters plus the 4 KiB input;
    the same holds on CPU, by weakref): the reset frees it with the module, the list names
    the parameters only."""
    model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU()).cuda()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = (
            torch.jit.trace(model, torch.ones(1, 1024, device="cuda"))
            if how == "trace"
            else torch.jit.script(model)
        )
    del model
    gc.collect()
    storages = storages_of(*compiled.parameters())
    found = {item.name: item.nbytes for item in find_leftovers(namespace={"m": compiled})}
    assert found == {"m.0.weight": 1024 * 1024 * 4, "m.0.bias": 4096}, found
    namespace = {"m": compiled}
    del compiled
    report, fell = reset_and_measure(namespace, "m", storages=storages)
    assert report.released_bytes == 1024 * 1025 * 4, str(report)
    example_input = 1024 * 4 if how == "trace" else 0
    assert fell == 1024 * 1025 * 4 + example_input


def test_a_cuda_dry_run_rewalks_without_the_dropped_names():
    """`a` alone holds 64 MiB; `b` shares `c`'s storage with `c` kept: the dry run says 64
    MiB for dropping a and b, the reset then frees exactly that."""
    a = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    c = torch.empty(32 * MiB, dtype=torch.uint8, device="cuda")
    namespace = {"a": a, "b": c[: 16 * MiB], "c": c}
    storages = storages_of(a)
    del a, c
    plan = gpu_reset("a", "b", namespace=namespace, dry_run=True)
    assert plan.estimated_bytes == 64 * MiB, str(plan)
    assert set(namespace) == {"a", "b", "c"}
    report, fell = reset_and_measure(namespace, "a", "b", storages=storages)
    assert report.released_bytes == fell == 64 * MiB, str(report)
    assert set(namespace) == {"c"}


def test_a_failed_runs_traceback_holding_cuda_tensors_is_freed(ip, run_cell):
    """A cell that dies with two 16 MiB CUDA locals in its frame: the traceback keeps them
    (sys.last_value); the reset frees them and names nothing the user must delete."""
    run_cell(
        "import torch, weakref\n"
        "def step():\n"
        "    x = torch.empty(16 * 2**20, dtype=torch.uint8, device='cuda')\n"
        "    y = torch.empty(16 * 2**20, dtype=torch.uint8, device='cuda')\n"
        "    _refs.extend([weakref.ref(x.untyped_storage()), weakref.ref(y.untyped_storage())])\n"
        "    raise RuntimeError('boom')\n"
        "_refs = []"
    )
    result = run_cell("step()")
    assert isinstance(result.error_in_exec, RuntimeError)
    refs = ip.user_ns["_refs"]
    assert all(ref() is not None for ref in refs)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    report = gpu_reset(shell=ip)
    gc.collect()
    torch.cuda.synchronize()
    assert all(ref() is None for ref in refs), str(report)
    assert before - torch.cuda.memory_allocated() == 32 * MiB
    assert report.released_bytes == 32 * MiB, str(report)
    for name in ("step", "_refs"):
        ip.user_ns.pop(name, None)
