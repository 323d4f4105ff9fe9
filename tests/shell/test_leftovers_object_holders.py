"""find_leftovers finds what holders other than containers keep (slots, partials, closures,
suspended generators and coroutines, NumPy object arrays, dict keys, class attributes,
iterators), reads containers and objects without running any code of theirs, and stays
fast on plain data."""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import sys
import time
import weakref

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from tests.hostile_objects import (  # noqa: E402
    DictProperty,
    HostileDict,
    HostileList,
    HostileObject,
    Recorder,
)
from tests.leftover_sizes import assert_float32_sizes, names_and_sizes  # noqa: E402


@dataclasses.dataclass(slots=True)
class SlotConfig:
    x: object
    y: int = 0


class Slotted:
    __slots__ = ("buf", "unset")

    def __init__(self, buf) -> None:
        self.buf = buf


def test_slots_partials_closures_generators_object_arrays_and_keys_are_found_by_name():
    np = pytest.importorskip("numpy")

    def make():
        buf = torch.zeros(301)
        return lambda: buf

    def gen():
        batch = torch.zeros(302)
        yield 1
        del batch

    def consume(t, scale=1):
        return t

    async def job():
        held = torch.zeros(303)
        await _Suspend()
        return held

    generator = gen()
    next(generator)
    coroutine = job()
    coroutine.send(None)
    objarr = np.empty(5, dtype=object)
    objarr[3] = torch.zeros(304)
    grid = np.empty((2, 3), dtype=object)
    grid[1, 2] = torch.zeros(305)
    key = torch.zeros(306)
    namespace = {
        "cfg": SlotConfig(torch.zeros(307)),
        "slotted": Slotted(torch.zeros(308)),
        "p": functools.partial(consume, torch.zeros(309), scale=torch.zeros(310)),
        "fn": make(),
        "g": generator,
        "co": coroutine,
        "objarr": objarr,
        "grid": grid,
        "d": {key: "label"},
        "method": _Holder(torch.zeros(311)).method,
    }
    del key
    try:
        found = names_and_sizes(find_leftovers(namespace=namespace))
        expected = {
            "cfg.x": 307,
            "slotted.buf": 308,
            "p.args[0]": 309,
            "p.keywords['scale']": 310,
            "fn.<closure 'buf'>": 301,
            "g.<generator gen() local 'batch'>": 302,
            "co.<coroutine job() local 'held'>": 303,
            "objarr[3]": 304,
            "grid[1, 2]": 305,
            "<key of d>": 306,
            "method.__self__.t": 311,
        }
        assert_float32_sizes(found, expected)
    finally:
        coroutine.close()


class _Suspend:
    def __await__(self):
        yield


class _Holder:
    def __init__(self, t) -> None:
        self.t = t

    def method(self) -> None:
        pass


def test_the_bytes_named_are_the_bytes_that_die():
    def make():
        buf = torch.zeros(1000)
        return lambda: buf

    namespace = {"fn": make()}
    (item,) = find_leftovers(namespace=namespace)
    assert item.name == "fn.<closure 'buf'>" and item.nbytes == 4000
    ref = weakref.ref(namespace["fn"].__closure__[0].cell_contents)
    del namespace["fn"]
    gc.collect()
    assert ref() is None


def test_the_scan_calls_no_method_of_what_it_reads():
    hostile_list = HostileList([torch.zeros(401), 1, 2] + [torch.zeros(1)] * 20)
    hostile_dict = HostileDict(inner=torch.zeros(402))
    Recorder.calls.clear()
    start = time.perf_counter()
    found = names_and_sizes(
        find_leftovers(
            namespace={
                "hl": hostile_list,
                "hd": hostile_dict,
                "ho": HostileObject(torch.zeros(403)),
                "dp": DictProperty(torch.zeros(404)),
                "many": [HostileObject(torch.zeros(2)) for _ in range(40)],
            }
        )
    )
    elapsed = time.perf_counter() - start
    assert Recorder.calls == []
    assert elapsed < 4  # no sleeping override ran (each sleeps 5 s)
    assert found["hl[0]"] == 401 * 4
    assert found["hd['inner']"] == 402 * 4
    assert found["ho.t"] == 403 * 4
    assert found["dp.t"] == 404 * 4
    assert found["many[39].t"] == 8


