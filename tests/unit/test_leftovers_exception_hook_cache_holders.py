"""find_leftovers names what exceptions and tracebacks kept in variables hold (``args``,
traceback frames' locals, chained exceptions, notes), attributes set on tensors and a
retained ``.grad``, ``nn.Module`` hooks and ``functools.lru_cache`` results; reads them
without running code of the user's or keeping anything alive longer; and the storage named
is the storage that dies once its holder goes."""

from __future__ import annotations

import functools
import gc
import sys
import traceback
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from tests.leftover_sizes import assert_float32_sizes, names_and_sizes  # noqa: E402


def storage_ref(tensor) -> weakref.ref:
    return weakref.ref(tensor.untyped_storage())


def dies_without(namespace: dict, name: str, ref: weakref.ref) -> bool:
    del namespace[name]
    gc.collect()
    return ref() is None


_INNER: list[weakref.ref] = []  # the storage of each `_fails` call's local


def _fails(size: int) -> None:
    inner = torch.zeros(size)  # only this finished frame holds it
    _INNER.append(storage_ref(inner))
    raise ValueError("bad batch", inner.sum())


def _caught(size: int) -> BaseException:
    try:
        _fails(size)
    except ValueError as error:
        return error
    raise AssertionError("unreachable")


def test_an_exception_kept_in_a_variable_names_its_args_and_its_traceback_locals():
    namespace = {"err": _caught(1001)}
    found = names_and_sizes(find_leftovers(namespace=namespace))
    assert found.get("err.<traceback: _fails() local 'inner'>") == 4004, sorted(found)
    assert found.get("err.args[1]") == 4, sorted(found)
    assert dies_without(namespace, "err", _INNER[-1])


def test_args_chained_exceptions_notes_and_a_traceback_variable_are_walked():
    try:
        try:
            raise KeyError("first", torch.zeros(1002))
        except KeyError:
            raise RuntimeError("second") from ValueError(torch.zeros(1003))
    except RuntimeError as error:
        err = error
    notes = [torch.zeros(1004)]
    vars(err)["__notes__"] = notes  # what add_note stores; a tensor as a note
    try:
        _fails(1005)
    except ValueError:
        tb = sys.exc_info()[2]
    namespace = {"err": err, "tb": tb}
    del err, notes
    found = names_and_sizes(find_leftovers(namespace=namespace))
    expected = {
        "err.__context__.args[1]": 1002,
        "err.__cause__.args[0]": 1003,
        "err.__notes__[0]": 1004,
        "tb.<traceback: _fails() local 'inner'>": 1005,
    }
    assert_float32_sizes(found, expected)


@pytest.mark.skipif(sys.version_info < (3, 11), reason="exception groups are Python 3.11+")
def test_an_exception_groups_exceptions_are_walked():
    group = BaseExceptionGroup("several", [ValueError(torch.zeros(1019))])  # noqa: F821
    found = names_and_sizes(find_leftovers(namespace={"eg": group}))
    assert found.get("eg.exceptions[0].args[0]") == 1019 * 4, sorted(found)


def test_frames_still_executing_are_not_read():
    here = torch.zeros(1006)  # a local of this test, which is still running
    try:
        raise ValueError("x")
    except ValueError as error:
        namespace = {"err": error}
    found = names_and_sizes(find_leftovers(namespace=namespace))
    assert not found, sorted(found)
    del here


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="f_locals is a live proxy from 3.13")
def test_reading_traceback_locals_leaves_no_snapshot_that_outlives_clearing_the_frames():
    namespace = {"err": _caught(1007)}
    ref = _INNER[-1]
    assert "err.<traceback: _fails() local 'inner'>" in names_and_sizes(
        find_leftovers(namespace=namespace)
    )
    traceback.clear_frames(namespace["err"].__traceback__)
    gc.collect()
    assert ref() is None, "the walk's f_locals snapshot kept the local alive"


def test_a_snapshot_someone_else_read_is_left_as_it_was():
    namespace = {"err": _caught(1018)}
    saved = namespace["err"].__traceback__.tb_next.tb_frame.f_locals  # as pdb keeps it
    find_leftovers(namespace=namespace)
    assert "inner" in saved


class _Tricky(ValueError):
    calls: list[str] = []

    @property
    def args(self):  # type: ignore[override]
        _Tricky.calls.append("args")
        return ()

    @property
    def __traceback__(self):  # type: ignore[override]
        _Tricky.calls.append("__traceback__")
        return None


def test_an_exception_subclass_is_read_through_base_exception_not_its_properties():
    error = _Tricky("x", torch.zeros(1008))
    _Tricky.calls.clear()
    found = names_and_sizes(find_leftovers(namespace={"err": error}))
    assert found.get("err.args[1]") == 4032, sorted(found)
    assert _Tricky.calls == []


class Wrapped(torch.Tensor):
    pass


