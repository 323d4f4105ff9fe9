"""Audit findings F7 and F8: a parameter the optimizer keeps after ``del model`` is named
by a path a user can type and grouped under ``opt``; the notes a leftovers scan makes
(what it could not measure) reach every view of ``%gpu_status``."""

from __future__ import annotations

import gc
import html
import types
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import nvml  # noqa: E402
from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.status import collect, gpu_status  # noqa: E402
from colab_gpu_guard.units import USER_VARIABLE  # noqa: E402
from tests import fake_pynvml  # noqa: E402
from tests.shared_shell import flush_output_history  # noqa: E402

GRAPH_NOTE = (
    "autograd graphs: 2 saved values packed by a saved_tensors_hooks pack hook were not measured"
)


@pytest.fixture
def no_gpus():
    """NVML answers from a machine without GPUs; set back after."""
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.zero_gpus()))
    yield
    nvml.set_pynvml(None)


def trained_adam() -> tuple[torch.nn.Linear, torch.optim.Adam]:
    model = torch.nn.Linear(64, 32)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 64)).sum().backward()
    opt.step()
    return model, opt


def storage_of(value: torch.Tensor) -> int:
    return value.untyped_storage().data_ptr()


# ---------------------------------------------------------------- F7: names and groups


def test_an_optimizers_parameters_are_named_by_a_path_a_user_can_type_after_del_model():
    model, opt = trained_adam()
    weight = weakref.ref(model.weight)
    del model
    gc.collect()
    assert weight() is not None  # the optimizer keeps the parameters alive
    found = find_leftovers(namespace={"opt": opt})
    names = [item.name for item in found]
    assert len(names) == len(set(names)), names  # each name says which tensor it is
    assert not [name for name in names if "<key of" in name], names
    for item in found:  # each name, typed, gives the tensor of the block it names
        assert storage_of(eval(item.name, {"opt": opt})) == item.storage_id, item.name
    first = "opt.param_groups[0]['params'][0]"
    assert first in names
    assert "<key of opt.state>" in found[names.index(first)].shared_with
    assert f"opt.state[{first}]['exp_avg']" in names
    assert f"opt.state[{first}]['exp_avg_sq']" in names
    tensors = [*opt.param_groups[0]["params"]]
    tensors += [p.grad for p in tensors]
    tensors += [v for state in opt.state.values() for v in state.values()]
    total = sum(t.untyped_storage().nbytes() for t in tensors)
    groups = found.groups()
    assert [(g.name, g.count, g.nbytes) for g in groups] == [("opt", len(tensors), total)]
    del found, groups, opt, tensors
    gc.collect()
    assert weight() is None  # the scan kept nothing alive


def test_with_the_model_alive_the_state_is_named_through_the_model():
    model, opt = trained_adam()
    found = find_leftovers(namespace={"model": model, "opt": opt})
    names = [item.name for item in found]
    for key in ("exp_avg", "exp_avg_sq", "step"):
        assert f"opt.state[model.weight][{key!r}]" in names
        assert f"opt.state[model.bias][{key!r}]" in names
    assert "opt.param_groups[0]['params'][0]" in found[names.index("model.weight")].shared_with
    assert sorted(g.name for g in found.groups()) == ["model", "opt"]


def test_a_tensor_only_a_key_of_two_dicts_belongs_to_the_variable_holding_them():
    key = torch.ones(1000)
    cfg = types.SimpleNamespace(a={key: 1}, b={key: 2})
    found = find_leftovers(namespace={"cfg": cfg})
    assert [(item.name, item.shared_with) for item in found] == [
        ("<key of cfg.a>", ("<key of cfg.b>",))
    ]
    assert [(g.name, g.count, g.nbytes) for g in found.groups()] == [("cfg", 1, 4000)]
    assert found[0].root == ("cfg", USER_VARIABLE, "variable")


def test_gpu_status_lists_the_optimizer_as_one_group_after_del_model(ip, run_cell, no_gpus, capsys):
    flush_output_history(ip)
    run_cell(
        "import torch\n"
        "audit_model = torch.nn.Linear(64, 32)\n"
        "audit_opt = torch.optim.Adam(audit_model.parameters())\n"
        "audit_model(torch.randn(4, 64)).sum().backward(); audit_opt.step()\n"
        "del audit_model"
    )
    try:
        capsys.readouterr()
        ip.run_line_magic("gpu_status", "")
        text = capsys.readouterr().out
        assert "<key of" not in text.split("also:")[0], text
        assert "audit_opt  Adam: 10 arrays" in text, text
        assert "audit_opt.state[audit_opt.param_groups[0]['params'][0]]['exp_avg']" in text
    finally:
        ip.user_ns.pop("audit_opt", None)
        flush_output_history(ip)


# ---------------------------------------------------------------- F8: the scan's notes


CHECKPOINT_CELL = (
    "import torch, weakref\n"
    "from torch.utils.checkpoint import checkpoint\n"
    "audit_w = torch.randn(256, 256, requires_grad=True)\n"
    "audit_inp = torch.randn(256, 256)\n"
    "audit_inp_ref = weakref.ref(audit_inp)\n"
    "audit_cp = checkpoint(lambda t: torch.tanh(t @ audit_w), audit_inp,"
    " use_reentrant=False).sum()\n"
    "del audit_inp"
)


def test_gpu_status_shows_what_the_leftovers_scan_could_not_measure(ip, run_cell, no_gpus, capsys):
    flush_output_history(ip)
    run_cell(CHECKPOINT_CELL)
    try:
        gc.collect()
        assert ip.user_ns["audit_inp_ref"]() is not None  # held by audit_cp's graph, unnamed
        assert GRAPH_NOTE in find_leftovers().notes
        note = f"leftovers: {GRAPH_NOTE}"
        capsys.readouterr()
        ip.run_line_magic("gpu_status", "")
        text = capsys.readouterr().out
        assert text.count(note) == 1, text
        snap = gpu_status(processes=False)
        assert snap.to_dict()["notes"].count(note) == 1
        assert snap.to_html().count(html.escape(note)) == 1
        assert type(snap).from_json(snap.to_json()).notes == snap.notes

        del ip.user_ns["audit_cp"]
        gc.collect()
        assert ip.user_ns["audit_inp_ref"]() is None  # what the note was about is gone
        ip.run_line_magic("gpu_status", "")
        assert GRAPH_NOTE not in capsys.readouterr().out
    finally:
        for name in ("audit_w", "audit_cp", "audit_inp_ref", "checkpoint"):
            ip.user_ns.pop(name, None)
        flush_output_history(ip)


def test_an_unfinished_scan_is_noted_once(no_gpus, monkeypatch):
    monkeypatch.setattr(collect, "LEFTOVERS_BUDGET_S", 1e-9)
    namespace = {"big": [[torch.zeros(1) for _ in range(100)] for _ in range(100)]}
    assert find_leftovers(namespace=namespace, budget_s=1e-9).notes[0].startswith("incomplete:")
    snap = gpu_status(namespace=namespace, processes=False)
    incomplete = [note for note in snap.notes if "incomplete" in note]
    assert len(incomplete) == 1 and incomplete[0].startswith("leftovers incomplete:"), snap.notes


def test_no_scan_no_leftovers_notes(no_gpus):
    snap = gpu_status(leftovers=False, processes=False, namespace={"t": torch.zeros(1)})
    assert not [note for note in snap.notes if note.startswith("leftovers")]
