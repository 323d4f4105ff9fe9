"""What the scan finds in objects of the standard library and other libraries, in a real
shell: a Future's result, a logging handler's records and the graphs their arguments keep,
a queue's items, pandas frames (by their buffers, counted once with the arrays sharing
them), holders whose memory it cannot read named as not looked into, a running thread's
locals in a deep scan; each checked against the storages' and buffers' own sizes, and what
`%gpu_reset` says it would free against what it frees (weakrefs prove it)."""

from __future__ import annotations

import gc
import threading

import pytest
from IPython.utils.capture import capture_output

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402

N = 1_000_000  # 4 MB of float32


def entries(shell) -> dict[str, object]:
    return {item.name: item for item in find_leftovers(shell=shell)}


def run(run_cell, source: str):
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec
    return result


def quiet(ip, line: str):
    with capture_output() as out:
        ip.run_line_magic("gpu_reset", line)
    return out.stdout


def storage_bytes(tensor) -> int:
    return tensor.untyped_storage().nbytes()


def test_a_futures_result_is_listed_and_the_dry_run_agrees_with_the_reset(shell, run_cell):
    run(
        run_cell,
        "from concurrent.futures import ThreadPoolExecutor\n"
        f"pool = ThreadPoolExecutor(1); fut = pool.submit(torch.randn, {N}); pool.shutdown()\n"
        "refs['result'] = weakref.ref(fut.result().untyped_storage())",
    )
    found = entries(shell)
    assert found["fut._result"].nbytes == storage_bytes(shell.user_ns["fut"].result()) == 4 * N
    run(run_cell, "model = fut.result()")
    dry = reset.gpu_reset("model", shell=shell, dry_run=True)
    assert dry.estimated_bytes == 0  # `fut` keeps it
    assert any(note.startswith("`model`: ") and "`fut`" in note for note in dry.notes)
    done = reset.gpu_reset("model", shell=shell)
    assert done.released_bytes == 0 and shell.user_ns["refs"]["result"]() is not None
    assert not any("expected to be freed is still in use" in note for note in done.notes)
    assert "fut" in [group.name for group in done.held_groups()]
    dry = reset.gpu_reset("fut", shell=shell, dry_run=True)
    assert dry.estimated_bytes == 4 * N
    done = reset.gpu_reset("fut", shell=shell)
    gc.collect()
    assert shell.user_ns["refs"]["result"]() is None
    assert done.released_bytes == dry.estimated_bytes


def test_a_logging_handler_keeping_records_is_walked_with_the_graphs_of_their_args(shell, run_cell):
    run(
        run_cell,
        "import logging\n"
        "class Keep(logging.Handler):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.records = []\n"
        "    def emit(self, record):\n"
        "        self.records.append(record)\n"
        "log = logging.getLogger('cgg-test-34'); log.addHandler(Keep())\n"
        "log.setLevel(logging.INFO); log.propagate = False\n"
        "w = torch.randn(100, 1000, requires_grad=True); inputs = []\n"
        "for step in range(3):\n"
        "    x = torch.randn(1000, 100); inputs.append(weakref.ref(x.untyped_storage()))\n"
        "    log.info('loss %s', (x @ w).sum())\n"
        "del x",
    )
    try:
        groups = {group.name: group for group in find_leftovers(shell=shell).groups()}
        saved = 3 * 1000 * 100 * 4  # each step's x, saved by its matmul
        assert groups["log"].graph_nbytes == saved, groups["log"]
        assert groups["log"].count == 3
        entry = groups["log"].entries[0]
        assert entry.name.startswith("log.handlers[0].records[") and ".args[0]" in entry.name
        # logging's registry keeps the logger too: deleting `log` frees nothing, and the
        # dry run says so, as the reset does
        dry = reset.gpu_reset("log", shell=shell, dry_run=True)
        assert dry.estimated_bytes == 0
        note = [text for text in dry.notes if text.startswith("`log`: ")]
        assert note and "logger.removeHandler(handler)" in note[0], dry.notes
        done = reset.gpu_reset("log", shell=shell)
        assert done.released_bytes == 0
        assert not any("expected to be freed is still in use" in text for text in done.notes)
        held = {group.name: group for group in done.held_groups()}
        assert held["<logging.getLogger('cgg-test-34')>"].nbytes == saved + 3 * 4
        run(run_cell, "import logging; logging.getLogger('cgg-test-34').handlers.clear()")
        gc.collect()
        assert all(ref() is None for ref in shell.user_ns["inputs"])
    finally:
        run(run_cell, "import logging; logging.getLogger('cgg-test-34').handlers.clear()")


