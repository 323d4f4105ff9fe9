"""What the walk makes of the standard library's and other libraries' types: walked like
the user's (their ``__dict__`` and slots), C types through their traversal, pandas' and
asyncio's C fields by name, the shell never, a library whose memory it cannot read named
as not looked into; a list keeps those names through pickling and a drop."""

from __future__ import annotations

import logging
import pickle
import queue
import sys
import threading

import pytest

from colab_gpu_guard.leftovers import LeftoverList, find_leftovers, scan
from colab_gpu_guard.leftovers.kinds import OBJECT, REFERENTS, SKIP, UNSEEN, Classifier
from colab_gpu_guard.leftovers.readers import layout_of
from colab_gpu_guard.leftovers.records import Unread, Unseen
from colab_gpu_guard.notebook_refs import VARIABLE, RootKey, running_locals


def test_the_standard_library_is_walked_and_the_shell_is_not():
    classify = Classifier().classify
    assert classify(logging.Logger).tag == OBJECT
    assert classify(logging.LogRecord).tag == OBJECT
    assert classify(threading.Thread).tag == OBJECT
    assert classify(queue.SimpleQueue).tag == REFERENTS
    shell = pytest.importorskip("IPython.core.interactiveshell")
    assert classify(shell.InteractiveShell).tag == SKIP
    unseen = type("DataFrame", (), {"__module__": "cudf.core.dataframe"})
    assert classify(unseen).tag == UNSEEN


def test_asyncio_futures_are_read_through_their_c_fields():
    # the C task (nest_asyncio, which some kernels apply, swaps in the Python one, whose
    # attributes are in its __dict__)
    task = pytest.importorskip("_asyncio").Task
    names = [name for name, _descriptor in layout_of(task).slots]
    assert {"_result", "_exception", "_callbacks", "_coro"} <= set(names)


def test_pandas_internals_are_read_through_their_cython_fields():
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    frame = pd.DataFrame({"x": np.arange(3.0)})
    manager = frame.__dict__["_mgr"]
    names = dict(layout_of(type(manager)).slots)
    assert {"blocks", "axes"} <= set(names)
    assert names["blocks"].__get__(manager, None) is manager.blocks
    block = manager.blocks[0]
    assert dict(layout_of(type(block)).slots)["values"].__get__(block, None) is block.values


def test_an_index_lookup_engine_is_named_by_its_field():
    """A looked-up index keeps an engine whose values are its labels; pandas 3 makes them
    an object array of its own for a string index (real memory, 8 B a label): listed by
    the engine's field, a name a user can type, not as an unnamed array found through gc."""
    pd = pytest.importorskip("pandas")
    np = pytest.importorskip("numpy")
    frame = pd.DataFrame({"x": np.arange(1000.0)}, index=[f"r{i}" for i in range(1000)])
    frame.loc["r5"]  # the lookup makes the engine
    engine = frame.index._cache["_engine"]
    assert dict(layout_of(type(engine)).slots)["values"].__get__(engine, None) is engine.values
    names = [item.name for item in find_leftovers(namespace={"frame": frame})]
    assert not [name for name in names if "<" in name], names
    if engine.values is not frame.index._values:  # pandas 3's own array: listed
        assert "frame.index._cache['_engine'].values" in names, names


def test_a_library_object_no_attribute_of_which_is_read_is_named():
    unseen = type("DataFrame", (), {"__module__": "polars.dataframe.frame"})()
    found = find_leftovers(namespace={"lazy": unseen, "rows": [unseen]})
    # named once, where first met (`rows` shares it)
    assert found.unseen == (Unseen("lazy", "polars.dataframe.frame.DataFrame"),)
    assert str(found).splitlines()[0] == "leftovers: no arrays found"
    assert any(note.startswith("not looked into: `lazy` (polars") for note in found.notes)
    again = pickle.loads(pickle.dumps(found))
    assert again.unseen == found.unseen and again.notes == found.notes


def test_what_a_dropped_root_held_unread_is_not_kept():
    unseen = type("Frame", (), {"__module__": "cudf.core.dataframe"})()
    made = scan(namespace={"a": unseen, "b": unseen}, variables_only=True)
    keys = [root for root, _item in made.unread.unseen]
    assert keys == [("variable", "a")]  # `b` reaches the same object: walked once
    assert made.unread.kept({RootKey(VARIABLE, "a")}) == Unread()
    assert LeftoverList(**made.unread.kept(set()).list_fields()).unseen == (
        Unseen("a", "cudf.core.dataframe.Frame"),
    )


def test_reading_a_running_frames_variables_leaves_no_snapshot_holding_them():
    import weakref

    class Held:
        pass

    seen: dict = {}
    ready, go = threading.Event(), threading.Event()

    def worker():
        item = Held()
        seen["ref"] = weakref.ref(item)
        ready.set()
        go.wait(10)
        del item  # the snapshot the read made must not keep it
        seen["after"] = seen["ref"]() is None
        ready.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert ready.wait(10)
    ready.clear()
    frame = sys._current_frames()[thread.ident]
    while frame is not None and frame.f_code.co_name != "worker":
        frame = frame.f_back
    assert frame is not None
    assert type(running_locals(frame)["item"]) is Held
    frame = None
    go.set()
    thread.join()
    assert seen["after"] is True


def test_only_loggers_whose_handlers_may_keep_records_are_roots():
    import logging.handlers

    from colab_gpu_guard.leftovers.registries import logging_registry

    quiet = logging.getLogger("cgg-34-quiet")
    quiet.addHandler(logging.NullHandler())
    quiet.addHandler(logging.StreamHandler())
    keeping = logging.getLogger("cgg-34-keeping")
    keeping.addHandler(logging.handlers.MemoryHandler(10))
    try:
        names = [name for name, _logger in logging_registry()]
        assert "cgg-34-keeping" in names and "cgg-34-quiet" not in names
    finally:
        quiet.handlers.clear()
        keeping.handlers.clear()
