"""What `gpu_reset` reports as still held is exactly what a new scan finds afterwards, and
alive: read off the plan's scan where a second walk would find the same, walked again where
it would not (a kept name reaching a dropped one's container, a finalizer freeing an array
during the reset, a variable holding the namespace the reset changes, an autograd graph
whose saved tensor lost its only name). Real CPU tensors; weakrefs prove what is alive."""

from __future__ import annotations

import dataclasses
import gc
import weakref

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.frameworks.base import storage_key  # noqa: E402
from colab_gpu_guard.leftovers import dropping, find_leftovers, scan  # noqa: E402
from colab_gpu_guard.notebook_refs import VARIABLE, RootKey  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402

N = 250_000  # 1 MB of float32


@pytest.fixture
def only_this_tests_variables(ip):
    """These tests compare whole lists: variables other test files left in the shared
    shell (not IPython's own names) would be listed too."""
    for name in [name for name in ip.user_ns if name not in ip.user_ns_hidden]:
        if not name.startswith("_"):
            ip.user_ns.pop(name)


@pytest.fixture
def shell(only_this_tests_variables, shell):
    """conftest.py's `shell`, started with no variables other tests left."""
    return shell


@pytest.fixture
def walks(monkeypatch):
    """How many times gpu_reset walked the notebook again to say what is still held."""
    calls: list[int] = []
    real = reset.find_leftovers

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(reset, "find_leftovers", counting)
    return calls


def alive(ip, key: str) -> bool:
    return ip.user_ns["refs"][key]() is not None


def fail_cell(run_cell, source: str) -> None:
    with capture_output():
        result = run_cell(source)
    assert result.error_in_exec is not None


def assert_same_as_a_new_scan(shell, report) -> None:
    gc.collect()
    assert list(report.leftovers) == list(find_leftovers(shell=shell))


def test_still_held_is_read_off_the_scan_and_is_what_a_new_scan_finds(shell, run_cell, walks):
    run_cell(
        f"keep = torch.ones({N}); view = keep[1:]; batch = [torch.ones(10) for _ in range(5)]\n"
        "refs['keep'] = weakref.ref(keep)"
    )
    run_cell(f"t = torch.zeros({N}); refs['out'] = weakref.ref(t); t")
    run_cell("del t")
    fail_cell(
        run_cell,
        f"def train():\n    x = torch.ones({N})\n    refs['frame'] = weakref.ref(x)\n"
        "    raise ValueError('boom')\ntrain()",
    )
    report = reset.gpu_reset(shell=shell)
    assert not walks, "the plan's scan says what is still held"
    assert not alive(shell, "out") and not alive(shell, "frame") and alive(shell, "keep")
    names = [item.name for item in report.leftovers]
    assert names[0] == "keep" and report.leftovers[0].shared_with == ("view",)
    assert sorted(names[1:]) == [f"batch[{index}]" for index in range(5)]
    assert report.released_bytes == 2 * N * 4 == report.estimated_bytes
    assert_same_as_a_new_scan(shell, report)


def test_a_dry_run_lists_what_the_reset_then_lists(shell, run_cell, walks):
    run_cell(f"keep = torch.ones({N}); batch = [torch.ones(10), keep[:5]]")
    run_cell(f"torch.zeros({N})")
    dry = reset.gpu_reset(shell=shell, dry_run=True)
    done = reset.gpu_reset(shell=shell)
    assert not walks
    assert [item.name for item in dry.leftovers] == ["keep", "batch[0]"]
    assert list(dry.leftovers) == list(done.leftovers)
    assert dry.estimated_bytes == done.released_bytes == N * 4
    assert_same_as_a_new_scan(shell, done)


def test_a_kept_name_reaching_a_dropped_ones_list_is_walked_again(shell, run_cell, walks):
    """`b` is the list `a` reached first: its tensors were found under `a`."""
    run_cell("a = [torch.ones(10), torch.ones(20)]; b = a; refs['item'] = weakref.ref(a[1])")
    report = reset.gpu_reset("a", shell=shell)
    assert walks == [1]
    assert "a" not in shell.user_ns and alive(shell, "item")
    assert sorted(item.name for item in report.leftovers) == ["b[0]", "b[1]"]
    assert report.released_bytes == report.estimated_bytes == 0
    assert_same_as_a_new_scan(shell, report)