def test_a_loggers_buffered_records_no_name_reaches_are_listed_under_logging(shell, run_cell):
    run(
        run_cell,
        "import logging, logging.handlers\n"
        "logging.getLogger('cgg-test-34b').addHandler(\n"
        "    logging.handlers.MemoryHandler(10**6, flushLevel=100))\n"
        "logging.getLogger('cgg-test-34b').propagate = False\n"
        f"logging.getLogger('cgg-test-34b').warning('%s', torch.ones({N}))",
    )
    try:
        found = find_leftovers(shell=shell)
        label = "<logging.getLogger('cgg-test-34b')>"
        group = found.groups().named(label)
        assert group is not None and group.kind == "logger" and group.nbytes == 4 * N
        assert group.hidden_word == "kept by logging" and not group.released_by_reset
        assert "`logger.removeHandler(handler)`" in found.groups().advice()
        (entry,) = group.entries
        assert entry.name == f"{label}.handlers[0].buffer[0].args[0]"
    finally:
        run(run_cell, "logging.getLogger('cgg-test-34b').handlers.clear()")


def test_a_queues_items_are_found_through_its_traversal(shell, run_cell):
    run(run_cell, f"import queue; q = queue.SimpleQueue(); q.put(torch.ones({N}))")
    found = entries(shell)
    assert found["q.<list>[0]"].nbytes == 4 * N
    dry = reset.gpu_reset("q", shell=shell, dry_run=True)
    assert dry.estimated_bytes == 4 * N


def test_what_a_notebook_holds_in_the_standard_library_is_found_by_name(shell, run_cell):
    """An asyncio future's result, a thread's arguments before it starts, an executor's
    pending work, a mapping proxy, a copied context's variables, a memoryview's array."""
    run(
        run_cell,
        "import asyncio, threading, types, contextvars, numpy as np\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "loop = asyncio.new_event_loop(); af = loop.create_future()\n"
        "af.set_result(torch.ones(1000))\n"
        "thread = threading.Thread(target=print, args=(torch.ones(2000),))\n"
        "gate = threading.Event(); pool = ThreadPoolExecutor(1); pool.submit(gate.wait)\n"
        "pending = pool.submit(len, torch.ones(3000)); del pending\n"
        "proxy = types.MappingProxyType({'w': torch.ones(4000)})\n"
        "var = contextvars.ContextVar('var'); ctx = contextvars.copy_context()\n"
        "ctx.run(var.set, torch.ones(5000))\n"
        "view = memoryview(np.ones(6000))",
    )
    try:
        found = entries(shell)
        sizes = {name: item.nbytes for name, item in found.items()}
        assert sizes["af._result"] == 4000
        assert sizes["thread._args[0]"] == 8000
        assert sizes["pool._work_queue.<list>[0].args[0]"] == 12000
        assert sizes["proxy.<dict>['w']"] == 16000
        assert [size for name, size in sizes.items() if name.startswith("ctx.")] == [20000]
        assert [size for name, size in sizes.items() if name.startswith("view.")] == [48000]
    finally:
        run(run_cell, "gate.set(); pool.shutdown(); loop.close()")


def test_a_holder_whose_memory_the_scan_cannot_read_is_named_not_looked_into(shell, run_cell):
    """A cuDF frame keeps its columns in device buffers no Python object shows (cuDF is
    not installed here: a class of that package stands in for it)."""
    run(
        run_cell,
        "DataFrame = type('DataFrame', (), {'__module__': 'cudf.core.dataframe'})\n"
        "gdf = DataFrame(); gdf.columns = {'a': object()}; del DataFrame",
    )
    found = find_leftovers(shell=shell)
    assert not list(found)
    assert [(item.name, item.type_name) for item in found.unseen] == [
        ("gdf", "cudf.core.dataframe.DataFrame")
    ]
    text = str(found)
    assert "no arrays held" not in text
    assert "not looked into: `gdf` (cudf.core.dataframe.DataFrame)" in text
    from colab_gpu_guard import status

    shown = status.gpu_status(namespace=shell.user_ns).to_text()
    assert "not looked into: `gdf` (cudf.core.dataframe.DataFrame)" in shown
    report = reset.gpu_reset("gdf", shell=shell)
    assert not any("not looked into" in note for note in report.leftovers.limits)


