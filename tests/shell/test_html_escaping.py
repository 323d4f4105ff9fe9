"""HTML is not an attack surface either: a name the package did not write (a variable, a
dict key, an NVML process or GPU name, a path, an exception's message) reaches every HTML
view - element text, ``title`` tooltips, SVG text, the panel's widgets and their static
copy - with its control characters shown escaped as the text views show them
(`units.escape_text`) and its markup escaped (`units.escape_html`, the one helper).

Each view is fed the same hostile name through a real object: the real shell's namespace,
the fake NVML's GPU and process names (tests/fake_pynvml.py), a real cell's error; a
record is made by hand only where no real path can carry the name here (a seeding
framework's failure, an RNG stream that could not be captured)."""

from __future__ import annotations

import dataclasses
import html
import os
import unicodedata

import pytest
from IPython.utils.capture import capture_output

from colab_gpu_guard import cuda_health, nvml
from colab_gpu_guard.units import escape_html, escape_text
from tests import fake_pynvml

torch = pytest.importorskip("torch")

# An ESC sequence that retitles a terminal, a BEL, a newline that would start a line, markup,
# and a bidi override that reorders what follows.
HOSTILE = "a\x1b]0;pwn\x07\n<b>x</b>\u202e"
SHOWN = html.escape(escape_text(HOSTILE), quote=True)  # a\x1b]0;pwn\x07\n&lt;b&gt;...
# a process's name as NVML's reader keeps it (the path's last part: no "/")
PROCESS = "p\x1b]0;pwn\x07\n<b>y\u202e"
PROCESS_SHOWN = html.escape(escape_text(PROCESS), quote=True)
BIDI = {"\u061c", "\u200e", "\u200f", "\u2028", "\u2029"}
BIDI |= {chr(c) for c in range(0x202A, 0x202F)} | {chr(c) for c in range(0x2066, 0x206A)}


def raw_controls(page: str) -> list[str]:
    """Control characters (category Cc, the bidi controls, the line separators) the page
    carries raw: a view's own line ends inside ``<pre>`` aside."""
    return sorted(
        {repr(c) for c in page if (unicodedata.category(c) == "Cc" and c != "\n") or c in BIDI}
    )


def assert_safe(page: str, *shown: str) -> None:
    """No raw control character, no markup of the name's, and each of `shown` in the page
    (by default the hostile variable's name, escaped)."""
    assert not raw_controls(page), f"raw control characters {raw_controls(page)} in:\n{page}"
    assert "<b>x" not in page and "<b>y" not in page, page
    for text in shown or (SHOWN,):
        assert text in page, f"{text!r} not in:\n{page}"


def test_escape_html_escapes_controls_visibly_and_markup():
    assert escape_html(HOSTILE) == r"a\x1b]0;pwn\x07\n&lt;b&gt;x&lt;/b&gt;\u202e"
    assert escape_html("\"q\" & 's'") == "&quot;q&quot; &amp; &#x27;s&#x27;"
    assert escape_html("модель 重み") == "модель 重み"  # printable text unchanged
    assert escape_html(42) == "42"
    # a block keeps its own line ends (a <pre>); a name inside a line cannot add one
    assert escape_html("one\ntwo\x1b", lines=True) == "one\ntwo\\x1b"


# ---------------------------------------------------------------- the hostile machine


def hostile_world() -> fake_pynvml.FakeWorld:
    world = fake_pynvml.one_gpu()
    world.gpus[0].name = HOSTILE
    world.gpus[0].processes[0].name = PROCESS
    return world


@pytest.fixture
def hostile(shell):
    """The real shell with a variable named HOSTILE and a dict keyed by it holding tensors,
    and NVML answering with a GPU and a process of that name."""
    nvml.set_pynvml(fake_pynvml.install(hostile_world()))
    shell.user_ns[HOSTILE] = torch.ones(64_000)
    shell.user_ns["hostile_holder"] = {HOSTILE: torch.ones(32_000)}
    yield shell
    for name in (HOSTILE, "hostile_holder"):
        shell.user_ns.pop(name, None)
    nvml.set_pynvml(None)
    cuda_health.clear()