def test_deep_scan_survives_hostile_objects_and_never_reports_its_own_frames(ip, run_cell):
    # hostile containers no name reaches (a module's globals): the deep scan describes them
    run_cell(
        "import torch, types\n"
        "from tests.hostile_objects import HostileList, HostileDict, Recorder\n"
        "from colab_gpu_guard import find_leftovers\n"
        "Hidden = types.ModuleType('hidden_state')\n"
        "Hidden.a = HostileList([torch.zeros(405)])\n"
        "Hidden.b = HostileDict(k=torch.zeros(406))\n"
        "Recorder.calls.clear()"
    )
    result = run_cell("deep = find_leftovers(deep=True)")
    assert result.success, result.error_in_exec
    deep = ip.user_ns["deep"]
    assert Recorder.calls == []
    sizes = {item.nbytes: item.name for item in deep}
    assert "a HostileList of 1 item" in sizes[405 * 4]
    assert "a HostileDict of 1 entry" in sizes[406 * 4]
    run_cell("1 / 0")  # a failed cell: its traceback is scanned next
    again = ip.user_ns["find_leftovers"](deep=True)
    for item in again:
        assert "colab_gpu_guard" not in item.name and "'found'" not in item.name, item.name
    run_cell("del deep, Hidden")


def test_a_usage_error_leaves_no_internal_exception_or_frame_for_gpu_reset(ip, run_cell):
    run_cell("import torch\nkept = torch.ones(10)")
    bad_lines = (
        "%gpu_reset no_such_name",
        "%seed_all abc",
        "%gpu_history --limit x",
        "%gpu_history --warn-output 12XB",
        "%gpu_panel --live abc",
        "%repro --bogus",
        "%repro --diff /no/such/record.json",
        "%gpu_status --bogus",
    )
    for bad in bad_lines:
        run_cell(bad)
        with capture_output() as out:
            run_cell("%gpu_reset --dry-run")
        assert "ValueError" not in out.stdout and "__context__" not in out.stdout, out.stdout
        assert "FileNotFoundError" not in out.stdout, (bad, out.stdout)
        assert "gpu_reset() local" not in out.stdout and "<traceback" not in out.stdout
        assert "kept" in out.stdout
    run_cell("del kept")


@pytest.mark.parametrize(
    "magic", ["gpu_status", "gpu_reset", "gpu_panel", "seed_all", "repro", "gpu_history"]
)
def test_an_unknown_option_gets_the_magics_valid_form(ip, magic):
    with pytest.raises(UsageError) as raised:
        ip.run_line_magic(magic, "--bogus")
    message = str(raised.value)
    assert "unrecognized arguments: --bogus" in message
    assert f"\nUsage: %{magic} [" in message, message
    assert raised.value.__context__ is None  # nothing of ours chained to it


def test_plain_records_are_skipped_and_a_tensor_among_them_is_named():
    rows = [{"id": n, "tags": ["a", "b"], "meta": {"score": 1.5}} for n in range(50_000)]
    rows[31_337]["meta"]["weights"] = [torch.zeros(407)]
    (item,) = find_leftovers(namespace={"rows": rows, "big": dict.fromkeys(range(10_000), rows[0])})
    assert item.name == "rows[31337]['meta']['weights'][0]"
    assert item.nbytes == 407 * 4


def test_gpu_reset_sees_and_frees_memory_held_by_closures_generators_and_partials(ip, run_cell):
    run_cell(
        "import torch, functools, weakref\n"
        "def make():\n"
        "    buf = torch.ones(1000)\n"
        "    return lambda: buf\n"
        "fn = make()\n"
        "def gen():\n"
        "    batch = torch.ones(2000)\n"
        "    yield 1\n"
        "g = gen(); next(g)\n"
        "p = functools.partial(print, torch.ones(3000))\n"
        "refs = [weakref.ref(fn.__closure__[0].cell_contents),"
        " weakref.ref(g.gi_frame.f_locals['batch']), weakref.ref(p.args[0])]"
    )
    with capture_output() as out:
        run_cell("%gpu_reset fn g p --dry-run")
    assert "names: fn, g, p" in out.stdout, out.stdout
    assert "would free about 23.4 KiB" in out.stdout  # (1000 + 2000 + 3000) * 4 bytes
    with capture_output() as out:
        run_cell("%gpu_reset fn g p")
    assert "freed: 23.4 KiB" in out.stdout, out.stdout
    assert [ref() for ref in ip.user_ns["refs"]] == [None, None, None]
    run_cell("del refs")