def test_a_running_threads_local_is_named_by_thread_and_function(shell, run_cell):
    stop = threading.Event()
    started = threading.Event()

    def loader():
        batch = torch.ones(N)  # noqa: F841 (held by this running frame only)
        started.set()
        stop.wait(30)

    thread = threading.Thread(target=loader, name="loader-34")
    thread.start()
    try:
        assert started.wait(10)
        found = find_leftovers(shell=shell, deep=True)
        names = [item.name for item in found if item.nbytes == 4 * N]
        assert any(
            "local 'batch' of " in name and "loader() (running, thread 'loader-34')" in name
            for name in names
        ), names
        assert not any("held from C++" in name for name in names)
    finally:
        stop.set()
        thread.join()


# ---------------------------------------------------------------- NumPy subclasses


def test_an_ndarray_subclass_runs_no_code_while_scanned(shell, run_cell):
    run(
        run_cell,
        "import numpy as np\n"
        "calls = []\n"
        "class Hostile(np.ndarray):\n"
        "    def __getattribute__(self, name):\n"
        "        calls.append(name)\n"
        "        raise RuntimeError(name)\n"
        "    def __array_finalize__(self, obj):\n"
        "        calls.append('finalize')\n"
        "base = np.zeros(1000); h = base[10:].view(Hostile)\n"
        "objs = np.array([None, torch.ones(10)], dtype=object).view(Hostile)\n"
        "calls.clear()",
    )
    found = entries(shell)
    assert shell.user_ns["calls"] == []
    assert found["base"].nbytes == shell.user_ns["base"].nbytes == 8000
    assert "h" in found["base"].shared_with  # a view of base: counted once
    assert found["objs[1]"].nbytes == 40


# ---------------------------------------------------------------- pandas


@pytest.fixture
def pd():
    return pytest.importorskip("pandas")


def test_pandas_frames_series_and_indexes_are_listed_by_their_buffers(shell, run_cell, pd):
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "a = np.random.rand(100_000, 4)\n"
        "df = pd.DataFrame(np.random.rand(100_000, 4))\n"
        "s = pd.Series(np.arange(50_000.0))\n"
        "idx = pd.Index(np.arange(1000.0))\n"
        "words = pd.DataFrame({'w': pd.Series([str(i) for i in range(1000)], dtype=object)},\n"
        "                     columns=pd.Index(['w'], dtype=object))\n"
        "buffers = {'df': weakref.ref(df._mgr.blocks[0].values.base)}",
    )
    ns = shell.user_ns
    groups = {group.name: group for group in find_leftovers(shell=shell).groups()}
    assert groups["df"].nbytes == 100_000 * 4 * 8
    assert groups["df"].type_name == "DataFrame"
    assert groups["s"].nbytes == 50_000 * 8 and groups["s"].type_name == "Series"
    assert groups["idx"].nbytes == 1000 * 8 and groups["idx"].type_name == "Index"
    # an object column: its pointers, 8 bytes a row (and its one-column index's), noted
    assert groups["words"].nbytes == 1000 * 8 + 8
    found = find_leftovers(shell=shell)
    assert any(note.startswith("NumPy arrays of Python objects (`words[") for note in found.notes)
    assert ns["a"].nbytes == groups["a"].nbytes
    dry = reset.gpu_reset("df", shell=shell, dry_run=True)
    assert dry.estimated_bytes == 100_000 * 4 * 8
    done = reset.gpu_reset("df", shell=shell)
    gc.collect()
    assert ns["buffers"]["df"]() is None and done.released_bytes == dry.estimated_bytes


def test_pandas_memory_shared_with_arrays_and_tensors_is_counted_once(shell, run_cell, pd):
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "a = np.random.rand(4, 100_000)\n"
        "df = pd.DataFrame(a.T, copy=False)\n"
        "col = df[0]\n"
        "import warnings\n"
        "with warnings.catch_warnings():\n"
        "    warnings.simplefilter('ignore')  # pandas 3 hands out a read-only view\n"
        "    t = torch.from_numpy(df.values)",
    )
    found = find_leftovers(shell=shell)
    total = 4 * 100_000 * 8
    assert found.total_bytes == total, list(found)
    (entry,) = list(found)
    assert entry.nbytes == shell.user_ns["a"].nbytes
    shared = {entry.name, *entry.shared_with}
    assert {"a", "t"} <= shared
    assert any(name.startswith("df[") for name in shared)
    # pandas 2.2 caches the column in the frame (`df._item_cache`): `col` reaches it there
    col = found.groups().named("col")
    assert any(name.startswith("col.") for name in shared) or (
        col is not None and col.count == 0 and col.shares
    )