def test_a_dry_run_names_what_a_kept_name_reaches_as_it_would_be_named(shell, run_cell):
    """`b` holds the list `a` names (found under `a` by the walk): a dry run of dropping
    `a` lists it under `b`, as the reset then does, not under the name it would drop."""
    run_cell("a = [torch.ones(10), torch.ones(20)]; b = {'x': a}")
    dry = reset.gpu_reset("a", shell=shell, dry_run=True)
    assert sorted(item.name for item in dry.leftovers) == ["b['x'][0]", "b['x'][1]"]
    assert "a" in shell.user_ns
    done = reset.gpu_reset("a", shell=shell)
    assert list(dry.leftovers) == list(done.leftovers)
    assert dry.estimated_bytes == done.released_bytes == 0


def test_an_array_a_finalizer_frees_during_the_reset_is_not_listed(shell, run_cell, walks):
    """Dropping the output frees the key of a WeakKeyDictionary the user keeps; its
    callback removes the entry, and with it the only reference to a tensor."""
    run_cell(
        "class Key:\n    pass\n"
        "cache = weakref.WeakKeyDictionary()\n"
        f"key = Key(); cache[key] = torch.ones({N}); refs['cached'] = weakref.ref(cache[key])"
    )
    run_cell("key, torch.zeros(10)")  # Out[n], _, _n: the only holders of the key left
    run_cell("del key")
    assert alive(shell, "cached")
    assert any(item.name.startswith("cache.") for item in find_leftovers(shell=shell))
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "cached")
    assert walks == [1], "a reference kept was freed: the list is walked again"
    assert not any(item.name.startswith("cache.") for item in report.leftovers)
    assert_same_as_a_new_scan(shell, report)


def test_an_array_a_finalizer_frees_during_the_collection_is_released(shell, run_cell, walks):
    """A reference cycle only the output history holds: the reset's collection runs its
    __del__, which empties a list a kept name holds; the tensor in it goes then (the
    scan held it until the collection was done), is counted as released and not listed."""
    run_cell(
        "class Cycle:\n    def __del__(self):\n        keep.clear()\n"
        f"keep = [torch.ones({N})]; refs['kept'] = weakref.ref(keep[0])\n"
        "c = Cycle(); c.me = c"
    )
    run_cell("c, torch.zeros(10)")  # Out[n], _, _n: the only holders of the cycle left
    run_cell("del c")
    assert alive(shell, "kept")
    report = reset.gpu_reset(shell=shell)
    assert not alive(shell, "kept") and shell.user_ns["keep"] == []
    assert walks == [1], "a reference kept was freed: the list is walked again"
    assert not any(item.name.startswith("keep") for item in report.leftovers)
    assert report.released_bytes == N * 4 + 10 * 4
    assert_same_as_a_new_scan(shell, report)


def test_the_reset_keeps_no_array_alive(shell, run_cell):
    """The reset's scan holds the arrays it found only until its collection is done; a
    plan that fails lets go of them too."""
    run_cell(f"keep = torch.ones({N}); refs['keep'] = weakref.ref(keep)")
    reset.gpu_reset(shell=shell)
    run_cell("del keep")
    assert not alive(shell, "keep")

    run_cell(f"keep = torch.ones({N}); refs['keep'] = weakref.ref(keep)")
    failing = pytest.MonkeyPatch()
    failing.setattr("colab_gpu_guard.reset.plan._registry_notes", lambda *_: 1 / 0, raising=True)
    try:
        with pytest.raises(ZeroDivisionError) as caught:
            reset.gpu_reset(shell=shell)
    finally:
        failing.undo()
    run_cell("del keep")
    assert not alive(shell, "keep"), "the failed plan's frames (its traceback) hold it"
    del caught


def test_an_array_used_as_a_key_is_named_in_the_reset_list(shell, run_cell, walks):
    """The value under a tensor key (each reached once) is named through the key's path:
    by its id(), which the reset's scan takes before it lets go of the arrays it held."""
    run_cell(f"table = {{torch.ones(3): torch.ones({N})}}")  # each tensor reached once
    report = reset.gpu_reset(shell=shell)
    assert not walks
    assert [item.name for item in report.leftovers] == ["table[<key of table>]", "<key of table>"]
    assert_same_as_a_new_scan(shell, report)


