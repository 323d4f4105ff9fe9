"""The items of a container recorded in bulk share one row (`rows.Items`): their paths,
names, roots and the listing are those of one row per item, made one by one."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import scan  # noqa: E402
from colab_gpu_guard.leftovers.reach import root_runs, runs_of  # noqa: E402
from colab_gpu_guard.leftovers.rows import ROW_PATH, ROW_ROOT, Items, expanded  # noqa: E402


def notebook() -> dict:
    """Bulk runs (lists of one array type) between rows recorded one by one, a tensor with
    an attribute holding another, and a name that shares a bulk run's tensor."""
    many = [torch.zeros(2) for _ in range(300)]
    tagged = torch.ones(3)
    tagged.extra = torch.ones(5)  # its own attribute: walked under its row's path
    more = [torch.zeros(4) for _ in range(40)] + [tagged]
    return {
        "first": torch.ones(7),
        "many": many,
        "mixed": [torch.ones(1), "text", 3],
        "more": more,
        "again": [torch.zeros(3) for _ in range(50)],
        "alias": many[7],
        "nested": {"inner": [torch.zeros(6) for _ in range(30)]},
    }


def test_bulk_rows_give_the_paths_roots_and_names_of_rows_made_one_by_one():
    namespace = notebook()
    found = scan(namespace=namespace).walker.found
    assert found.runs and all(type(run) is Items for run in found.runs)
    rows = expanded(found.rows, found.runs)
    assert len(rows) == len(found.rows)
    assert found.paths() == list(map(ROW_PATH, rows))
    assert found.paths(123) == list(map(ROW_PATH, rows))[123:]
    assert [found.path(i) for i in range(len(rows))] == list(map(ROW_PATH, rows))
    assert root_runs(found.rows, found.runs) == runs_of(list(map(ROW_ROOT, rows)))
    assert [ref.path for ref in found.refs] == list(map(ROW_PATH, rows))
    part = found.subset([index % 3 == 0 for index in range(len(rows))])
    assert not part.runs
    assert list(map(ROW_PATH, part.rows)) == list(map(ROW_PATH, rows))[::3]


def test_names_of_items_recorded_in_bulk():
    namespace = notebook()
    listed = scan(namespace=namespace).leftovers
    names = {item.name for item in listed}
    assert {"many[0]", "many[299]", "more[39]", "again[49]", "nested['inner'][29]"} <= names
    assert {"more[40]", "more[40].extra", "first", "mixed[0]"} <= names
    shared = [item for item in listed if item.name in ("alias", "many[7]")]
    assert len(shared) == 1 and set(shared[0].shared_with) | {shared[0].name} == {
        "alias",
        "many[7]",
    }
    groups = {group.name: group.count for group in listed.groups()}
    assert groups["many"] == 299 and groups["again"] == 50 and groups["more"] == 42