def test_pandas_objects_run_no_pandas_code_while_scanned(shell, run_cell, pd, monkeypatch):
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "df = pd.DataFrame({'x': np.arange(10_000.0),\n"
        "                   'y': pd.Series([str(i) for i in range(10_000)], dtype=object)},\n"
        "                  columns=pd.Index(['x', 'y'], dtype=object))\n"
        "s = df['x'] * 2",
    )
    df = shell.user_ns["df"]
    calls = []

    def hostile(self, name):
        calls.append(name)
        raise AssertionError(name)

    kinds = {type(df), type(shell.user_ns["s"]), type(df._mgr), type(df.index), type(df.columns)}
    kinds |= {type(block) for block in df._mgr.blocks}
    kinds |= {type(block.values) for block in df._mgr.blocks}
    for kind in kinds:
        if kind.__module__.startswith("pandas"):
            monkeypatch.setattr(kind, "__getattribute__", hostile, raising=False)
            monkeypatch.setattr(kind, "__getattr__", hostile, raising=False)
    found = find_leftovers(shell=shell)
    monkeypatch.undo()
    assert calls == []
    groups = {group.name: group for group in found.groups()}
    assert groups["df"].nbytes == 10_000 * 8 * 2 + 2 * 8  # two columns, their two names
    assert groups["s"].nbytes == 10_000 * 8


def test_pandas_columns_are_named_as_a_user_types_them(shell, run_cell, pd):
    """`frame['b']`, `frame[['a', 'd', ...]]` (pandas keeps columns of one dtype in one
    block), `frame.index.values`, `series.values`: not `frame._mgr.blocks[1].values`. The labels
    are read from the index's own storage, with no pandas code run (hostile getters)."""
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "frame = pd.DataFrame({'a': np.arange(1000.0), 'b': np.arange(1000), 'd': np.ones(1000),"
        " 'e': np.ones(1000), 'f': np.ones(1000), 'g': np.ones(1000)}, index=np.arange(1000) * 2)\n"
        "series = pd.Series(np.arange(500.0), index=np.arange(500) * 2)\n"
        "numbered = pd.DataFrame(np.ones((10, 2)))\n"
        "odd = pd.DataFrame({(1, 2): np.ones(10)})",
    )
    ns = shell.user_ns

    def hostile(self, name):
        raise AssertionError(name)

    with pytest.MonkeyPatch.context() as patch:
        for value in (ns["frame"], ns["frame"].columns, ns["frame"].index, ns["series"]):
            for kind in type(value).__mro__:
                if kind.__module__.startswith("pandas"):
                    patch.setattr(kind, "__getattribute__", hostile, raising=False)
        found = find_leftovers(shell=shell)
    names = {entry.name: entry for entry in found}
    assert names["frame['b']"].nbytes == 8000
    assert names["frame[['a', 'd', 'e', +2 more]]"].nbytes == 5 * 8000
    assert names["frame.index.values"].nbytes == 8000  # the index's own array
    assert names["series.values"].nbytes == 4000 and names["series.index.values"].nbytes == 4000
    for name in ("frame.index.values", "series.index.values"):  # that memory, as typed
        assert np.shares_memory(eval(name, dict(ns)), ns[name.partition(".")[0]].index._data)
    assert names["numbered[[0, 1]]"].nbytes == 10 * 2 * 8
    assert not any(
        name.startswith(("frame._mgr", "series._mgr", "numbered._mgr")) for name in names
    )
    # a label that is not a plain string or number: the internal name stays
    assert "odd._mgr.blocks[0].values" in names
    # pandas' own count (columns and index), plus the column labels' few bytes
    extra = found.groups().named("frame").nbytes - ns["frame"].memory_usage().sum()
    assert 0 <= extra < 200