def test_a_variable_a_finalizer_adds_during_the_reset_is_listed(shell, run_cell, walks):
    run_cell(
        f"class Phoenix:\n    def __del__(self):\n        globals()['reborn'] = torch.ones({N})\n"
    )
    run_cell("Phoenix(), torch.zeros(10)")  # only the output history holds it
    report = reset.gpu_reset(shell=shell)
    assert "reborn" in shell.user_ns
    assert walks == [1], "the notebook's names changed: the list is walked again"
    assert [item.name for item in report.leftovers] == ["reborn"]
    assert_same_as_a_new_scan(shell, report)


def test_a_variable_holding_the_namespace_is_walked_again(shell, run_cell, walks):
    """`everything` reaches `drop` through the namespace the reset deletes it from; the
    tensor stays alive (`also`), so only a new walk can tell that name is gone."""
    run_cell(f"drop = torch.ones({N}); also = drop; everything = globals()")
    report = reset.gpu_reset("drop", shell=shell)
    assert walks == [1], "the reset changed a dict the walk went into"
    assert "drop" not in shell.user_ns
    names = [item.name for item in report.leftovers]
    assert "also" in names and not any("'drop'" in name for name in names)
    assert_same_as_a_new_scan(shell, report)


def test_graph_memory_named_only_by_a_dropped_output_is_counted_after(shell, run_cell, walks):
    """Out[n] named the tensor the loss's graph saved; once it is dropped, the graph is
    what keeps it, and the loss's entry counts it."""
    run_cell(f"w = torch.ones({N}, requires_grad=True); x = w * 2; loss = x.sin().sum(); x")
    run_cell("del x")
    before = {item.name: item for item in find_leftovers(shell=shell)}
    assert any(item.name.startswith("Out[") for item in before.values())
    dry = reset.gpu_reset(shell=shell, dry_run=True)
    report = reset.gpu_reset(shell=shell)
    assert walks == [1]
    held = {item.name: item for item in report.leftovers}
    assert held["loss"].graph_nbytes == before["loss"].graph_nbytes + N * 4
    assert_same_as_a_new_scan(shell, report)
    # the graph keeps it: nothing was expected to go, so nothing is blamed on a hidden holder
    assert dry.estimated_bytes == report.estimated_bytes == report.released_bytes == 0
    assert not [note for note in report.notes if "expected to be freed" in note]
    assert list(dry.leftovers) == list(report.leftovers)  # the dry run foresaw the count


def test_a_dry_run_does_not_list_dropped_aliases_of_a_tensor_with_a_graph(shell, run_cell, walks):
    """Out[n] shows `out` (a tensor with a grad_fn): the dry run would drop Out[n], _ and
    _n, so its list of what would stay names only `out`, as the reset's does."""
    run_cell(f"w = torch.ones({N}, requires_grad=True); out = (w * 2).sin(); out")
    dry = reset.gpu_reset(shell=shell, dry_run=True)
    assert any(name.startswith("Out[") for name in dry.dropped_names)
    names = {item.name for item in dry.leftovers} | {
        other for item in dry.leftovers for other in item.shared_with
    }
    assert not [name for name in names if name.startswith(("Out[", "_"))], names
    done = reset.gpu_reset(shell=shell)
    assert list(dry.leftovers) == list(done.leftovers)
    assert dry.estimated_bytes == done.released_bytes == 0
    assert_same_as_a_new_scan(shell, done)


# ---------------------------------------------------------------- the scan's own answers


def test_reach_runs_aliases_and_what_only_some_roots_reach():
    shared = [torch.ones(3), torch.ones(4)]
    namespace = {"first": shared, "second": shared, "own": [torch.ones(5)]}
    found = scan(namespace=namespace, keep_refs=True)
    first, second, own = (RootKey(VARIABLE, name) for name in ("first", "second", "own"))
    keys = {
        name: storage_key(str(t.device), t.untyped_storage().data_ptr())
        for name, t in (("s0", shared[0]), ("s1", shared[1]), ("o", namespace["own"][0]))
    }
    reach = found.reach
    assert reach.by_root() == {
        first: {keys["s0"], keys["s1"]},
        second: {keys["s0"], keys["s1"]},
        own: {keys["o"]},
    }
    assert all(type(root) is RootKey for root in reach.holding())
    assert reach.holding() == {first, second, own}
    assert reach.only_through({first}) == set()
    assert reach.only_through({first, second}) == {keys["s0"], keys["s1"]}
    assert reach.only_through({own}) == {keys["o"]}
    assert reach.crosses_into({first}) and not reach.crosses_into({second})
    assert reach.dropped_rows({own}) == [False, False, True]
    assert reach.dropped_rows({RootKey(VARIABLE, "nothing")}) is None


