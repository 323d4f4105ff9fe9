"""What `%repro --diff` and `python -m colab_gpu_guard repro` say, checked against what really
happens: torch's real settings and their measured effect, real files, a real shell and a real
subprocess."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import repro_diff, repro_record  # noqa: E402
from colab_gpu_guard.seeding.repro_parts import REPRO_ENV, Gpu  # noqa: E402
from tests.child import fork_python  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
A100 = Gpu(0, "NVIDIA A100-SXM4-40GB", "8.0", 40 * 2**30)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    for name in REPRO_ENV + ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    precision = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(precision)


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "colab_gpu_guard", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def cli_forked(*args: str) -> subprocess.CompletedProcess:
    """`cli(*args)` in a fresh torch forked, not started (tests.child.fork_python): for
    what the CLI says of a file; what it says of its own process is asked of `cli`."""
    code = "import sys\nfrom colab_gpu_guard.__main__ import main\nsys.exit(main(sys.argv[1:]))"
    return fork_python(code, args=args)


def saved_record(tmp_path: Path, **changes) -> Path:
    record = dataclasses.replace(repro_record(), **changes)
    path = tmp_path / "run.json"
    path.write_text(record.to_json())
    return path


# ---------------------------------------------------------------- precision on the CPU


def test_medium_precision_is_reported_as_the_cpu_bf16_change_it_is():
    torch.set_float32_matmul_precision("highest")
    torch.manual_seed(0)  # before the first record: this test alone in a process passes too
    before = repro_record()
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    full = a @ b
    torch.set_float32_matmul_precision("medium")
    reduced = a @ b
    after = repro_record()
    assert after.gpus == () or torch.cuda.is_available()
    diff = repro_diff(dataclasses.replace(before, gpus=()), dataclasses.replace(after, gpus=()))
    changing = {d.what: d for d in diff.differences}
    # set_float32_matmul_precision("medium") sets oneDNN's matmul to bf16 (ATen Context.cpp)
    assert torch.backends.mkldnn.matmul.fp32_precision == "bf16"
    # one set_float32_matmul_precision call, one entry (it wrote the mkldnn leaf with it)
    assert [d.what for d in diff.differences + diff.other] == ["torch float32_matmul_precision"]
    assert after.cpu.bf16 is torch.ops.mkldnn._is_mkldnn_bf16_supported()
    if after.cpu.bf16:  # this CPU runs oneDNN in bf16: a change of result
        entry = changing["torch float32_matmul_precision"]
        assert "CPU float32 matmuls may run in bfloat16 on both runs' CPUs" in entry.explanation
        assert "oneDNN may run CPU float32 matmuls in bf16" in entry.detail
    else:
        assert diff.differences == () and "neither record's CPU has" in diff.other[0].detail
    if not torch.equal(full, reduced):
        relative = ((reduced - full).abs().max() / full.abs().mean()).item()
        # bf16 products: "relative differences around 1e-2"; some CPUs with avx512_bf16 (seen
        # on this project's machines) take another float32 kernel instead, whose differences
        # are float32 reordering (3e-6): a change of result all the same, as the record says
        assert relative < 1e-4 or 1e-3 < relative < 1e-1, relative


def test_none_and_ieee_are_the_same_precision():
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.fp32_precision = "none"  # torch's state at import
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    before = repro_record()
    assert (
        dict(before.torch_flags.fp32_precision)["torch.backends.mkldnn.matmul.fp32_precision"]
        == "none"
    )
    torch.set_float32_matmul_precision("highest")  # writes "ieee" where "none" was read
    diff = repro_diff(before, repro_record())
    shown = [d.what for d in diff.differences + diff.other]
    assert not any("fp32_precision" in what for what in shown), shown


# ---------------------------------------------------------------- versions


@pytest.mark.skipif(torch.version.cuda is not None, reason="needs a torch built without CUDA")
def test_a_cpu_build_has_no_cuda_rather_than_an_unset_one():
    now = dataclasses.replace(repro_record(), gpus=())
    versions = dataclasses.replace(now.versions, cuda_runtime="12.1", cudnn="9.1.0")
    # the saved run had a GPU (and its driver): it ran CUDA, this one cannot
    gpu = Gpu(0, "Tesla T4", "7.5", 15 * 2**30)
    saved = dataclasses.replace(
        now, versions=dataclasses.replace(versions, driver="550.54"), gpus=(gpu,)
    )
    found = {d.what: str(d) for d in repro_diff(saved, now).differences}
    assert found["CUDA runtime"] == (
        "CUDA runtime 12.1 → none: a torch without CUDA runs every op on the CPU"
    )
    assert found["cuDNN"].startswith("cuDNN 9.1.0 → none: a torch without cuDNN")
    # a CUDA torch on a machine without a GPU or driver ran every op on the CPU too
    diff = repro_diff(dataclasses.replace(now, versions=versions), now)
    other = {d.what: d for d in diff.other}
    assert not {"CUDA runtime", "cuDNN"} & {d.what for d in diff.differences}
    assert other["CUDA runtime"].explanation.endswith("every op ran on the CPU in both")


def test_the_note_names_the_record_taken_without_torch():
    now = repro_record()
    saved = dataclasses.replace(now, versions=dataclasses.replace(now.versions, torch=None))
    assert repro_diff(saved, now).notes == (
        "torch was not imported when the saved record was taken: torch's version and flags "
        "were not compared (import torch before taking the record)",
    )


# ---------------------------------------------------------------- bad files


def test_magic_names_a_malformed_pair_instead_of_a_traceback(ip, tmp_path):
    from IPython.core.error import UsageError

    path = saved_record(tmp_path)
    data = json.loads(path.read_text())
    data["env"] = [["PYTHONHASHSEED"]]
    path.write_text(json.dumps(data))
    with pytest.raises(
        UsageError, match=r"env: expected \[name, value\] pairs, got \['PYTHONHASHSEED'\]"
    ):
        ip.run_line_magic("repro", f"--diff {path}")


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(frameworks=[["NumPy"]]), "frameworks: expected \\[name, value\\]"),
        (lambda d: d.update(schema_version=2), "newer colab_gpu_guard \\(schema_version 2"),
        (lambda d: d.update(schema_version=None), "expected schema_version 1, found None"),
    ],
)
def test_cli_names_what_is_wrong_with_the_file(tmp_path, edit, message):
    path = saved_record(tmp_path)
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    done = cli_forked("repro", "--diff", str(path))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"python -m colab_gpu_guard repro: error: {str(path)!r}")
    assert re.search(message, done.stderr), done.stderr
    assert "%repro --save FILE or `python -m colab_gpu_guard repro --json` writes" in done.stderr


def test_cli_not_json_says_what_a_record_is(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("not json")
    done = cli_forked("repro", "--diff", str(path))
    assert done.returncode == 2
    assert "is not JSON: Expecting value at line 1 (a record is the JSON that" in done.stderr


# ---------------------------------------------------------------- the CLI's own process


def test_cli_record_says_it_is_no_programs_state(tmp_path):
    done = cli("repro")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == (
        "repro: not seeded with seed_all  [this command's own process: no program's seeds "
        "or torch flags]"
    )


def test_cli_diff_compares_the_machine_not_its_own_seeds_and_flags(tmp_path):
    now = repro_record()
    flags = dataclasses.replace(now.torch_flags, deterministic_algorithms=True)
    path = saved_record(
        tmp_path,
        seeding=dataclasses.replace(now.seeding, seed=42),
        torch_flags=flags,
        env=(("PYTHONHASHSEED", "42"), ("OMP_NUM_THREADS", "4")),
    )
    done = cli("repro", "--diff", str(path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "1 difference that can change results" in out
    assert "1. OMP_NUM_THREADS 4 → unset" in out
    assert "seed 42" not in out and "deterministic_algorithms" not in out
    assert "PYTHONHASHSEED" not in out  # seed_all(42) sets it in the program
    assert "note: seeds and torch flags are set by the program that runs" in out


def test_tf32_override_variable_is_only_torchs_starting_precision(monkeypatch):
    # ATen's Context.h reads it once, as float32_matmul_precision's initial value: a later
    # set_float32_matmul_precision("highest") turns TF32 matmuls off (measured here)
    code = (
        "import torch; torch.set_float32_matmul_precision('highest'); "
        "print(torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision())"
    )
    env = dict(os.environ, TORCH_ALLOW_TF32_CUBLAS_OVERRIDE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.split() == ["False", "highest"], done.stderr
    monkeypatch.setenv("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "1")
    torch.set_float32_matmul_precision("highest")
    record = dataclasses.replace(repro_record(), gpus=(A100,), gpu_note=None)
    assert record.tf32() == (torch.backends.cudnn.allow_tf32, False)
    assert "(TF32 matmuls on Ampere or newer) until the program sets another" in str(
        repro_diff(dataclasses.replace(record, env=()), record).differences[0]
    )


def test_cli_help_shows_the_magic_as_typed():
    done = cli("repro", "--help")
    assert done.returncode == 0
    text = " ".join(done.stdout.split())
    assert "%%" not in text and "or %repro inside it" in text
    assert "not seeds or torch flags, which only the program knows" in text


def test_an_unrecorded_seed_is_not_called_unreproducible():
    # torch.manual_seed(42) seeds reproducibly but leaves nothing a record can read
    now = repro_record()
    seeded = dataclasses.replace(now, seeding=dataclasses.replace(now.seeding, seed=42))
    unseeded = dataclasses.replace(now, seeding=dataclasses.replace(now.seeding, seed=None))
    for before, after, run in (
        (seeded, unseeded, "this process"),
        (unseeded, seeded, "the saved run"),
    ):
        seed = next(d for d in repro_diff(before, after).differences if d.what == "seed")
        assert seed.explanation == (
            f"{run} was not seeded with seed_all: Python's and NumPy's draws may differ "
            "(seeds set another way are recorded for torch only); torch's generator holds "
            "the same seed in both"
        )


def test_magic_takes_a_quoted_path_with_spaces_and_a_tilde(ip, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "my runs"
    folder.mkdir()
    ip.run_line_magic("repro", f'--save "{folder}/run 1.json"')
    assert (folder / "run 1.json").exists()
    monkeypatch.setenv("HOME", str(folder))
    capsys.readouterr()
    ip.run_line_magic("repro", "--diff '~/run 1.json'")
    assert f"repro diff: {folder}/run 1.json → this kernel" in capsys.readouterr().out


def test_cpu_threads_are_recorded_and_a_change_is_one_that_changes_results():
    """torch.get_num_threads() decides the order CPU reductions add in: with 1 and 2
    threads a 10^7-element sum differs in the last bits here. The record has the count, and
    a diff of it says so; a record without the field (older) compares nothing."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = repro_record()
        torch.manual_seed(0)
        x = torch.randn(10_000_000)
        single = x.sum().item()
        torch.set_num_threads(2)
        two = repro_record()
        double = x.sum().item()
    finally:
        torch.set_num_threads(threads)
    assert (one.torch_flags.cpu_threads, two.torch_flags.cpu_threads) == (1, 2)
    found = {d.what: d for d in repro_diff(one, two).differences}
    change = found["torch cpu_threads"]
    assert (change.before, change.after, change.changes_results) == ("1", "2", True)
    assert "torch.set_num_threads(N) in both runs" in change.explanation
    if torch.get_num_threads() > 1 and single != double:  # the effect the text claims
        assert abs(single - double) < 1e-3 * abs(single) + 1e-2
    older = dataclasses.replace(
        one, torch_flags=dataclasses.replace(one.torch_flags, cpu_threads=None)
    )
    assert "torch cpu_threads" not in {d.what for d in repro_diff(older, two).differences}
    saved = json.loads(one.to_json())
    del saved["torch_flags"]["cpu_threads"]  # a record written before the field existed
    from colab_gpu_guard.seeding.repro import ReproRecord

    assert ReproRecord.from_dict(saved).torch_flags.cpu_threads is None