def displayed(shell, line: str) -> str:
    """The HTML that running `line` displays."""
    with capture_output() as captured:
        result = shell.run_cell(line, store_history=False)
    assert result.error_in_exec is None, result.error_in_exec
    pages = [output.data["text/html"] for output in captured.outputs if "text/html" in output.data]
    assert pages, captured.stdout
    return "".join(pages)


# ---------------------------------------------------------------- every HTML view


def status_page(shell, tmp_path, monkeypatch) -> str:
    return displayed(shell, "%gpu_status --processes")


def leftovers_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.leftovers import find_leftovers

    found = find_leftovers(shell=shell)
    assert HOSTILE in {entry.name for entry in found}  # the record keeps the raw name
    return found._repr_html_()


def leftovers_table_page(shell, tmp_path, monkeypatch) -> str:
    """The flat table (the status snapshot's entries use it too): names, tooltips."""
    from colab_gpu_guard.leftovers import find_leftovers
    from colab_gpu_guard.leftovers.html import leftovers_html

    found = find_leftovers(shell=shell)
    return leftovers_html(found, notes=[HOSTILE])


def groups_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.leftovers import find_leftovers

    groups = find_leftovers(shell=shell).groups()
    return groups._repr_html_() + dataclasses.replace(groups, notes=(HOSTILE,))._repr_html_()


def reset_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.reset.apply import gpu_reset

    report = gpu_reset(shell=shell)  # names what is still held: the hostile variable
    assert HOSTILE in shell.user_ns
    return report._repr_html_()


def seed_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.seeding import seed_all
    from colab_gpu_guard.seeding.report import SkippedRng

    report = seed_all(3)  # a framework whose seeding failed says why in its own words
    report.skipped.append(SkippedRng(HOSTILE, f"could not be seeded: {HOSTILE}"))
    report.notes.append(HOSTILE)
    return report._repr_html_()


def rng_state_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.seeding import rng_state

    state = rng_state(generators={HOSTILE: torch.Generator()})  # named by its repr
    return dataclasses.replace(state, not_captured=((HOSTILE, HOSTILE),))._repr_html_()


def repro_page(shell, tmp_path, monkeypatch) -> str:
    return displayed(shell, "%repro") + displayed(shell, "%repro -v")


def repro_diff_page(shell, tmp_path, monkeypatch) -> str:
    saved = tmp_path / "run.json"
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))  # saved on a plain T4
    with capture_output():
        shell.run_cell(f"%repro --save {saved}", store_history=False)
    nvml.set_pynvml(fake_pynvml.install(hostile_world()))
    return displayed(shell, f"%repro --diff {saved}")


def advisor_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.ipython import shell_advisor

    monkeypatch.setattr(shell_advisor, "is_notebook_shell", lambda shell: True)
    message = "CUDA error: all CUDA-capable devices are busy or unavailable"
    with capture_output() as captured:
        shell.run_cell(f"raise RuntimeError({message!r})", store_history=True)
    pages = [o.data["text/html"] for o in captured.outputs if "text/html" in o.data]
    assert len(pages) == 1, captured.stdout
    assert "other GPU processes" in pages[0], pages[0]  # named as NVML names them
    return pages[0]


def trace_page(shell, tmp_path, monkeypatch) -> str:
    from colab_gpu_guard.trace.recording import Recorder, link_names
    from tests.trace_allocator import Allocator, frames

    kept = [torch.ones(4096), torch.ones(2048)]
    a = Allocator()
    a.alloc(5 << 20, frames((f"/tmp/{HOSTILE}.py", 1, HOSTILE)))
    a.alloc(1 << 20, frames((f"/tmp/{HOSTILE}.py", 2, "f")))
    recorder = Recorder(torch=None, max_entries=100_000, shell=shell)
    recorder.mode, recorder.before = "own", []
    report = recorder.analyse(a.snapshot())
    trace = report.devices[0]
    line = dataclasses.replace(
        trace.kept[0], addresses=tuple(t.untyped_storage().data_ptr() for t in kept)
    )
    report = dataclasses.replace(report, devices=(dataclasses.replace(trace, kept=(line,)),))
    linked = link_names(report, requested=True, namespace={HOSTILE: kept}, device_type="cpu")
    unavailable = dataclasses.replace(report, devices=(), unavailable=HOSTILE)
    page = linked._repr_html_() + unavailable._repr_html_()
    assert "<svg" in page  # the timeline's labels are in it
    return page