def test_arrow_backed_columns_and_tables_are_counted_by_their_buffers(shell, run_cell, pd):
    pytest.importorskip("pyarrow")
    run(
        run_cell,
        "import numpy as np, pandas as pd, pyarrow as pa\n"
        "col = pd.Series([str(i) for i in range(10_000)], dtype='string[pyarrow]')\n"
        "table = pa.table({'n': np.arange(20_000)})\n"
        "arr = pa.array(np.arange(5_000.0)); same = arr.to_numpy(zero_copy_only=True)\n"
        "chunked = col.array._pa_array\n"
        "refs['col'] = weakref.ref(chunked); del chunked",
    )
    ns = shell.user_ns

    def buffer_bytes(chunked) -> int:
        return sum(buffer.size for chunk in chunked.chunks for buffer in chunk.buffers() if buffer)

    groups = {group.name: group for group in find_leftovers(shell=shell).groups()}
    column = buffer_bytes(ns["col"].array._pa_array)
    index = ns["col"].index  # a RangeIndex: no buffer
    assert type(index).__name__ == "RangeIndex"
    assert groups["col"].nbytes == column
    assert groups["table"].nbytes == buffer_bytes(ns["table"].column(0)) == 20_000 * 8
    found = entries(shell)
    assert found["arr.buffers()[1]"].nbytes == 5_000 * 8
    assert found["arr.buffers()[1]"].shared_with == ("same",)  # one buffer, counted once
    dry = reset.gpu_reset("col", shell=shell, dry_run=True)
    assert dry.estimated_bytes == column
    done = reset.gpu_reset("col", shell=shell)
    gc.collect()
    assert ns["refs"]["col"]() is None and done.released_bytes == column


EXTENSION_FRAME = (
    "import numpy as np, pandas as pd\n"
    "n = 2000\n"
    "mixed = pd.DataFrame({'a': np.arange(n, dtype=float),\n"
    "    'b': pd.array([str(i) for i in range(n)], dtype='string[pyarrow]'),\n"
    "    'c': pd.array(np.arange(n), dtype='Int64'),\n"
    "    'd': pd.array([True, None] * (n // 2), dtype='boolean'),\n"
    "    'e': pd.Categorical([f'label {i % 500}' for i in range(n)]),\n"
    "    't': pd.date_range('2026-01-01', periods=n, freq='min', tz='UTC'),\n"
    "    'u': pd.date_range('2026-01-01', periods=n, freq='min'),\n"
    "    'v': pd.date_range('2026-02-01', periods=n, freq='min'),\n"
    "    'p': pd.array(np.arange(n), dtype='int64[pyarrow]'),\n"
    "    's': [f'item {i}' for i in range(n)]})\n"  # pandas 3: Arrow strings ('str')
    "strings = pd.Series(['y'] * 500, dtype='string[pyarrow]')"
)


def column_bytes(column) -> int:
    """pandas' own count of a column's arrays: a categorical's codes and labels (without
    the labels' hash table, C memory no scan sees, which `memory_usage` adds)."""
    if str(column.dtype) == "category":
        return column.array.codes.nbytes + column.array.categories.nbytes
    return column.nbytes


