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
