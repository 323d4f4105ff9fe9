"""The panel's Leftovers groups in a real IPython shell: a group the user opens stays open
across refreshes (its state lives in the kernel, by the group's name), follows its group when
the order changes, shows what the group holds now; closed groups stay closed; the widgets
are bounded however many groups come and go; a refresh writes only what changed.

Runs with ipywidgets 8 (the main .venv) and 7.7.1 (the Colab-like environments). A click
in the browser reaches the kernel as a comm message that calls ``set_state``; the tests
call it the same way (`click`)."""

from __future__ import annotations

import dataclasses
import re
import types

import pytest

ipywidgets = pytest.importorskip("ipywidgets")

from colab_gpu_guard.ipython.panel import groups as panel_groups  # noqa: E402
from colab_gpu_guard.ipython.panel import refresh as panel_refresh  # noqa: E402
from colab_gpu_guard.leftovers.groups import group_leftovers  # noqa: E402
from colab_gpu_guard.leftovers.root_refs import RootRef  # noqa: E402
from colab_gpu_guard.status.panel_leftovers import TOP_LEFTOVERS  # noqa: E402
from tests.panel_widgets import HOSTILE, all_widgets, assert_escaped, html_of  # noqa: E402
from tests.records import leftover  # noqa: E402
from tests.shared_shell import flush_output_history  # noqa: E402

OPEN, SHUT = panel_groups.OPEN, panel_groups.SHUT


def click(row) -> None:
    """Press a group's toggle as the front end does (a comm message -> set_state)."""
    row.toggle.set_state({"value": not row.toggle.value})


def names(view) -> list[str]:
    return [row.name for row in view.rows]


def shown(row) -> bool:
    return row.body.layout.display is None


def assert_closed(view, *except_names: str) -> None:
    for row in view.rows:
        if row.name in except_names:
            continue
        assert row.toggle.value is False, row.name
        assert row.toggle.description == SHUT + row.name
        assert not shown(row), row.name


def live_widgets() -> int:
    """Widgets with an open comm in this kernel (ipywidgets 8 and 7)."""
    from ipywidgets.widgets import widget

    registry = getattr(widget, "_instances", None)
    return len(registry if registry is not None else widget.Widget.widgets)


@pytest.fixture(autouse=True)
def own_namespace(ip):
    """Only this test's arrays: the global test shell keeps earlier tests' variables and
    results, which would be listed among (or before) this test's groups."""
    flush_output_history(ip)
    # IPython 7 also pushes `_N` into user_ns_hidden, which the flush leaves there
    for key in [key for key in ip.user_ns_hidden if re.fullmatch(r"_\d+", key)]:
        del ip.user_ns_hidden[key]
    saved = {key: ip.user_ns[key] for key in list(ip.user_ns) if _user_variable(ip, key)}
    for key in saved:
        del ip.user_ns[key]
    yield
    flush_output_history(ip)
    for key in [key for key in ip.user_ns if key not in saved and _user_variable(ip, key)]:
        del ip.user_ns[key]
    ip.user_ns.update(saved)


def _user_variable(ip, key: str) -> bool:
    value = ip.user_ns[key]
    return not (
        key.startswith("_") or key in ip.user_ns_hidden or isinstance(value, types.ModuleType)
    )


@pytest.fixture
def leftovers(show):
    """The Leftovers section of a shown panel (every section open)."""

    def get():
        return show().leftovers

    return get


# ---------------------------------------------------------------- open groups stay open