class _GradProperty(torch.Tensor):
    calls: list[str] = []

    @property
    def grad(self):  # type: ignore[override]
        _GradProperty.calls.append("grad")
        return None


def test_tensor_attributes_and_a_retained_grad_are_named():
    plain = torch.zeros(10)
    plain.extra = torch.zeros(1009)
    sub = torch.zeros(10).as_subclass(Wrapped)
    sub.payload = {"big": torch.zeros(1010)}
    weight = torch.zeros(1011, requires_grad=True)
    nonleaf = weight * 3
    nonleaf.retain_grad()
    (nonleaf**2).sum().backward()
    namespace = {"a": plain, "s": sub, "nl": nonleaf}
    refs = {
        "a": storage_ref(plain.extra),
        "s": storage_ref(sub.payload["big"]),
        "nl": storage_ref(nonleaf.grad),
    }
    del plain, sub, nonleaf
    found = names_and_sizes(find_leftovers(namespace=namespace))
    expected = {"a.extra": 1009, "s.payload['big']": 1010, "nl.grad": 1011}
    assert_float32_sizes(found, expected)
    for name, ref in refs.items():
        assert dies_without(namespace, name, ref), name


def test_many_tensors_with_one_attribute_among_them_and_no_property_run():
    tensors = [torch.zeros(1) for _ in range(5000)]
    tensors[4321].note = torch.zeros(1012)
    odd = torch.zeros(4).as_subclass(_GradProperty).requires_grad_()
    _GradProperty.calls.clear()
    found = names_and_sizes(find_leftovers(namespace={"ts": tensors, "odd": odd}))
    assert found.get("ts[4321].note") == 4048, len(found)
    assert _GradProperty.calls == []


def test_module_hooks_are_walked_and_named():
    nn = torch.nn

    def make_hook():
        store = {}
        scratch = torch.zeros(1013)

        def hook(module, inputs, output):
            store["o"] = output.detach()
            return output + scratch[0]

        return hook

    model = nn.Sequential(nn.Linear(4, 1014), nn.ReLU())
    scale = torch.zeros(1015)
    model[0].register_forward_hook(make_hook())
    model.register_forward_pre_hook(lambda m, i, s=scale: None)
    model[1].register_full_backward_hook(functools.partial(lambda tag, m, gi, go: None, scale))
    model(torch.zeros(1, 4))
    namespace = {"model": model}
    ref = storage_ref(scale)
    del scale, model
    found = names_and_sizes(find_leftovers(namespace=namespace))
    expected = {
        "model.0.<forward hook 0>.<closure 'scratch'>": 1013,
        "model.0.<forward hook 0>.<closure 'store'>['o']": 1014,
        "model.<forward pre hook 0>.__defaults__[0]": 1015,
        "model.1.<backward hook 0>.args[0]": 1015,
    }
    assert_float32_sizes(found, expected)
    assert dies_without(namespace, "model", ref)


def test_lru_cache_results_and_keys_are_named():
    @functools.cache
    def embed(n):
        return torch.zeros(n)

    @functools.lru_cache(maxsize=4)
    def scaled(t, k):
        return t * k

    key = torch.zeros(1017)
    embed(1016)
    scaled(key, 2)
    namespace = {"embed": embed, "scaled": scaled}
    refs = {"embed": storage_ref(embed(1016)), "scaled": storage_ref(key)}
    del embed, scaled, key
    found = names_and_sizes(find_leftovers(namespace=namespace))
    assert found.get("embed.<lru_cache>[0]") == 1016 * 4, sorted(found)
    assert found.get("scaled.<lru_cache>[0]") == 1017 * 4, sorted(found)
    assert found.get("scaled.<lru_cache key>[0][0]") == 1017 * 4, sorted(found)
    for name, ref in refs.items():
        assert dies_without(namespace, name, ref), name


def test_ipythons_own_frame_locals_are_not_listed_after_a_failed_cell(ip, run_cell):
    """The last exception's traceback starts in IPython's run_code(), whose locals hold the
    exception: walking exceptions reached the failed function's tensor again through it
    ('<traceback: InteractiveShell.run_code() local ...>' beside the real holder)."""
    from IPython.utils.capture import capture_output

    with capture_output():
        run_cell(
            "import torch\ndef fails_here():\n    inner_local = torch.randn(256, 256)\n"
            "    raise ValueError('x')\nfails_here()"
        )
    try:
        names = [item.name for item in find_leftovers(shell=ip)]
        names += [other for item in find_leftovers(shell=ip) for other in item.shared_with]
        assert "<traceback: fails_here() local 'inner_local'>" in names
        assert not [name for name in names if "run_code()" in name], names
    finally:
        from colab_gpu_guard import gpu_reset

        gpu_reset(shell=ip)  # the failed cell's exception: later tests start without it
        ip.user_ns.pop("fails_here", None)
