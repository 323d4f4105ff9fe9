"""Leftovers grouped by the variable that holds them (issue 14, point 3): hidden holders
first, each block counted once in one group, what %gpu_reset releases marked; the text,
HTML, JSON, %gpu_status, %gpu_reset's report and the OOM advice all use the groups."""

from __future__ import annotations

import json
import sys
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import advisor
from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.leftovers.groups import group_leftovers  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.status import GpuStatus  # noqa: E402
from colab_gpu_guard.units import format_bytes, jargon_in  # noqa: E402

SETUP = (
    "import torch\n"
    "model = torch.nn.Sequential(torch.nn.Linear(256, 128), torch.nn.ReLU(),"
    " torch.nn.Linear(128, 64))\n"
    "opt = torch.optim.Adam(model.parameters())\n"
    "model(torch.randn(8, 256)).sum().backward()\n"
    "opt.step()\n"
)


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages of `tensors`, measured here, not by the scan."""
    storages = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}
    return sum(storages.values())


def model_tensors(model):
    return [p for p in model.parameters()] + [p.grad for p in model.parameters()]


def opt_state_tensors(opt):
    return [v for state in opt.state.values() for v in state.values() if torch.is_tensor(v)]


@pytest.fixture
def notebook(ip, run_cell):
    """model + Adam after one step, an Out[N] holding a tensor, 10^5 tiny tensors."""
    reset.gpu_reset(shell=ip)
    run_cell(SETUP)
    out_ref = weakref.ref(run_cell("torch.ones(300, 300)").result)  # only Out & co hold it
    out_number = ip.execution_count - 1
    run_cell("many = [torch.zeros(4) for _ in range(100_000)]")
    try:
        yield ip, f"Out[{out_number}]", out_ref
    finally:
        reset.gpu_reset("model", "opt", "many", shell=ip)


def test_groups_by_variable_hidden_holders_first(notebook):
    ip, out_name, out_ref = notebook
    model, opt, many = ip.user_ns["model"], ip.user_ns["opt"], ip.user_ns["many"]
    found = find_leftovers()
    groups = found.groups()
    names = [group.name for group in groups]
    hidden = [group for group in groups if group.hidden]
    assert names[: len(hidden)] == [group.name for group in hidden]  # hidden first
    assert groups[0].name == out_name  # the one hidden holder with memory of its own
    out = groups.named(out_name)
    assert (out.kind, out.count, out.released_by_reset) == ("output history", 1, True)
    assert out.nbytes == storage_bytes([out_ref()]) == 300 * 300 * 4
    # _ and _N reach the same tensor: counted once, in Out[N]
    assert all(
        group.count == 0 and [(s.owner, s.count) for s in group.shares] == [(out_name, 1)]
        for group in hidden[1:]
    )
    ours = [group for group in groups if group.name in ("model", "opt", "many")]
    assert [group.name for group in ours] == sorted(
        ["model", "opt", "many"], key=lambda name: -groups.named(name).nbytes
    )
    assert names.index(ours[0].name) == len(hidden)  # ordinary state right after hidden
    by_name = {group.name: group for group in ours}
    expected = {
        "model": (len(model_tensors(model)), storage_bytes(model_tensors(model)), "Sequential"),
        "opt": (len(opt_state_tensors(opt)), storage_bytes(opt_state_tensors(opt)), "Adam"),
        "many": (100_000, storage_bytes(many), "list"),
    }
    for name, (count, nbytes, type_name) in expected.items():
        group = by_name[name]
        assert (group.count, group.nbytes, group.type_name) == (count, nbytes, type_name)
        assert not group.hidden and not group.released_by_reset and group.devices == ("cpu",)
        assert len(group.entries) == 3 and group.more == count - 3
    assert by_name["many"].nbytes == 1_600_000
    # opt reaches model's parameters and gradients: counted in model, shared by opt
    assert [(s.owner, s.count) for s in by_name["opt"].shares] == [
        ("model", len(model_tensors(model)))
    ]
    assert by_name["model"].shares == ()
    # every block counted once: the groups add up to the list
    assert sum(group.nbytes for group in groups) == found.total_bytes == groups.total_bytes
    assert sum(group.count for group in groups) == len(found) == groups.blocks
    # expanding a group gives today's per-tensor names
    assert [entry.name for entry in found.groups(None).named("model").entries] == [
        entry.name for entry in found if entry.name.startswith("model.")
    ]


def test_text_html_and_json_use_the_groups(notebook):
    ip, out_name, _ = notebook
    found = find_leftovers()
    text = str(found)
    lines = text.splitlines()
    size = format_bytes(found.total_bytes)
    assert lines[0] == f"leftovers: {size} in {len(found):,} arrays, by what holds them"
    # Out[N] holds one tensor: one line, that tensor's (not a group line and its member)
    assert lines[1].startswith(f"     352 KiB  {out_name}  float32 [")
    assert lines[1].endswith("[%gpu_reset releases it]") and "(output history)" in lines[1]
    assert text.count(f"  {out_name}  ") == 1
    assert "  1.53 MiB  many  list: 100,000 arrays on cpu" in text
    assert "many[0]" in text and "many[3]" not in text  # three entries shown per group
    assert "... 99,997 more in many" in text
    assert "shares 8 arrays with model" in text
    assert (
        "  to free: `del name` for your own variables; %gpu_reset releases output history" in lines
    )
    assert len(lines) < 60  # one screen, not 10^5 rows
    page = found._repr_html_()
    assert page.count('class="cgg-group"') == len(found.groups())
    assert page.count("<code>" + out_name + "</code>") == 1  # its one tensor, once
    assert "var(--jp-" in page and "%gpu_reset releases it" in page
    data = json.loads(json.dumps(found.to_dict()))
    groups = {group["name"]: group for group in data["groups"]}
    assert groups["many"]["count"] == 100_000 and groups["many"]["nbytes"] == 1_600_000
    assert groups[out_name]["hidden"] and groups[out_name]["released_by_reset"]
    assert groups["opt"]["shares"] == [{"owner": "model", "count": 8}]


def test_gpu_status_and_its_json_carry_the_groups(notebook, capsys):
    ip, out_name, _ = notebook
    capsys.readouterr()
    ip.run_line_magic("gpu_status", "--json")
    data = json.loads(capsys.readouterr().out)
    jsonschema = pytest.importorskip("jsonschema")
    from colab_gpu_guard import status

    jsonschema.validate(data, status.json_schema())
    snap = GpuStatus.from_dict(data)
    names = [group.name for group in snap.leftover_groups]
    assert names[0] == out_name and {"model", "opt", "many"} <= set(names)
    assert snap.leftover_groups_count >= len(names)
    many = next(group for group in snap.leftover_groups if group.name == "many")
    assert (many.count, many.nbytes, many.entries[0].name) == (100_000, 1_600_000, "many[0]")
    ip.run_line_magic("gpu_status", "")
    text = capsys.readouterr().out
    assert f"{out_name}  float32 [" in text and "[%gpu_reset releases it]" in text
    assert text.index(out_name) < text.index("  many  list") < text.index("  model  Sequential")


def test_reset_releases_the_marked_groups_and_lists_what_stays(notebook):
    ip, out_name, gone = notebook
    marked = [group.name for group in find_leftovers().groups() if group.released_by_reset]
    assert out_name in marked
    kept = weakref.ref(ip.user_ns["model"][0].weight)
    dry = reset.gpu_reset(shell=ip, dry_run=True)
    held = [group.name for group in dry.held_groups()]
    assert out_name not in held and {"model", "opt", "many"} <= set(held)
    report = reset.gpu_reset(shell=ip)
    assert gone() is None and kept() is not None  # what was marked is what died
    text = str(report)
    total = format_bytes(report.held_groups().total_bytes)
    assert f"still held ({total}):" in text and jargon_in(text) == []
    assert "  many  list: 100,000 arrays on cpu" in text or "many  " in text
    assert [group["name"] for group in report.to_dict()["held_groups"]][:1] != [out_name]


def test_oom_advice_names_the_groups(notebook, monkeypatch):
    ip, out_name, _ = notebook
    from colab_gpu_guard.cells import notebook_leftovers

    real = notebook_leftovers.find_leftovers
    monkeypatch.setattr(  # CPU tensors stand in for CUDA ones
        notebook_leftovers,
        "find_leftovers",
        lambda device=None, namespace=None, budget_s=None: real(namespace=namespace),
    )
    error = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    diagnosis = advisor.advise(error, namespace=ip.user_ns)
    holders = diagnosis.facts["biggest leftovers"]
    assert holders.startswith(
        f"{out_name} 352 KiB (output history: 1 array on cpu; %gpu_reset releases it); "
    )
    assert "; many 1.53 MiB (list: 100,000 arrays on cpu); " in holders
    assert "many[" not in holders


def test_traceback_and_exception_holders_are_hidden_and_released(ip, run_cell):
    from IPython.utils.capture import capture_output

    reset.gpu_reset(shell=ip)
    with capture_output():
        run_cell(
            "import torch\ndef train():\n    batch = torch.ones(300)\n"
            "    raise ValueError('x', torch.ones(400))\ntrain()"
        )
    groups = find_leftovers().groups()
    frame = groups.named("<traceback: train() local 'batch'>")
    exception = groups.named("<exception ValueError>")
    assert (frame.kind, frame.nbytes, frame.hidden, frame.released_by_reset) == (
        "traceback frame",
        1200,
        True,
        True,
    )
    assert (exception.kind, exception.nbytes, exception.released_by_reset) == (
        "exception",
        1600,
        True,
    )
    reset.gpu_reset(shell=ip)
    names = [group.name for group in find_leftovers().groups()]
    assert frame.name not in names and exception.name not in names


def test_a_plain_list_groups_like_the_scan():
    """gpu_reset's report groups a plain list of entries: the same groups as the scan's
    columns give."""
    base = torch.zeros(100)
    namespace = {
        "base": base,
        "alias": [base[10:]],
        "batch": {"x": torch.ones(3, 3), "y": torch.ones(7)},
        "<b>": torch.ones(2),
    }
    found = find_leftovers(namespace=namespace)

    def key(groups):
        return [
            (g.name, g.kind, g.count, g.nbytes, g.shares, [e.name for e in g.entries])
            for g in groups
        ]

    assert key(group_leftovers(list(found), 3)) == key(found.groups())
    assert [(g.name, g.count, g.nbytes) for g in found.groups()] == [
        ("base", 1, 400),
        ("batch", 2, 64),
        ("<b>", 1, 8),
    ]  # `alias` has no row of its own: base's row names it ("also: alias[0]")
    assert found.groups()[0].entries[0].shared_with == ("alias[0]",)


def test_each_entry_is_grouped_under_the_root_its_path_starts_at(ip):
    """The group comes from the root the scan started at, never from the text of a name: a
    variable named like one of the package's labels, or with a dot, is its own group; a
    traceback's local, an exception's argument and an output are grouped under them."""
    namespace = {"<b>": [torch.ones(2)], "a.b": torch.ones(3), "d": {torch.ones(4): 1}}
    found = find_leftovers(namespace=namespace)
    assert {item.name: item.root for item in found} == {
        "<b>[0]": ("<b>", "user variable", "variable"),
        "a.b": ("a.b", "user variable", "variable"),
        "<key of d>": ("d", "user variable", "variable"),
    }
    assert sorted(group.name for group in found.groups()) == ["<b>", "a.b", "d"]

    ip.run_cell("import torch\ntorch.ones(5)", store_history=True)
    ip.run_cell("def f(x):\n    raise ValueError(torch.ones(6), x)\nf(torch.ones(7))")
    try:
        groups = {group.name: group.kind for group in find_leftovers(shell=ip).groups()}
        number = max(ip.user_ns["Out"])
        assert groups[f"Out[{number}]"] == "output history"
        assert groups["<exception ValueError>"] == "exception"
        assert groups["<traceback: f() local 'x'>"] == "traceback frame"
    finally:
        ip.run_line_magic("reset", "-f out")
        ip.InteractiveTB.last_exception = None
        for name in ("last_value", "last_traceback", "last_type", "last_exc"):
            if hasattr(sys, name):
                setattr(sys, name, None)


def test_a_tensor_used_as_a_dict_key_belongs_to_the_dict():
    key = torch.ones(1000)
    found = find_leftovers(namespace={"d": {key: "label"}})
    assert [(group.name, group.count, group.nbytes) for group in found.groups()] == [("d", 1, 4000)]


def test_an_empty_list_says_so_in_words():
    from colab_gpu_guard.leftovers import find_leftovers
    from colab_gpu_guard.status import gpu_status

    found = find_leftovers(namespace={"n": 1, "text": "no arrays here"})
    assert str(found.groups()) == "leftovers: no arrays found"
    text = gpu_status(leftovers=True, namespace={"n": 1}).to_text()
    assert "leftovers: no arrays found" in text and "block(s)" not in text


@pytest.mark.parametrize(
    "make, expected",
    [
        ("b = {'x': a}", 2),  # the whole list, through another container
        ("b = {'x': a, 'y': a[0]}", 2),  # and one of its tensors directly: counted once
    ],
)
def test_a_variable_reaching_another_ones_container_is_a_group_that_shares(make, expected):
    """`b` reaches the list `a` names (the walk met it under `a` first, so its tensors are
    listed there): `b` is still shown, sharing those blocks with `a`, as a view is."""
    a = [torch.ones(1000), torch.ones(10)]
    namespace = {"a": a}
    exec(make, {}, namespace)
    groups = {group.name: group for group in find_leftovers(namespace=namespace).groups()}
    assert groups["a"].count == 2 and groups["b"].count == 0
    assert [(share.owner, share.count) for share in groups["b"].shares] == [("a", expected)]
    assert groups["b"].describe() == f"dict: no array of its own; shares {expected} arrays with a"


def test_a_compiled_model_and_the_model_it_wraps_share_its_weights():
    model = torch.nn.Linear(10, 10)
    compiled = torch.compile(model)
    groups = find_leftovers(namespace={"compiled": compiled, "model": model}).groups()
    by_name = {group.name: group for group in groups}
    assert by_name["compiled"].count == 2
    assert [(s.owner, s.count) for s in by_name["model"].shares] == [("compiled", 2)]
