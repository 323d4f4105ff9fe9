"""A view that keeps more memory alive than it uses says so (`Leftover.view_text`): the bytes
it keeps are its whole storage (torch's own figure), the bytes it uses its own, and the fix
(.clone()) releases the rest, proven by a weakref to the base's storage."""

from __future__ import annotations

import gc
import io
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.leftovers.html import leftovers_table  # noqa: E402
from colab_gpu_guard.status.panel_leftovers import entries_table  # noqa: E402
from colab_gpu_guard.units import format_bytes  # noqa: E402

N = 1_000_000  # 3.81 MiB of float32


def only(namespace: dict):
    found = find_leftovers(namespace=namespace)
    assert len(found) == 1, str(found)
    return found[0]


def test_a_row_of_a_deleted_tensor_says_it_keeps_the_whole_tensor():
    big = torch.zeros(1000, 1000)
    storage = weakref.ref(big.untyped_storage())
    row = big[0]
    del big
    entry = only({"row": row})
    assert entry.nbytes == row.untyped_storage().nbytes() == 4 * N
    assert entry.views_nbytes == row.nbytes == 4000
    expected = (
        f"view: uses {format_bytes(4000)} of the {format_bytes(4 * N)} it keeps alive "
        "(keep row.clone(): it copies only this part)"
    )
    assert entry.view_text() == expected and expected in str(entry)
    row = row.clone()  # the fix the note names
    gc.collect()
    assert storage() is None  # the base's memory is gone
    entry = only({"row": row})
    assert (entry.nbytes, entry.view_text()) == (4000, "")


def test_a_loaded_checkpoint_slice_with_two_names():
    buffer = io.BytesIO()
    torch.save({"head": torch.zeros(N)[:10]}, buffer)  # torch.save writes the whole storage
    buffer.seek(0)
    ckpt = torch.load(buffer)
    head = ckpt["head"]
    assert head._base is None and head.storage_offset() == 0  # nothing else tells
    entry = only({"ckpt": ckpt, "head": head})
    assert entry.nbytes == 4 * N and entry.views_nbytes == 40  # one array, counted once
    assert entry.view_text().startswith(
        f"view: these names use 40 B of the {format_bytes(4 * N)} they keep alive"
    )


