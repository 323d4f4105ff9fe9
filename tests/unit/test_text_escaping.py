"""Terminals are not an attack surface: a name the package did not write (a variable, an
NVML process or GPU name, a saved record's field) reaches every text view with its control
characters escaped (`units.escape_text`), while its record keeps the raw value."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from colab_gpu_guard import nvml, status
from colab_gpu_guard.advisor.diagnosis import Diagnosis
from colab_gpu_guard.cells.history_text import START_AFRESH, format_history, leak_text
from colab_gpu_guard.cells.tracker import CellMemory
from colab_gpu_guard.seeding import repro_diff, repro_record
from colab_gpu_guard.seeding.repro_parts import Gpu
from colab_gpu_guard.status.compact import compact_text
from colab_gpu_guard.units import escape_lines, escape_text
from tests import fake_pynvml
from tests.hostile_names import (
    ESCAPED,
    FAKE_ROW,
    HOSTILE,
    READABLE,
    TITLE_AND_CLEAR,
    hostile_world,
)

torch = pytest.importorskip("torch")

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]

# every character the escaper must never let through (a line's own "\n" aside)
CONTROLS = (
    [chr(c) for c in range(0x20) if c != 0x0A]
    + [chr(c) for c in range(0x7F, 0xA0)]
    + ["\u061c", "\u200e", "\u200f", "\u2028", "\u2029"]
    + [chr(c) for c in range(0x202A, 0x202F)]
    + [chr(c) for c in range(0x2066, 0x206A)]
)


def assert_safe(text: str, names=HOSTILE) -> None:
    """No control character but the view's own line ends; every hostile name escaped; no
    line a name started."""
    raw = sorted({repr(char) for char in text if char in CONTROLS})
    assert not raw, f"raw control characters {raw} in:\n{text}"
    assert not any(line.lstrip().startswith("b_fake_row") for line in text.splitlines()), text
    for name in names:
        assert ESCAPED[name] in text, f"{ESCAPED[name]!r} not in:\n{text}"


# ---------------------------------------------------------------- the escaper


@pytest.mark.parametrize("name", HOSTILE)
def test_escape_text_shows_each_control_character_escaped(name):
    assert escape_text(name) == ESCAPED[name]
    assert escape_text(escape_text(name)) == escape_text(name)  # safe to apply again


def test_escape_text_escapes_every_control_and_nothing_printable():
    for char in CONTROLS + ["\n"]:
        escaped = escape_text(char)
        assert escaped.startswith("\\") and escaped.isprintable(), (char, escaped)
    for text in (*READABLE, "Tesla T4", "Out[3]", "a\\x1b literal", "émoji 🙂", "tab\\t"):
        assert escape_text(text) == text
    assert escape_text("\t\n\r\x00\u2028\u2066") == r"\t\n\r\x00\u2028\u2066"


def test_escape_lines_keeps_its_own_line_ends():
    assert escape_lines(["one", FAKE_ROW, "three"]) == "one\n" + ESCAPED[FAKE_ROW] + "\nthree"


# ---------------------------------------------------------------- NVML names: %gpu_status, CLI


@pytest.fixture
def hostile_nvml():
    nvml.set_pynvml(fake_pynvml.install(hostile_world()))
    yield
    nvml.set_pynvml(None)


def test_gpu_status_text_escapes_process_and_gpu_names(hostile_nvml):
    snapshot = status.gpu_status(leftovers=False, process_limit=None)
    text = snapshot.to_text()
    assert_safe(text)
    assert "Tesla T4" + ESCAPED[TITLE_AND_CLEAR] in text
    for name in READABLE:
        assert name in text
    # the record keeps the raw names; JSON escapes them its own way
    names = {p.name for p in snapshot.nvml.devices[0].processes}
    assert set(HOSTILE) <= names
    assert set(HOSTILE) <= {
        p["name"] for p in json.loads(snapshot.to_json())["nvml"]["devices"][0]["processes"]
    }
    assert str(snapshot) == text


def test_panel_text_escapes_the_gpu_name(hostile_nvml):
    text = compact_text(status.gpu_status(leftovers=False))
    assert_safe(text, [TITLE_AND_CLEAR])


CHILD = """
import sys
from colab_gpu_guard import nvml
from colab_gpu_guard.__main__ import main
from tests import fake_pynvml
from tests.hostile_names import hostile_world
nvml.set_pynvml(fake_pynvml.install(hostile_world()))
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("args", [["status", "--processes"], ["status"]])
def test_cli_status_escapes_process_names(args):
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    out = done.stdout.decode("utf-8")
    assert b"\x1b" not in done.stdout and b"\x07" not in done.stdout and b"\r" not in done.stdout
    shown = HOSTILE if "--processes" in args else [TITLE_AND_CLEAR]  # the first 5 and the GPU
    assert_safe(out, shown)
    if "--processes" in args:
        for name in READABLE:
            assert name in out