# what each view shows besides the hostile variable's name (or instead of it)
SHOWS = {
    "gpu_status": (SHOWN, PROCESS_SHOWN),
    "repro": (SHOWN,),  # the GPU's name
    "repro diff": (SHOWN,),
    "advisor": (PROCESS_SHOWN,),
    "gpu_trace": (html.escape(escape_text(HOSTILE + "[0]"), quote=True), SHOWN),
}

VIEWS = {
    "gpu_status": status_page,
    "leftovers": leftovers_page,
    "leftovers table": leftovers_table_page,
    "leftover groups": groups_page,
    "gpu_reset": reset_page,
    "seed_all": seed_page,
    "rng state": rng_state_page,
    "repro": repro_page,
    "repro diff": repro_diff_page,
    "advisor": advisor_page,
    "gpu_trace": trace_page,
}


@pytest.mark.parametrize("view", VIEWS)
def test_every_html_view_escapes_control_characters_and_markup(
    hostile, tmp_path, monkeypatch, view
):
    page = VIEWS[view](hostile, tmp_path, monkeypatch)
    assert_safe(page, *SHOWS.get(view, (SHOWN,)))


# ---------------------------------------------------------------- the panel


@pytest.fixture
def panel_shell(hostile):
    pytest.importorskip("ipywidgets")
    from colab_gpu_guard.ipython import panel as panel_module

    yield hostile
    for instance in list(panel_module._panels.values()):
        instance.close()
    panel_module._panels.clear()


def test_the_panel_its_static_copy_and_messages_escape_names(panel_shell, monkeypatch):
    from colab_gpu_guard.ipython import panel as panel_module
    from colab_gpu_guard.status import chart, panel_html
    from tests.panel_widgets import all_widgets, html_of, open_sections
    from tests.records import cell_memory

    shell = panel_shell
    cuda_health.mark_broken(HOSTILE)  # the header's badge tooltip says why
    with capture_output() as captured:
        result = shell.run_cell("%gpu_panel", store_history=True)
    assert result.error_in_exec is None, result.error_in_exec
    instance = open_sections(panel_module.current_panel(shell))
    for row in instance.leftovers.rows:  # open every leftovers group, as a user would
        row.toggle.value = True
    page = html_of(instance)
    assert_safe(page, SHOWN, PROCESS_SHOWN)
    # the groups' toggles: plain text (a description and a tooltip), escaped as text is
    words = [
        text
        for widget in all_widgets(instance)
        for text in (getattr(widget, "description", ""), getattr(widget, "tooltip", "") or "")
    ]
    assert not raw_controls("".join(words)), words
    assert escape_text(HOSTILE) in "".join(words)
    # the static copy a renderer without widgets shows, as displayed
    static = [o.data["text/html"] for o in captured.outputs if "text/html" in o.data]
    assert_safe("".join(static) + instance.snapshot_html())
    # an action's failure, in its line and its tooltip
    assert_safe(panel_html.render_message("error", HOSTILE, HOSTILE))
    # the history: a rerun whose memory a hostile name kept
    record = cell_memory(
        cell=3,
        allocated_after=1 << 30,
        peak=2 << 30,
        rerun_leak=True,
        leak_bytes=1 << 20,
        rss_after=1 << 30,
        rerun_of=2,
        leak_kind="cpu",
        held_by=f"`{HOSTILE}` (grew by 1)",
    )
    status = dataclasses.replace(instance.last_status, history=(record,))
    assert_safe(chart.render_history(status))


def test_the_panel_without_widgets_escapes_names(hostile):
    from colab_gpu_guard.ipython.panel.missing import NEEDS_WIDGETS, unavailable_panel

    report = unavailable_panel(hostile, NEEDS_WIDGETS)
    assert_safe(report._repr_html_())
    assert not raw_controls(str(report))


def test_the_hostile_names_reach_the_records_raw(hostile):
    """The views escape; the records (and JSON) keep what NVML and the namespace said."""
    from colab_gpu_guard import status

    snapshot = status.gpu_status(namespace=hostile.user_ns)
    assert snapshot.nvml.devices[0].name == HOSTILE
    assert PROCESS in {p.name for p in snapshot.nvml.devices[0].processes}
    assert os.getpid() in {p.pid for p in snapshot.nvml.devices[0].processes}
