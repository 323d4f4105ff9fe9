"""TorchScript modules keep their tensors in C++ behind wrappers: a traced model was "no
arrays held"; a dynamically quantized model's packed weights cannot be read at all, and
the list says so instead of claiming nothing is held. Weakrefs prove the bytes."""

from __future__ import annotations

import gc
import warnings
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import find_leftovers, gpu_reset  # noqa: E402


def by_name(items) -> dict[str, int]:
    return {item.name: item.nbytes for item in items}


@pytest.fixture
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def test_a_traced_model_is_listed_by_its_parameters_and_freed_by_them(quiet):
    model = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.ReLU())
    traced = torch.jit.trace(model, torch.ones(1, 512))
    del model
    gc.collect()
    found = by_name(find_leftovers(namespace={"traced": traced}))
    assert found == {"traced.0.weight": 512 * 512 * 4, "traced.0.bias": 512 * 4}, found
    watch = [weakref.ref(p.untyped_storage()) for p in traced.parameters()]
    namespace = {"traced": traced}
    del traced
    report = gpu_reset("traced", namespace=namespace)
    gc.collect()
    assert all(ref() is None for ref in watch)
    assert report.estimated_bytes == report.released_bytes == 512 * 513 * 4, str(report)


def test_a_scripted_model_is_named_as_its_modules_are(quiet):
    scripted = torch.jit.script(torch.nn.Sequential(torch.nn.Linear(256, 256)))
    items = find_leftovers(namespace={"scripted": scripted})
    assert [item.name for item in items] == ["scripted.0.weight", "scripted.0.bias"]
    assert items.groups().total_bytes == 256 * 257 * 4


def test_packed_quantized_weights_are_said_to_be_unread_not_absent(quiet):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU())
    quantized = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, torch.qint8)
    items = find_leftovers(namespace={"quantized": quantized})
    assert list(items) == []
    assert items.notes[-1] == (
        "not counted: memory inside 1 TorchScript object (torch.ScriptObject: C++ state, "
        "such as the packed weights of a dynamically quantized layer) the scan cannot look "
        "into: `quantized.0._packed_params._packed_params`"
    )
    assert "not counted: memory inside 1 TorchScript object" in str(items)