def test_views_that_together_use_half_and_empty_and_strided_views():
    base = torch.zeros(N)
    halves = {"a": base[: N // 4], "b": base[N // 4 : N // 2]}
    entry = only(halves)
    assert entry.views_nbytes == 2 * N and entry.unused_nbytes == 2 * N
    assert "these names use" in entry.view_text()
    assert only({"a": base[: N // 2], "b": base[N // 4 :]}).view_text() == ""  # 3/4 used
    assert only({"empty": base[:0]}).views_nbytes == 0
    assert "uses 0 B of" in only({"empty": base[:0]}).view_text()
    assert "uses 1.91 MiB of" in only({"odd": base[::2]}).view_text()


def test_no_note_where_the_base_is_named_or_little_is_unused():
    base = torch.zeros(N)
    assert only({"base": base, "row": base[:10]}).view_text() == ""
    assert only({"most": base[: N - 1000]}).view_text() == ""  # 4 KB unused: no note
    small = torch.zeros(1000)
    assert only({"head": small[:10]}).view_text() == ""  # under 64 KiB unused
    assert only({"t": torch.ones(1).expand(N)}).view_text() == ""  # uses more than it keeps


def test_html_and_panel_rows_show_the_view():
    base = torch.zeros(N)
    entry = only({"<row>": base[:10]})
    table = leftovers_table([entry])
    assert "view of more memory" in table and "uses 40 B of 3.81 MiB" in table
    assert "&lt;row&gt;.clone()" in table and "<row>" not in table
    panel = entries_table([entry])
    assert "&lt;row&gt; (view: uses 40 B of 3.81 MiB)" in panel
    plain = only({"x": torch.zeros(10)})
    assert "view of more memory" not in leftovers_table([plain])


def test_a_numpy_view_names_numpy_s_copy():
    np = pytest.importorskip("numpy")
    base = np.zeros(N)
    base_ref = weakref.ref(base)
    row = base[:10]
    del base
    entry = only({"row": row})
    assert entry.nbytes == 8 * N and entry.views_nbytes == 80
    assert "(keep row.copy(): it copies only this part)" in entry.view_text()
    row = row.copy()  # the fix the note names
    gc.collect()
    assert base_ref() is None


def used_by(base, views) -> int:
    """What `views` use of `base`'s memory, measured apart from the scan: each view filled
    with ones, then the base's nonzero elements counted."""
    base[...] = 0
    for view in views.values():
        view[...] = 1
    return int((base != 0).sum()) * (
        base.nbytes // base.numel() if torch.is_tensor(base) else base.itemsize
    )


def test_views_over_the_same_bytes_count_those_bytes_once():
    base = torch.zeros(N)
    views = {
        "a": base[: N // 8],
        "b": base[: N // 8].view(-1, 5),  # the same bytes, another object
        "c": base[N // 16 : 3 * N // 16],  # half of it over a's
    }
    entry = only(views)
    assert entry.views_nbytes == used_by(base, views) == 4 * (3 * N // 16)
    assert f"these names use {format_bytes(4 * (3 * N // 16))} of the 3.81 MiB" in str(entry)


def test_a_column_slice_and_its_transpose_count_once_and_inside_rows_count_nothing():
    grid = torch.zeros(1000, 1000)
    column = grid[:, :100]
    views = {"t": column, "tt": column.T}
    entry = only(views)
    assert entry.views_nbytes == used_by(grid.view(-1), views) == 4 * 100_000
    assert "these names use 391 KiB of the 3.81 MiB they keep alive" in str(entry)
    rows = {"top": grid[:200], "corner": grid[:100, :10], "odd": grid[:200:2, 5]}
    assert only(rows).views_nbytes == used_by(grid.view(-1), rows) == 4 * 200_000
    apart = {"left": grid[:, :1], "right": grid[:, 999:]}  # two strided views, no byte shared
    assert only(apart).views_nbytes == used_by(grid.view(-1), apart) == 8000


def test_numpy_views_and_a_tensor_over_one_count_each_byte_once():
    np = pytest.importorskip("numpy")
    base = np.zeros(N)
    views = {
        "head": base[: N // 8],
        "head_t": torch.from_numpy(base[: N // 16]),  # a tensor over the same bytes
        "mid_t": torch.from_numpy(base[N // 32 : N // 16]),  # over them, from inside
        "back": base[N // 8 : 0 : -1][: N // 16],  # reversed, inside head
        "cols": base.reshape(1000, 1000)[:, :10],
    }
    entry = only(views)
    used = used_by(base, views)
    assert entry.views_nbytes == used == 8 * (N // 8 + 10 * 875)


@pytest.mark.parametrize("seed", range(8))
def test_random_row_and_rectangle_views_are_measured_as_filling_them_measures(seed):
    generator = torch.Generator().manual_seed(seed)

    def pick(limit: int) -> tuple[int, int]:
        start, stop = sorted(torch.randint(0, limit + 1, (2,), generator=generator).tolist())
        return start, max(stop, start + 1)

    grid = torch.zeros(500, 500)
    views = {}
    for index in range(int(torch.randint(2, 7, (1,), generator=generator))):
        (top, bottom), (left, right) = pick(250), pick(500)
        if index % 2:  # rows: a dense block
            views[f"v{index}"] = grid[top:bottom]
        else:  # a rectangle: strided unless it spans whole rows
            views[f"v{index}"] = grid[top:bottom, left:right].T
    assert only(views).views_nbytes == used_by(grid.view(-1), views)


def test_views_too_many_runs_to_measure_say_no_figure(monkeypatch):
    from colab_gpu_guard.leftovers import extents

    grid = torch.zeros(1000, 1000)
    views = {"left": grid[:, :2], "right": grid[:, 1:3]}  # 1000 runs each, overlapping
    assert only(views).views_nbytes == used_by(grid.view(-1), views) == 12_000
    monkeypatch.setattr(extents, "MAX_RUNS", 1500)
    entry = only(views)
    assert entry.views_nbytes is None and entry.view_text() == ""
    assert "view" not in str(entry)


def test_the_union_of_strided_and_dense_arrays_is_the_bytes_their_elements_take():
    """`bytes_used` against the byte addresses of every element, enumerated: random
    arrays over a 4 KiB buffer, some contiguous, some strided, some overlapping."""
    import itertools
    import random

    from colab_gpu_guard.frameworks.base import extent
    from colab_gpu_guard.leftovers.extents import bytes_used

    chance = random.Random(7)
    for _ in range(300):
        made, truth = [], set()
        for _ in range(chance.randint(1, 6)):
            item = chance.choice((1, 4, 8))
            shape = tuple(chance.randint(1, 6) for _ in range(chance.randint(1, 3)))
            strides = tuple(item * chance.randint(1, 12) for _ in shape)
            start = chance.randrange(0, 1024, item)
            made.append(extent(start, shape, strides, item))
            for index in itertools.product(*map(range, shape)):
                at = start + sum(i * stride for i, stride in zip(index, strides))
                truth.update(range(at, at + item))
        assert bytes_used([], [], made) == len(truth), made


def test_many_strided_blocks_apart_are_measured_without_comparing_each_pair():
    grid = torch.zeros(40_000, 10)
    blocks = {f"b{i}": grid[10 * i : 10 * i + 10, :5] for i in range(4000)}
    assert only(blocks).views_nbytes == 4000 * 50 * 4 == used_by(grid.view(-1), blocks)