def test_extension_columns_are_listed_once_as_the_column_pandas_shows(shell, run_cell, pd):
    """A frame's Arrow, nullable, categorical or dated column is one entry named as the
    user types it (`mixed['b']`, `mixed[['u', 'v']]` where pandas keeps two in one block;
    `strings.array` for a series), with the dtype `df.dtypes` shows and the column's shape,
    and its bytes are pandas' own count of that column (`.nbytes`): not an Arrow buffer or
    a mask each (`mixed['b'].array._pa_array.chunks[0].buffers()[1]`)."""
    pytest.importorskip("pyarrow")
    run(run_cell, EXTENSION_FRAME)
    ns = shell.user_ns
    found = [e for e in find_leftovers(shell=shell) if e.name.startswith(("mixed", "strings"))]
    names = [entry.name for entry in found]
    assert len(names) == len(set(names))  # each listed once
    columns = {"mixed['b']", "mixed['c']", "mixed['d']", "mixed['e']", "mixed['t']"}
    columns |= {"mixed['p']", "mixed['s']", "mixed[['u', 'v']]", "strings.array"}
    assert columns <= set(names), names
    assert not any(part in name for name in names for part in ("_pa_array", "_data", "_mask"))
    for entry in found:
        if entry.name not in columns:
            continue
        value = eval(entry.name, dict(ns))  # the name a user types, in the notebook
        dtypes = set(map(str, value.dtypes)) if hasattr(value, "columns") else {str(value.dtype)}
        assert {entry.dtype} == dtypes, entry.name
        assert entry.shape == value.shape, entry.name
        if entry.dtype in ("str", "string", "int64[pyarrow]"):  # the Arrow buffers, whole
            chunks = getattr(value, "array", value)._pa_array.chunks
            held = sum(buffer.size for chunk in chunks for buffer in chunk.buffers() if buffer)
            assert entry.nbytes == held >= value.nbytes, entry.name
        elif entry.name == "mixed['e']":  # its codes and labels (and their lookup's array)
            assert entry.nbytes >= column_bytes(value)
        elif hasattr(value, "columns"):
            assert entry.nbytes == value.memory_usage(index=False).sum(), entry.name
        else:  # pandas' own count
            assert entry.nbytes == value.nbytes, entry.name
    shown = {entry.dtype for entry in found if entry.name in columns}
    assert shown >= {"string", "Int64", "boolean", "category", "int64[pyarrow]"}
    assert any(dtype.startswith("datetime64[") and dtype.endswith(", UTC]") for dtype in shown)


def test_another_librarys_extension_array_runs_no_code_and_keeps_its_parts(shell, run_cell, pd):
    """An extension array whose class is not pandas' own (a library's, a user's subclass)
    has no dtype or shape read from it: its parts keep the names that reach them."""
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "calls = []\n"
        "class Loud(pd.arrays.IntegerArray):\n"
        "    @property\n"
        "    def dtype(self):\n"
        "        calls.append('dtype'); return super().dtype\n"
        "    @property\n"
        "    def shape(self):\n"
        "        calls.append('shape'); return super().shape\n"
        "loud = pd.Series(Loud(np.arange(1000), np.zeros(1000, dtype=bool)))\n"
        "calls.clear()",
    )
    names = {entry.name: entry for entry in find_leftovers(shell=shell)}
    assert shell.user_ns["calls"] == []
    assert names["loud.array._data"].nbytes == 8000
    assert names["loud.array._mask"].nbytes == 1000


def test_a_column_listed_once_still_counts_each_buffer_once_and_names_who_shares_it(
    shell, run_cell, pd
):
    """A slice of a frame and a series taken from it share its columns' buffers: the
    column's entry names them, the frame's total counts each buffer once, and deleting all
    three frees it (weakrefs), as the dry run said."""
    pytest.importorskip("pyarrow")
    run(
        run_cell,
        EXTENSION_FRAME + "\n"
        "head = mixed[:100]\n"
        "refs['b'] = weakref.ref(mixed['b'].array._pa_array.chunks[0])\n"
        "refs['c'] = weakref.ref(mixed['c'].array._data)",
    )
    ns = shell.user_ns
    found = find_leftovers(shell=shell)
    by_name = {entry.name: entry for entry in found}
    assert "head['b']" in by_name["mixed['b']"].shared_with
    assert "head['c']" in by_name["mixed['c']"].shared_with
    groups = {group.name: group for group in found.groups()}
    own = sum(column_bytes(column) for _label, column in ns["mixed"].items())
    extra = groups["mixed"].nbytes - own  # the column labels, the categories' lookup array
    assert 0 <= extra < 200_000
    assert groups["head"].shares_only
    dry = reset.gpu_reset("mixed", "head", "strings", shell=shell, dry_run=True)
    done = reset.gpu_reset("mixed", "head", "strings", shell=shell)
    gc.collect()
    assert ns["refs"]["c"]() is None
    assert done.released_bytes == dry.estimated_bytes >= own


def test_the_object_arrays_note_names_the_users_columns_before_pandas_own(shell, run_cell, pd):
    """A column of Python objects is named in the note before pandas' own object arrays
    (a big index of labels, `df.index.values`), whatever order the scan met them in; pandas'
    small ones (a few column labels and their lookup engine) are not named at all."""
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "early_f = pd.DataFrame({'x': np.ones(20_000)},\n"
        "                       index=pd.Index([f'r{i}' for i in range(20_000)], dtype=object))\n"
        "early_f['x'].sum()\n"  # met first
        "meta_f = pd.DataFrame({'a': np.arange(100.0), 'meta': [{'k': i} for i in range(100)]})\n"
        "meta_f['a'].sum()",  # pandas makes the labels' engine (an object array) on a lookup
    )
    names = [
        name
        for name in find_leftovers(shell=shell).object_arrays
        if name.startswith(("meta_f", "early_f"))
    ]
    assert names[0] == "meta_f['meta']", names
    assert names[1:] == ["early_f.index.values"], names  # 20,000 labels, as a user reads them
    ns = shell.user_ns
    assert eval("early_f.index.values", dict(ns)).nbytes == 20_000 * 8  # the pointers


