"""The default reports of %gpu_reset, %gpu_reset --dry-run, %seed_all and %repro, read as a
PyTorch user reads them: no word of `units.JARGON`, and every figure printed is the one the
report's own fields hold (the magics run for real in the IPython test shell; a spy keeps the
report each one printed)."""

from __future__ import annotations

import gc
import re
import weakref

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import seeding  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402
from colab_gpu_guard.units import format_bytes, jargon_in  # noqa: E402

N = 64 * 1024  # floats: 256 KiB a tensor
FAILING = f"""
def train():
    batch = torch.ones({N})
    refs['frame'] = weakref.ref(batch)
    raise ValueError("boom")
train()
"""


def spy(monkeypatch, module, name: str) -> list:
    """What each call of ``module.name`` returned, from now on in this test."""
    made: list = []
    real = getattr(module, name)

    def call(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(module, name, call)
    return made


def magic(ip, capsys, name: str, line: str = "") -> str:
    capsys.readouterr()
    ip.run_line_magic(name, line)
    return capsys.readouterr().out


@pytest.fixture
def notebook(shell, run_cell, capsys):
    """A tensor held only by the output history (Out[n], _), one only by a failed cell's
    traceback, and `keep`, a variable the user still holds."""
    result = run_cell(f"out_t = torch.ones({N}); refs['out'] = weakref.ref(out_t); out_t")
    assert result.error_in_exec is None
    number = shell.execution_count - 1
    run_cell("del out_t")
    assert run_cell(FAILING).error_in_exec is not None
    run_cell(f"keep = torch.zeros({2 * N})")
    capsys.readouterr()
    return shell, number


def test_gpu_reset_dry_run_then_reset_say_what_they_free_in_the_users_words(
    notebook, capsys, monkeypatch
):
    ip, number = notebook
    refs = ip.user_ns["refs"]
    made = spy(monkeypatch, reset, "gpu_reset")

    dry = magic(ip, capsys, "gpu_reset", "--dry-run")
    plan = made[-1]
    assert jargon_in(dry) == [], dry
    assert refs["out"]() is not None and refs["frame"]() is not None  # nothing changed
    assert dry.splitlines()[0] == "gpu_reset --dry-run (nothing changed)"
    assert f"would free about {format_bytes(plan.estimated_bytes)} of tensors" in dry
    assert plan.estimated_bytes >= 2 * N * 4  # the output's tensor and the frame's
    assert f"would drop: {', '.join(plan.dropped_counts())}" in dry
    assert f"Out[{number}]" in dry and "<" not in dry  # names a user types, no labels
    held = plan.held_groups()
    assert f"would still be held ({format_bytes(held.total_bytes)}):" in dry
    assert "to free that too: %gpu_reset keep (deletes that variable)" in dry

    done = magic(ip, capsys, "gpu_reset")
    report = made[-1]
    gc.collect()
    assert jargon_in(done) == [], done
    assert refs["out"]() is None and refs["frame"]() is None
    assert done.splitlines()[0] == "gpu_reset"
    assert f"freed: {format_bytes(report.released_bytes)} of tensors\n" in done
    assert report.released_bytes == report.estimated_bytes >= 2 * N * 4
    assert f"dropped: {', '.join(report.dropped_counts())}" in done
    assert report.dropped["traceback frames"] >= 1 and report.dropped["output history"] >= 1
    assert f"names: Out[{number}]" in done
    assert all(f"  {device.device}: allocated " in done for device in report.devices)
    host = report.host_line()
    assert host is None or f"  {host}\n" in done
    held = report.held_groups()
    assert f"still held ({format_bytes(held.total_bytes)}):" in done
    assert "keep" in done and "to free it: %gpu_reset keep (deletes that variable)" in done
    # the garbage collector's count is detail: -v (the API's to_text) only, in words
    assert report.gc_collected is not None
    assert "unreachable objects" not in done and "objects" not in done
    verbose = report.to_text(verbose=True)
    assert f"Python's garbage collector found {report.gc_collected} unreachable objects" in (
        verbose
    )
    assert f"expected to free: {format_bytes(report.estimated_bytes)}" in verbose
    assert jargon_in(verbose) == [], verbose
    page = report._repr_html_()
    assert f"freed: {format_bytes(report.released_bytes)} of tensors" in page
    shown = re.sub(r"<[^>]+>", " ", page)  # the words a reader sees, not class names
    assert jargon_in(shown) == [], shown


def test_seed_all_and_repro_defaults_and_verbose(ip, capsys, monkeypatch):
    seeded = spy(monkeypatch, seeding, "seed_all")
    out = magic(ip, capsys, "seed_all", "42")
    assert jargon_in(out) == [], out
    assert out.strip() == seeded[-1].summary() and out.startswith("seed 42: ")

    records = spy(monkeypatch, seeding, "repro_record")
    out = magic(ip, capsys, "repro")
    record = records[-1]
    assert jargon_in(out) == [], out
    assert out.splitlines() == record.summary()
    assert out.startswith("repro: seed 42\n")
    flags = record.torch_flags
    on = {True: "on", False: "off"}
    assert f"deterministic {on[flags.deterministic_algorithms]}, " in out
    assert f"cudnn.benchmark {on[flags.cudnn_benchmark]}, " in out

    out = magic(ip, capsys, "repro", "-v")
    record = records[-1]
    assert jargon_in(out) == [], out
    lines = out.splitlines()
    assert lines[: len(record.summary())] == record.summary()
    assert len(lines) <= 16, out  # what the settings mean in a few lines, not a dump
    conv, matmul = record.tf32_allowed()
    means = "may use TF32 (faster, ~1e-3 relative error)"
    full = "full float32 precision"
    assert f"  float32 matmuls on the GPU: {means if matmul else full}; set by " in out
    assert f"  float32 convolutions on the GPU: {means if conv else full}; set by " in out
    assert f"cudnn.deterministic {on[flags.cudnn_deterministic]}" in out
    assert f"  CPU threads: {torch.get_num_threads()} (torch.get_num_threads()" in out
    assert out.count("fp32_precision") <= 2  # the one setting that decides each line


def test_repro_verbose_follows_the_precision_settings(ip, capsys):
    """Set TF32 for matmuls and bfloat16 on the CPU: -v says what that means."""
    torch.set_float32_matmul_precision("medium")  # CUDA: TF32; oneDNN on the CPU: bf16
    try:
        out = magic(ip, capsys, "repro", "-v")
    finally:
        torch.set_float32_matmul_precision("highest")
        for leaf in ("cuda.matmul", "mkldnn.matmul"):
            owner = torch.backends
            for name in leaf.split("."):
                owner = getattr(owner, name)
            if hasattr(owner, "fp32_precision"):
                owner.fp32_precision = "none"  # torch's state at import
    assert jargon_in(out) == [], out
    assert "float32 matmuls on the GPU: may use TF32 (faster, ~1e-3 relative error)" in out
    if hasattr(torch.backends.mkldnn, "matmul"):  # torch >= 2.9: oneDNN's own setting
        assert "float32 matmuls on the CPU: may compute in bfloat16 inside oneDNN" in out


def test_reset_report_weakly_holds_nothing_it_reports(shell, run_cell, capsys):
    """The report lists what is still held by name; holding the report keeps no tensor
    alive (its leftovers are the scan's records, not the tensors)."""
    run_cell(f"kept = torch.ones({N})")
    report = reset.gpu_reset(shell=shell)
    tensor = weakref.ref(shell.user_ns["kept"])
    shell.user_ns.pop("kept")
    gc.collect()
    assert tensor() is None
    assert report.free_hint() == "to free it: %gpu_reset kept (deletes that variable)"


def test_a_reset_on_a_gpu_words_torchs_and_nvmls_figures():
    """What a GPU machine's report prints (no GPU here: the record as the reset fills it):
    torch's allocated and reserved per device and NVML's used memory, each as recorded."""
    from colab_gpu_guard.nvml import INCLUDES_RESERVED, V1
    from colab_gpu_guard.reset.report import DeviceRelease, ReleaseReport

    gib = 2**30
    report = ReleaseReport(
        dropped={"output history": 1, "output names": 2},
        dropped_names=["Out[3]", "_", "<displayhook._>"],
        estimated_bytes=2 * gib,
        released_bytes=gib,
        devices=[DeviceRelease("cuda:0", 3 * gib, 4 * gib, gib, gib)],
        nvml_used_before=[5 * gib],
        nvml_used_after=[2 * gib],
        nvml_used_call=V1,
        gc_collected=41,
        steps=["torch.cuda.empty_cache() (cuda:0: the devices with a CUDA context)"],
    )
    text = str(report)
    assert jargon_in(text) == [], text
    assert "  freed: 1 GiB of tensors, of 2 GiB expected\n" in text
    assert "  cuda:0: allocated 3 GiB -> 1 GiB, reserved 4 GiB -> 1 GiB\n" in text
    assert f"  GPU 0 (NVML, all processes): used 5 GiB -> 2 GiB ({INCLUDES_RESERVED})\n" in text
    assert "names: Out[3], _\n" in text and "41" not in text
    assert "  done: torch.cuda.empty_cache()" in text
    verbose = report.to_text(verbose=True)
    assert "Python's garbage collector found 41 unreachable objects" in verbose
    assert "also dropped: 1 reference IPython or Python keeps on its own" in verbose
    assert report.to_dict()["freed_bytes"] == 2 * gib  # the JSON keeps its fields