def _big_namespace() -> dict:
    big_list = [{"row": [n, {"x": n}]} for n in range(200_000)]
    big_list[-1]["t"] = torch.zeros(409)
    return {"first": torch.zeros(408), "big_list": big_list, "last": torch.zeros(410)}


class FakeClock:
    """A clock that advances 1 ms each time the walk reads it: a budget of N ms then runs
    out at the walk's Nth look at the time, whatever the machine's speed."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 0.001
        return self.now


def test_a_scan_that_runs_out_of_time_says_what_it_did_not_search(monkeypatch):
    from colab_gpu_guard.leftovers import walker

    namespace = _big_namespace()
    monkeypatch.setattr(walker, "time", FakeClock())
    found = find_leftovers(namespace=namespace, budget_s=0.0105)
    monkeypatch.undo()
    assert not found.complete
    # the clock is read at the start, on entering big_list and before each chunk of 2,048
    # rows: the 12th read is past the budget, at chunk 9 (18,432 of 200,000 rows)
    assert found.unfinished[0] == "big_list: 200,000 items, 9% searched"
    assert found.unfinished[-1] == "1 more root (variables, outputs, frames) not searched"
    assert [item.name for item in found] == ["first"]  # what was found before it stopped
    assert "incomplete" in str(found) and "big_list: 200,000 items" in str(found)
    assert "big_list: 200,000 items" in found._repr_html_()
    payload = found.to_dict()
    assert payload["complete"] is False and payload["unfinished"] == list(found.unfinished)
    whole = find_leftovers(namespace=namespace, budget_s=None)
    assert whole.complete and whole.unfinished == ()
    assert sorted(item.nbytes for item in whole) == [408 * 4, 409 * 4, 410 * 4]
    with pytest.raises(TypeError, match="budget_s"):
        find_leftovers(namespace=namespace, budget_s=0)


def test_gpu_status_and_gpu_reset_say_when_their_scan_ran_out_of_time(ip, run_cell, monkeypatch):
    from colab_gpu_guard.reset import plan as reset_plan
    from colab_gpu_guard.status import collect

    # what earlier tests left in the shell would take the fake clock's first ticks
    earlier = {
        name: ip.user_ns.pop(name)
        for name in list(ip.user_ns)
        if not name.startswith("_") and name not in ip.user_ns_hidden
    }
    ip.user_ns.update(_big_namespace())
    from colab_gpu_guard.leftovers import walker

    monkeypatch.setattr(collect, "LEFTOVERS_BUDGET_S", 0.0105)
    monkeypatch.setattr(reset_plan, "SCAN_BUDGET_S", 0.0105)
    monkeypatch.setattr(walker, "time", FakeClock())
    try:
        with capture_output() as out:
            run_cell("%gpu_status")
        text = out.outputs[0].data["text/plain"]
        page = out.outputs[0].data["text/html"]
        for shown in (text, page):
            assert "leftovers incomplete" in shown and "big_list: 200,000 items" in shown
        with capture_output() as out:
            run_cell("%gpu_reset --dry-run")
        assert "stopped at its 0.0105 s budget" in out.stdout, out.stdout
        assert "big_list: 200,000 items" in out.stdout
    finally:
        for name in ("first", "big_list", "last"):
            ip.user_ns.pop(name, None)
        ip.user_ns.update(earlier)


def test_iterators_hold_what_they_iterate_and_a_cycle_every_item_it_yielded():
    cyc = itertools.cycle(iter([torch.zeros(416), torch.zeros(417)]))
    next(cyc)  # the cycle saves what it yielded
    namespace = {
        "it": iter([torch.zeros(415)]),
        "cyc": cyc,
        "pairs": zip([torch.zeros(418)], "ab"),
        "r": itertools.repeat(torch.zeros(419)),
    }
    found = names_and_sizes(find_leftovers(namespace=namespace))
    assert found["it.<list>[0]"] == 415 * 4
    assert found["cyc.<list>[0]"] == 416 * 4  # saved by the cycle, and still to come
    assert found["cyc.<list_iterator>.<list>[1]"] == 417 * 4
    assert found["pairs.<tuple>[0].<list>[0]"] == 418 * 4
    assert found["r.<Tensor>"] == 419 * 4


def test_gpu_reset_frees_the_batches_a_cycle_over_a_data_loader_kept(ip, run_cell):
    run_cell(
        "import itertools, weakref, torch\n"
        "from torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(64, 256)), batch_size=16)\n"
        "train_iter = itertools.cycle(loader)\n"
        "del loader\n"
        "batch_refs = [weakref.ref(next(train_iter)[0]) for _ in range(4)]"
    )
    try:
        with capture_output() as out:
            run_cell("%gpu_reset --dry-run")
        assert "train_iter.<list>[0][0]" in out.stdout, out.stdout
        with capture_output() as out:
            run_cell("%gpu_reset train_iter")
        # the four batches the cycle kept, and the data set its loader holds
        assert "freed: 128 KiB of tensors\n" in out.stdout, out.stdout  # as expected
        assert [ref() for ref in ip.user_ns["batch_refs"]] == [None] * 4
    finally:
        for name in ("train_iter", "batch_refs"):
            ip.user_ns.pop(name, None)


def test_gpu_reset_says_what_it_did_not_search_when_no_name_holds_an_array(ip, run_cell):
    run_cell(
        "import sys, types, torch\n"
        "sys.modules['my_state'] = types.ModuleType('my_state')\n"
        "import my_state\n"
        "my_state.cache = {'w': torch.ones(1000)}"
    )
    try:
        with capture_output() as out:
            run_cell("%gpu_reset --all --dry-run")
        assert "would drop: nothing" in out.stdout, out.stdout
        # a module's global is held, but no name the scan walks reaches it: it says so
        said = out.stdout
        assert "none would stay held by the notebook's variables, output history, last " in said
        assert "installed packages are not searched: find_leftovers(deep=True)" in said
        deep = find_leftovers(deep=True)
        assert any(item.nbytes == 4000 and item.name.startswith("<unnamed") for item in deep)
    finally:
        ip.user_ns.pop("my_state", None)
        sys.modules.pop("my_state", None)


class _RecordingMeta(type):
    """A metaclass that records every attribute read on its classes."""

    def __getattribute__(cls, name):
        Recorder.calls.append(f"metaclass __getattribute__({name})")
        return type.__getattribute__(cls, name)

    def __getattr__(cls, name):
        Recorder.calls.append(f"metaclass __getattr__({name})")
        raise AttributeError(name)


def test_a_class_attribute_is_found_by_name_without_running_its_metaclass():
    class Cache(metaclass=_RecordingMeta):
        store = {"w": torch.zeros(412)}

        def method(self, mask=torch.zeros(413)):  # noqa: B008 - the default is the holder
            return mask

    Recorder.calls.clear()
    items = find_leftovers(
        namespace={"Cache": Cache, "Tensor": torch.Tensor, "Linear": torch.nn.Linear}
    )
    assert Recorder.calls == []
    found = names_and_sizes(items)
    assert found == {"Cache.store['w']": 412 * 4, "Cache.method.__defaults__[0]": 413 * 4}
    assert "Cache  class: 2 arrays on cpu" in str(items)


def test_gpu_reset_sees_a_notebook_class_attribute_and_the_instances_that_keep_the_class(
    ip, run_cell
):
    run_cell(
        "import torch, weakref\n"
        "class Cache:\n"
        "    store = {'w': torch.ones(5000)}\n"
        "cache = Cache()\n"
        "cache_ref = weakref.ref(Cache.store['w'])"
    )
    try:
        with capture_output() as out:
            run_cell("%gpu_reset Cache --dry-run")
        # an instance keeps its class alive, and so the class's attributes
        assert "would free about 0 B" in out.stdout, out.stdout
        assert "still held by `cache`" in out.stdout
        # named as it would be once `Cache` is gone: through the instance's class
        assert "cache.__class__.store['w']" in out.stdout, out.stdout
        with capture_output() as out:
            run_cell("%gpu_reset Cache cache --dry-run")
        assert "names: Cache, cache" in out.stdout and "would free about 19.5 KiB" in out.stdout
        with capture_output() as out:
            run_cell("%gpu_reset Cache cache")
        # the scan held the types it met while gpu_reset collected garbage: it no longer does
        assert "freed: 19.5 KiB of tensors\n" in out.stdout  # as expected
        assert ip.user_ns["cache_ref"]() is None
    finally:
        for name in ("Cache", "cache", "cache_ref"):
            ip.user_ns.pop(name, None)


def test_a_module_is_named_by_its_parameters_only_once():
    model = torch.nn.Sequential(torch.nn.Linear(8, 16))
    (weight,) = [item for item in find_leftovers(namespace={"model": model}) if item.nbytes == 512]
    assert weight.name == "model.0.weight" and weight.shared_with == ()