def test_a_rerun_s_scan_of_a_deleted_alias_lists_no_dropped_name(shell, run_cell):
    run(run_cell, f"d = {{'a': torch.ones({N})}}; d2 = d")
    done = reset.gpu_reset("d2", shell=shell)
    names = [group.name for group in done.held_groups()]
    assert "d2" not in names and "d" in names
    assert "d2" not in str(done).split("still held")[1]
    assert list(done.leftovers) == list(find_leftovers(shell=shell))


# ---------------------------------------------------------------- GPU truth


@pytest.mark.gpu
def test_all_deletes_a_future_holding_gpu_memory_and_its_dry_run_agrees(shell, run_cell):
    torch.cuda.init()
    run(
        run_cell,
        "from concurrent.futures import ThreadPoolExecutor\n"
        "pool = ThreadPoolExecutor(1)\n"
        "fut = pool.submit(torch.ones, 16 * 2**20 // 4, device='cuda'); pool.shutdown()\n"
        "log_inputs = []\n"
        "import logging\n"
        "class Keep(logging.Handler):\n"
        "    def __init__(self):\n"
        "        super().__init__(); self.records = []\n"
        "    def emit(self, record):\n"
        "        self.records.append(record)\n"
        "handler = Keep()\n"
        "w = torch.randn(1024, 1024, device='cuda', requires_grad=True)\n"
        "x = torch.randn(4096, 1024, device='cuda')\n"
        "handler.emit(logging.makeLogRecord({'args': ((x @ w).sum(),)})); del x",
    )
    before = torch.cuda.memory_allocated()
    dry = reset.gpu_reset(shell=shell, all_vars=True, dry_run=True)
    assert {"fut", "handler", "w"} <= set(dry.dropped_names)
    # the future's 16 MiB, w's 4 MiB, the graph's saved x (16 MiB) and the scalar loss
    assert dry.estimated_bytes >= (16 + 4 + 16) * 2**20 + 4
    done = reset.gpu_reset(shell=shell, all_vars=True)
    assert done.released_bytes == dry.estimated_bytes
    # the allocator rounds the scalar up to its smallest block (512 B)
    assert 0 <= before - torch.cuda.memory_allocated() - dry.estimated_bytes < 2**12


def test_a_frames_columns_show_the_frames_shape_and_no_pandas_cache(shell, run_cell, pd):
    """pandas keeps a frame's columns of one dtype as the rows of one block: `df['c']` is
    listed with the column's shape and `df[['a', 'b']]` with the frame's (rows x 2), as each
    name evaluates in the notebook. pandas' own second references inside the frame (2.2's
    cache of a column read, `df._item_cache`; the labels' lookup engine) are not named
    beside the column: they go with `df`."""
    run(
        run_cell,
        "import numpy as np, pandas as pd\n"
        "df = pd.DataFrame({'a': np.random.rand(50_000), 'b': np.random.rand(50_000),\n"
        "                   'c': np.arange(50_000)},\n"
        "                  columns=pd.Index(['a', 'b', 'c'], dtype=object))\n"
        "col = df['a']\n"
        "total = df['a'].sum() + df['c'].sum()",
    )
    ns = shell.user_ns
    found = {
        entry.name: entry for entry in find_leftovers(shell=shell) if entry.name.startswith("df")
    }
    assert found["df[['a', 'b']]"].shape == (50_000, 2)
    assert found["df['c']"].shape == (50_000,)
    for name in ("df[['a', 'b']]", "df['c']"):
        value = eval(name, dict(ns))  # the name a user types, in the notebook
        assert value.shape == found[name].shape and value.values.nbytes == found[name].nbytes
    for entry in found.values():
        assert not any(other.startswith("df.") and "._" in other for other in entry.shared_with), (
            entry
        )