def test_an_opened_group_stays_open_moves_with_its_group_and_shows_it_now(
    ip, run_cell, leftovers, torch
):
    run_cell("import torch\nkept_list = [torch.ones(256)]\nsmall_one = torch.ones(8)")
    view = leftovers()
    assert names(view)[:2] == ["kept_list", "small_one"]
    row = view.row("kept_list")
    assert row.toggle.description == SHUT + "kept_list" and row.toggle.tooltip == "kept_list"
    assert not shown(row) and row.body.value == ""  # a closed group's arrays: not drawn
    assert "list: 1 array on cpu" in row.line.value and "1 KiB" in row.line.value

    click(row)
    assert row.toggle.value is True and view.is_open("kept_list")
    assert row.toggle.description == OPEN + "kept_list" and shown(row)
    assert ">kept_list[0]</span>" in row.body.value and "[256]" in row.body.value

    # another array in that variable, a bigger variable and an output-history result,
    # both listed before it (hidden holders first, then the biggest)
    run_cell(
        "kept_list.append(torch.zeros(512))\nbigger_first = torch.ones(100_000)\n"
        "torch.ones(4096) * 2"
    )
    out = f"Out[{ip.execution_count - 1}]"
    assert names(view)[:4] == [out, "bigger_first", "kept_list", "small_one"]
    assert view.row("kept_list") is row  # the same widgets, moved
    assert row.toggle.value is True and row.toggle.description == OPEN + "kept_list"
    assert shown(row)
    assert ">kept_list[1]</span>" in row.body.value and "[512]" in row.body.value
    assert "list: 2 arrays on cpu" in row.line.value
    assert_closed(view, "kept_list")  # the new groups and small_one: closed
    assert view.row(out).body.value == "" and view.row("small_one").body.value == ""

    # closing it: closed after the next cells too
    click(row)
    assert not view.is_open("kept_list") and not shown(row)
    run_cell("kept_list.append(torch.zeros(16))")
    run_cell("pass")
    assert_closed(view)


def test_a_group_that_leaves_comes_back_as_the_user_left_it(ip, run_cell, leftovers, torch):
    """Open groups are remembered by name: deleted and made again, it is open again; a
    closed one comes back closed."""
    run_cell("import torch\ncomes_back = torch.ones(64)\nstays_shut = torch.ones(32)")
    view = leftovers()
    click(view.row("comes_back"))
    run_cell("del comes_back, stays_shut")
    assert view.row("comes_back") is None and view.row("stays_shut") is None
    assert view.is_open("comes_back")
    run_cell("comes_back = torch.ones(128)\nstays_shut = torch.ones(32)")
    again = view.row("comes_back")
    assert again.toggle.value is True and shown(again) and "[128]" in again.body.value
    assert_closed(view, "comes_back")


def test_the_last_hundred_opened_names_are_remembered(show):
    view = show().leftovers
    row = panel_groups.GroupRow(view._on_toggle)
    for index in range(panel_groups.REMEMBERED + 20):
        row.name = f"name_{index}"
        row.group = dataclasses.replace(_group("x"), name=row.name)
        row.toggle.value = False
        click(row)
    assert len(view.opened) == panel_groups.REMEMBERED
    assert list(view.opened)[0] == "name_20" and view.is_open("name_119")
    row.close()


def test_groups_stay_open_when_a_slow_scan_is_not_repeated(
    ip, run_cell, show, monkeypatch, torch, real_throttle
):
    """After a cell that does not scan again (the last scan was slow and recent), the
    groups are the last scan's, with their open state."""
    now = [1000.0]
    monkeypatch.setattr(panel_refresh, "_clock", lambda: now[0])
    real = panel_refresh._take_status

    def slow(shell, leftovers=True):
        taken = real(shell, leftovers=leftovers)
        if leftovers:
            return taken._replace(status=dataclasses.replace(taken.status, duration_ms=800.0))
        return taken

    monkeypatch.setattr(panel_refresh, "_take_status", slow)
    run_cell("import torch\nscanned_slowly = [torch.ones(10)]")
    instance = show()
    monkeypatch.setattr(instance.refresher, "snapshot", slow)
    instance.refresh_button.click()
    view = instance.leftovers
    click(view.row("scanned_slowly"))
    run_cell("scanned_slowly.append(torch.ones(20))")  # not scanned again
    row = view.row("scanned_slowly")
    assert row is not None and row.toggle.value is True and shown(row)
    assert "[10]" in row.body.value and "[20]" not in row.body.value
    assert "finding them took 800 ms" in view.foot.value
    now[0] += 9
    run_cell("pass")  # scanned again
    assert "[20]" in row.body.value and row.toggle.value is True


# ---------------------------------------------------------------- bounded and minimal