def test_still_held_equals_a_new_scan_without_a_shell():
    keep = torch.ones(7)
    namespace = {"keep": keep, "view": keep[2:], "drop": [torch.ones(9), torch.ones(3)]}
    gone = [weakref.ref(item) for item in namespace["drop"]]
    found = scan(namespace=namespace, keep_refs=True)
    dropped = {RootKey(VARIABLE, "drop")}
    before = dropping.still_held(found, dropped)  # nothing changed yet: what would stay
    del namespace["drop"]
    gc.collect()
    assert [ref() for ref in gone] == [None, None]
    now = dropping.states(found)
    assert now.dead == [False, False, True, True]
    assert dropping.released(found, now) == set(found.keys[2:])
    assert dropping.nbytes(found, dropping.released(found, now)) == 48
    assert dropping.same_roots(found, dropped, None, namespace)
    held = dropping.still_held(found, dropped, now)
    assert list(held) == list(before) == list(find_leftovers(namespace=namespace))
    assert [item.name for item in held] == ["keep"] and held[0].shared_with == ("view",)


def test_a_reference_kept_but_gone_means_walking_again():
    namespace = {"keep": [torch.ones(7)], "other": torch.ones(2)}
    found = scan(namespace=namespace, keep_refs=True)
    namespace["keep"].clear()  # as a finalizer might: no root was dropped
    now = dropping.states(found)
    assert dropping.same_roots(found, set(), None, namespace)
    assert dropping.still_held(found, set(), now) is None
    assert dropping.still_held(found, set(), dropping.states(found)) is None


def test_an_incomplete_scan_is_never_reused():
    namespace = {"big": [[torch.ones(1)] for _ in range(50_000)]}
    found = scan(namespace=namespace, keep_refs=True, budget_s=1e-9)
    assert not found.complete
    assert dropping.still_held(found, set(), dropping.states(found)) is None


def test_entry_dict_is_asdicts():
    found = find_leftovers(namespace={"x": torch.ones(3, 2), "y": [torch.ones(1)]})
    assert [item.to_dict() for item in found] == [dataclasses.asdict(item) for item in found]


def test_still_held_groups_name_their_types_as_find_leftovers_does(shell, run_cell):
    """As seen on an H100: find_leftovers() said `model  Sequential: ...` and the reset's
    still-held list `model  user variable: ...` for the same group."""
    run_cell("keep = torch.nn.Linear(8, 4)\nbatch = torch.ones(64, 2)")
    expected = str(find_leftovers().groups())
    assert "keep  Linear: 2 arrays on cpu" in expected
    for report in (reset.gpu_reset(dry_run=True, shell=shell), reset.gpu_reset(shell=shell)):
        held = str(report)
        # `batch` is one tensor: listed once, as that tensor
        assert "keep  Linear: 2 arrays on cpu" in held and "batch  float32 [64x2] cpu" in held


def test_deleting_a_tensor_a_kept_graph_saved_names_the_graph_as_its_holder(shell, run_cell):
    """`loss`'s graph saved `x`: deleting `x` frees nothing, and the report says `loss`
    keeps it (it said 977 KiB expected, 0 B freed, "something outside the notebook's
    variables holds it")."""
    run_cell(
        f"w = torch.ones({N}, requires_grad=True); x = w * 2; loss = x.sin().sum()\n"
        "refs['x'] = weakref.ref(x.untyped_storage())"
    )
    dry = reset.gpu_reset("x", shell=shell, dry_run=True)
    done = reset.gpu_reset("x", shell=shell)
    assert alive(shell, "x") and "x" not in shell.user_ns
    assert dry.estimated_bytes == done.estimated_bytes == done.released_bytes == 0
    stays = [note for note in done.notes if note.startswith("`x`")]
    assert stays and "still held by `loss`" in stays[0], done.notes
    assert not [note for note in done.notes if "expected to be freed" in note]
    held = {item.name: item for item in done.leftovers}
    assert held["loss"].graph_nbytes >= N * 4
    assert list(dry.leftovers) == list(done.leftovers)
    shell.user_ns.pop("x", None)