def test_cli_status_json_keeps_raw_names_json_escaped():
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONIOENCODING="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", CHILD, "status", "--json", "--processes"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"\x1b" not in done.stdout  # JSON writes "\u001b"
    data = json.loads(done.stdout)
    assert set(HOSTILE) <= {p["name"] for p in data["nvml"]["devices"][0]["processes"]}


# ---------------------------------------------------------------- variable names: leftovers


def hostile_namespace() -> dict:
    names = HOSTILE + READABLE
    return {name: torch.zeros(1024 * (len(names) - n)) for n, name in enumerate(names)}


def test_leftovers_text_escapes_variable_names():
    found = find_leftovers(namespace=hostile_namespace())
    assert set(HOSTILE) <= {entry.name for entry in found}  # the records keep the raw name
    assert_safe(str(found))
    for name in READABLE:
        assert name in str(found)
    groups = found.groups()
    assert_safe(str(groups))
    for entry in found:
        assert_safe(str(entry), [name for name in HOSTILE if name == entry.name])
    for group in groups:
        assert_safe("\n".join(group.text_lines()), [n for n in HOSTILE if n == group.name])


def test_leftovers_text_escapes_a_view_shared_under_a_hostile_name():
    base = torch.zeros(100_000)
    found = find_leftovers(namespace={TITLE_AND_CLEAR: base, FAKE_ROW: base[:10]})
    assert_safe(str(found), [TITLE_AND_CLEAR, FAKE_ROW])
    for entry in found:
        assert_safe(str(entry), [TITLE_AND_CLEAR, FAKE_ROW])


def test_gpu_status_text_escapes_leftover_names(hostile_nvml):
    snapshot = status.gpu_status(namespace=hostile_namespace(), top=20)
    assert_safe(snapshot.to_text())
    # the records keep the raw names (a group is named for its root: the name before "[")
    assert {FAKE_ROW, "x\ry", "del\x7f"} <= {group.name for group in snapshot.leftover_groups}


# ---------------------------------------------------------------- %gpu_history, %repro, advisor


def test_history_leak_holders_are_escaped():
    held_by = ", ".join(f"`{name}` (grew by 1 item; {START_AFRESH})" for name in HOSTILE)
    record = CellMemory(
        3,
        0,
        0,
        0,
        0,
        0,
        None,
        True,
        2**20,
        0.5,
        rss_after=2**30,
        rerun_of=2,
        leak_kind="cpu",
        held_by=held_by,
    )
    assert_safe(leak_text(record))
    assert_safe(format_history([record]))
    assert record.held_by == held_by


def test_repro_text_escapes_gpu_names_labels_and_env():
    record = dataclasses.replace(
        repro_record(),
        gpus=tuple(Gpu(n, name, "8.0") for n, name in enumerate(HOSTILE)),
        label=TITLE_AND_CLEAR,
        env=(("CUBLAS_WORKSPACE_CONFIG", FAKE_ROW),),
        platform="Linux\x1b[2J",
    )
    assert_safe(record.to_text())
    assert_safe(record.to_text(verbose=True))
    assert record.gpus[1].name == FAKE_ROW
    saved = dataclasses.replace(record, gpus=(Gpu(0, FAKE_ROW, "8.0"),))
    here = dataclasses.replace(record, gpus=(Gpu(0, "重み", "9.0"),))
    text = str(repro_diff(saved, here, "модель.json"))
    assert_safe(text, [TITLE_AND_CLEAR, FAKE_ROW])
    assert "重み" in text and "модель.json" in text


def test_advisor_text_escapes_names_in_its_facts():
    diagnosis = Diagnosis(
        "out_of_memory",
        "CUDA ran out of memory",
        facts={"other processes": ", ".join(HOSTILE)},
        fixes=[f"stop {FAKE_ROW}"],
        notes=[TITLE_AND_CLEAR],
    )
    assert_safe(str(diagnosis))
    assert diagnosis.facts["other processes"].startswith(TITLE_AND_CLEAR)


def test_cli_failure_line_escapes_what_the_error_says(monkeypatch, capsys):
    from colab_gpu_guard.__main__ import main

    def broken(**kwargs):
        raise RuntimeError(f"no process {FAKE_ROW} {TITLE_AND_CLEAR}")

    monkeypatch.setattr(status, "gpu_status", broken)
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.endswith("\n")
    assert_safe(err, [FAKE_ROW, TITLE_AND_CLEAR])


# ---------------------------------------------------------------- %gpu_reset


@pytest.mark.parametrize("how", ["plain", "named", "all dry run"])
def test_reset_text_escapes_variable_names_still_held(how):
    from colab_gpu_guard.reset.apply import gpu_reset

    namespace = hostile_namespace()
    if how == "plain":
        report = gpu_reset(namespace=namespace)
    elif how == "named":
        report = gpu_reset("модель", namespace=namespace)
    else:
        report = gpu_reset(all_vars=True, dry_run=True, namespace=namespace)
    assert_safe(report.to_text())
    assert_safe(report.to_text(verbose=True))
    assert "модель" in report.to_text()
    assert FAKE_ROW in namespace and TITLE_AND_CLEAR in namespace  # only what was named went