G1 = RootRef("g1", "user variable", "variable")  # an entry listed under `g1`


def _group(name: str, nbytes: int = 1024, hidden: bool = False):
    holder = "output history" if hidden else "user variable"
    entry = leftover(name=name, holder=holder, shape=(nbytes // 4,), nbytes=nbytes)
    (group,) = group_leftovers([entry]).groups
    return group


def _status(base, groups, total: int = 0):
    entries = tuple(entry for group in groups for entry in group.entries)
    return dataclasses.replace(
        base,
        leftovers=entries,
        leftovers_count=len(entries),
        leftovers_bytes=sum(group.nbytes for group in groups),
        leftovers_freeable_bytes=0,
        leftover_groups=tuple(groups[:TOP_LEFTOVERS]),
        leftover_groups_count=max(total, len(groups)),
        leftovers_note=None,
    )


def test_many_groups_show_the_top_ten_and_the_rest_in_one_line(ip, run_cell, leftovers, torch):
    run_cell(
        "import torch\nfor _i in range(60):\n    globals()[f'many_{_i:02d}'] = torch.ones(100 + _i)"
    )
    view = leftovers()
    assert len(view.rows) == TOP_LEFTOVERS
    assert names(view) == [f"many_{index:02d}" for index in range(59, 49, -1)]
    assert "... and 50 more holders" in view.foot.value
    assert "(the 10 biggest listed)" in view.foot.value
    run_cell("for _i in range(60):\n    del globals()[f'many_{_i:02d}']")
    assert not any(name.startswith("many_") for name in names(view))
    assert "more holders" not in view.foot.value


def test_widgets_stay_bounded_while_groups_come_and_go(ip, run_cell, leftovers, torch):
    """New names entering the top ten reuse the rows of the names that left it: the
    section never holds more than ten rows, and the kernel's widget count stays put."""
    run_cell("import torch")
    view = leftovers()
    counts = []
    for round_ in range(6):
        code = "\n".join(
            f"churn_{round_}_{index} = torch.ones({1000 * (round_ + 1) + index})"
            for index in range(TOP_LEFTOVERS)
        )
        run_cell(code)
        assert names(view)[:TOP_LEFTOVERS] == [
            f"churn_{round_}_{index}" for index in range(TOP_LEFTOVERS - 1, -1, -1)
        ]
        click(view.rows[0])  # open one per round: open rows are reused as well
        assert_closed(view, view.rows[0].name)
        counts.append((len(view.parts()), live_widgets()))
    assert len(set(counts[1:])) == 1, counts  # nothing grows after the first round
    assert len(view.parts()) <= TOP_LEFTOVERS * 5 + 3


class Writes(list):
    """The (part, trait) of every value a section writes, once `record`ed; read as
    ('<group>.toggle' | '<group>.line' | '<group>.body' | 'head' | 'rows_box' | 'foot',
    trait) after the refresh."""

    def __init__(self, view) -> None:
        super().__init__()
        self.view = view
        write, show_part = view._write, view._show_part

        def recording_write(part, value, trait="value"):
            if write(part, value, trait):
                self.append((part, trait))
                return True
            return False

        def recording_show(part, shown):
            before = part.layout.display
            show_part(part, shown)
            if part.layout.display != before:
                self.append((part, "display"))

        view._write, view._show_part = recording_write, recording_show

    def labels(self) -> list[tuple[str, str]]:
        names = {}
        for row in [*self.view._by_name.values(), *self.view._spare]:
            for name in ("toggle", "line", "body"):
                names[id(getattr(row, name))] = f"{row.name}.{name}"
        for name in ("head", "rows_box", "foot"):
            names[id(getattr(self.view, name))] = name
        return [(names[id(part)], trait) for part, trait in self]


def test_a_refresh_writes_only_what_changed_in_the_groups(show):
    instance = show()
    view = instance.leftovers
    base = instance.last_status
    first = [_group(f"g{index}", 1024 * (10 - index)) for index in range(4)]
    status = _status(base, first)
    instance.refresh(status)
    spare = len(view._spare)
    click(view.row("g1"))
    written = Writes(view)
    assert instance.refresh(status) == 0 and written.labels() == []  # the same snapshot: nothing

    # the same groups in another order: the rows are reordered, nothing else written
    drawn = view.row("g1").body.value
    assert instance.refresh(_status(base, first[::-1])) == 1
    assert written.labels() == [("rows_box", "children")]
    assert names(view) == ["g3", "g2", "g1", "g0"] and view.row("g1").body.value == drawn

    # a new hidden group listed first: the totals, one new row (its toggle's label and
    # tooltip, its line), the order; the open group's arrays are not drawn again
    written.clear()
    extra = _group("Out[7]", 512, hidden=True)
    updates = instance.updates
    instance.refresh(_status(base, [extra, *first]))
    assert written.labels() == [
        ("head", "value"),
        ("Out[7].toggle", "description"),
        ("Out[7].toggle", "tooltip"),
        ("Out[7].line", "value"),
        ("rows_box", "children"),
    ]
    # + the section toggle's count and the held line under the GPU lines
    assert instance.updates - updates == len(written) + 2
    assert view.row("g1").toggle.value is True and view.row("g1").body.value == drawn
    assert view.row("Out[7]").body.value == ""  # closed: not drawn

    # the open group changes: its line and its arrays, and the totals
    written.clear()
    grown = group_leftovers(
        [
            *_group("g1").entries,
            leftover(name="g1[1]", shape=(9,), nbytes=8192, storage_id=1, root=G1),
        ]
    ).groups[0]
    instance.refresh(_status(base, [extra, first[0], grown, *first[2:]]))
    assert written.labels() == [("head", "value"), ("g1.line", "value"), ("g1.body", "value")]
    assert "2 arrays" in view.row("g1").line.value and "[9]" in view.row("g1").body.value

    # a group leaves: its row is set aside (no write to it), the order changes
    written.clear()
    instance.refresh(_status(base, [extra, grown, *first[2:]]))
    assert written.labels() == [("head", "value"), ("rows_box", "children")]
    assert view.row("g0") is None and len(view._spare) == spare + 1


def test_closing_the_panel_closes_every_row(ip, run_cell, show, torch):
    run_cell("import torch\nclosing_a = torch.ones(8)\nclosing_b = torch.ones(9)")
    instance = show()
    view = instance.leftovers
    click(view.row("closing_a"))
    run_cell("del closing_a")  # its row is kept aside, still a widget
    parts = view.parts()
    assert len(parts) > len(all_widgets(view))
    instance.close()
    assert all(part.comm is None for part in parts)


# ---------------------------------------------------------------- escaping and layout


def test_hostile_group_names_are_text_not_html(ip, show, torch):
    ip.user_ns["hostile_groups"] = {HOSTILE: torch.ones(8)}
    instance = show()
    view = instance.leftovers
    row = view.row("hostile_groups")
    click(row)
    assert "hostile_groups[" in row.body.value and "&lt;img" in row.body.value
    assert_escaped(html_of(view))
    weird = _group(HOSTILE)
    instance.refresh(_status(instance.last_status, [weird]))
    row = view.row(HOSTILE)
    # a ToggleButton's label and tooltip are text (a text node and a title), never HTML
    assert row.toggle.description == SHUT + HOSTILE and row.toggle.tooltip == HOSTILE
    click(row)
    assert_escaped(html_of(view))


def test_rows_are_core_widgets_that_fit_the_panel(run_cell, leftovers, torch):
    run_cell("import torch\n" + "n" * 200 + " = torch.ones(8)")
    view = leftovers()
    row = view.row("n" * 200)
    for widget in row.parts():
        assert widget._model_module == "@jupyter-widgets/controls", type(widget)
        assert widget.layout.margin in ("0", "0 8px 0 0")  # never past the panel's edge
    # the name's button shrinks and ellipsises; the full name is its tooltip
    assert row.toggle.layout.max_width == "50%" and row.toggle.layout.min_width == "0"
    assert row.toggle.tooltip == "n" * 200
    assert "cgg-group-toggle" in row.toggle._dom_classes
    assert "button.cgg-group-toggle{background:transparent" in view.head.value