def test_a_dry_run_that_would_drop_every_holder_does_not_say_none_is_held(shell, run_cell):
    """`keep --dry-run` changes nothing: the arrays are still held, and would not be."""
    run_cell(f"keep = torch.ones({N})")
    with capture_output() as dry:
        shell.run_line_magic("gpu_reset", "keep --dry-run")
    assert "none would stay held by the notebook's variables" in dry.stdout, dry.stdout
    assert "no arrays held" not in dry.stdout
    assert "keep" in shell.user_ns
    with capture_output() as done:
        shell.run_line_magic("gpu_reset", "keep")
    assert "no arrays held by the notebook's variables" in done.stdout, done.stdout


def test_a_graphs_saved_weights_are_not_named_as_holding_the_list_s_memory(shell, run_cell):
    """Each loss's graph saved the second layer's weight (the model's): deleting the list
    leaves the last loss's graph (still `loss`'s) and names `loss` alone, not the model."""
    run_cell(
        "lin = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(),"
        " torch.nn.Linear(256, 1))\n"
        "keep = []\n"
        "for step in range(3):\n"
        "    loss = lin(torch.randn(512, 64)).pow(2).mean()\n"
        "    keep.append(loss)"
    )
    done = reset.gpu_reset("keep", shell=shell)
    stays = [note for note in done.notes if note.startswith("`keep`")]
    assert len(stays) == 1 and "still held by `loss` (" in stays[0], done.notes
    held = {item.name: item for item in done.leftovers}
    assert done.released_bytes == done.estimated_bytes > 0
    assert held["loss"].graph_nbytes > 0 and "lin.2.weight" in held
    shell.user_ns.pop("lin", None)
    shell.user_ns.pop("step", None)


def test_a_tensor_gone_while_a_graph_keeps_its_memory_is_not_released(shell, run_cell):
    """exp() saved its result: `del y` kills the tensor object the scan saw, but z's graph
    keeps y's memory. The reset said 'freed: 4 MiB (arrays released: 4 MiB, expected 0 B)'
    while the storage lived on."""
    run_cell(
        "w = torch.randn(1024, 1024, requires_grad=True); y = torch.exp(w); z = y * 2\n"
        "refs['y'] = weakref.ref(y.untyped_storage())"
    )
    done = reset.gpu_reset("y", shell=shell)
    assert alive(shell, "y")
    assert done.released_bytes == done.estimated_bytes == 0
    assert any(note.startswith("`y`") and "still held by `z`" in note for note in done.notes)
    shell.user_ns.pop("z", None)


def test_a_reset_says_what_the_graph_figures_leave_out(shell, run_cell):
    """checkpoint(use_reentrant=False) packs its saved values through a saved_tensors_hooks
    pack hook the scan never unpacks: the reset's figures leave them out, and it says so
    (find_leftovers() said it; the reset's report did not)."""
    run_cell(
        "from torch.utils.checkpoint import checkpoint\n"
        "w = torch.randn(256, 256, requires_grad=True)\n"
        "loss = checkpoint(lambda t: torch.tanh(t @ w), torch.randn(256, 256).exp(),"
        " use_reentrant=False).sum()"
    )
    dry = reset.gpu_reset("loss", shell=shell, dry_run=True)
    done = reset.gpu_reset("loss", shell=shell)
    for report in (dry, done):
        assert any("pack hook were not measured" in note for note in report.notes), report.notes
    shell.user_ns.pop("checkpoint", None)


def test_host_memory_freed_beyond_the_arrays_found_is_explained(shell, run_cell):
    """A tensor in a reference cycle no name reaches: gc.collect() in the reset frees it,
    no scan found it, and 'freed' counts only what the scan found: the report says host
    memory fell by more, and by how much (malloc's figure, where glibc gives one)."""
    size = 2_000_000 * 4
    collecting = gc.isenabled()
    gc.disable()  # the cycle must still be there when the reset starts
    try:
        run_cell(
            "class _Cycle:\n    pass\n"
            "c = _Cycle(); c.me = c; c.t = torch.ones(2_000_000)\n"
            "refs['c'] = weakref.ref(c.t.untyped_storage()); del c"
        )
        assert alive(shell, "c")
        done = reset.gpu_reset(shell=shell)
    finally:
        if collecting:
            gc.enable()
    assert not alive(shell, "c")
    assert done.released_bytes < size  # the scan never saw it
    if done.host_in_use_before is None or done.host_in_use_after is None:
        pytest.skip("no malloc figures here (not glibc)")
    fell = done.host_in_use_before - done.host_in_use_after
    notes = [note for note in done.notes if note.startswith("host memory allocated fell by")]
    assert fell >= size - 2**20 and notes, (fell, done.notes)
    shell.user_ns.pop("_Cycle", None)
