"""The reproducibility record (every field against the real value it claims) and its diff
(each explanation against the records' real values)."""

from __future__ import annotations

import csv
import dataclasses
import json
import platform
import shutil
import subprocess

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")
jsonschema = pytest.importorskip("jsonschema")

from colab_gpu_guard import nvml, repro_diff, repro_record, seed_all  # noqa: E402
from colab_gpu_guard.seeding.repro import ReproRecord, json_schema  # noqa: E402
from colab_gpu_guard.seeding.repro_parts import REPRO_ENV, SCHEMA_VERSION, Gpu  # noqa: E402
from tests import fake_pynvml  # noqa: E402

A100 = Gpu(0, "NVIDIA A100-SXM4-40GB", "8.0", 40 * 2**30)
T4 = Gpu(0, "Tesla T4", "7.5", 15 * 2**30)


@pytest.fixture(autouse=True)
def clean_state(monkeypatch):
    for name in REPRO_ENV + ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    benchmark, precision = torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision()
    yield
    torch.backends.cudnn.benchmark = benchmark
    torch.set_float32_matmul_precision(precision)
    nvml.set_pynvml(None)


def with_gpus(record: ReproRecord, *gpus: Gpu) -> ReproRecord:
    return dataclasses.replace(record, gpus=gpus, gpu_note=None)


# ---------------------------------------------------------------- the record


def test_record_reads_the_real_flags_versions_and_seeds(monkeypatch):
    seed_all(42)
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("high")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    record = repro_record(every_cell=7)

    assert record.seeding.seed == 42 and record.seeding.every_cell == 7
    flags = record.torch_flags
    assert flags.deterministic_algorithms is torch.are_deterministic_algorithms_enabled()
    assert flags.cudnn_benchmark is True
    assert flags.cudnn_deterministic is torch.backends.cudnn.deterministic
    assert flags.float32_matmul_precision == "high"
    assert flags.matmul_allow_tf32 is torch.backends.cuda.matmul.allow_tf32 is True
    assert flags.cudnn_allow_tf32 is torch.backends.cudnn.allow_tf32
    conv = dict(flags.fp32_precision)["torch.backends.cudnn.conv.fp32_precision"]
    assert conv == torch.backends.cudnn.conv.fp32_precision
    assert record.env_value("CUBLAS_WORKSPACE_CONFIG") == ":4096:8"
    assert record.env_value("PYTHONHASHSEED") == "42"  # seed_all set it
    assert record.env_value("CUDA_LAUNCH_BLOCKING") is None

    versions = record.versions
    assert versions.python == platform.python_version()
    assert versions.numpy == np.__version__
    assert versions.torch == torch.__version__
    assert versions.cuda_runtime == torch.version.cuda
    assert ("PyTorch", torch.__version__) in record.frameworks
    assert record.distributed.world_size == 1 and record.distributed.rank == 0


def test_short_text_says_what_it_read():
    seed_all(5)
    torch.backends.cudnn.benchmark = True
    text = str(repro_record())
    assert text.splitlines()[0] == "repro: seed 5"
    assert f"torch {torch.__version__}" in text
    assert "cudnn.benchmark on" in text
    assert len(text.splitlines()) <= 4
    full = repro_record().to_text(verbose=True)
    assert f"NumPy {np.__version__}" in full and "env PYTHONHASHSEED=5" in full


def test_ranks_from_the_environment(monkeypatch):
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    d = repro_record().distributed
    assert (d.world_size, d.rank, d.local_rank, d.source) == (4, 3, 1, "environment")
    assert "rank 3 of 4 (environment)" in str(repro_record())


def test_gpus_and_driver_come_from_nvml():
    world = fake_pynvml.FakeWorld(
        gpus=[fake_pynvml.FakeGpu(), fake_pynvml.FakeGpu(name="NVIDIA L4", capability=(8, 9))]
    )
    nvml.set_pynvml(fake_pynvml.install(world))
    record = repro_record()
    assert [(g.name, g.compute_capability) for g in record.gpus] == [
        ("Tesla T4", "7.5"),
        ("NVIDIA L4", "8.9"),
    ]
    assert record.versions.driver == world.driver_version
    assert record.versions.cuda_driver == "12.4"
    assert "GPUs: Tesla T4 (sm_75), NVIDIA L4 (sm_89)" in str(record)


def test_without_a_gpu_the_record_says_why():
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.FakeWorld()))
    record = repro_record()
    assert record.gpus == () and record.gpu_note == "no GPU listed: NVML sees none"
    assert record.tf32() == (None, None)
    assert "TF32 not used (no GPU listed)" in str(record)  # not used, rather than "unknown"


def test_json_round_trip_and_schema():
    seed_all(1)
    record = repro_record(every_cell=1)
    data = json.loads(record.to_json())
    jsonschema.validate(data, json_schema())
    assert ReproRecord.from_json(record.to_json()) == record
    assert data["schema_version"] == SCHEMA_VERSION
    with pytest.raises(ValueError, match="newer colab_gpu_guard .schema_version 99; this one"):
        ReproRecord.from_dict(dict(data, schema_version=99))
    with pytest.raises(ValueError, match="expected schema_version 1, found '1'"):
        ReproRecord.from_dict(dict(data, schema_version="1"))
    with pytest.raises(ValueError, match="expected a JSON object, got list"):
        ReproRecord.from_dict([])


def test_tf32_follows_gpu_generation_and_flags(monkeypatch):
    torch.set_float32_matmul_precision("highest")
    record = repro_record()
    assert torch.backends.cudnn.allow_tf32  # torch's default
    assert with_gpus(record, A100).tf32() == (True, False)
    assert with_gpus(record, T4).tf32() == (False, False)
    torch.set_float32_matmul_precision("high")
    assert with_gpus(repro_record(), A100).tf32() == (True, True)
    monkeypatch.setenv("NVIDIA_TF32_OVERRIDE", "0")
    assert with_gpus(repro_record(), A100).tf32() == (False, False)


def test_committed_example_record_reads_and_is_labelled():
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "notebooks" / "example_repro_a100.json"
    example = ReproRecord.from_json(path.read_text())
    jsonschema.validate(json.loads(path.read_text()), json_schema())
    assert "example" in example.label.lower()
    assert example.gpus[0].compute_capability == "8.0"
    assert example.tf32() == (True, True)


def test_the_hash_seed_line_says_whose_str_hashes_it_seeds():
    """seed_all puts PYTHONHASHSEED in the environment for new processes; this process's own
    str hashes were fixed when it started. The -v line says both, checked against a child
    process that reads the value (its hashes differ from this process's)."""
    import os
    import sys

    from colab_gpu_guard.seeding import hash_seed

    seed_all(42)
    record = repro_record()
    kernel = hash_seed.hash_seed_at_start().seed
    assert record.seeding.kernel_hash_seed == kernel
    assert ReproRecord.from_json(record.to_json()) == record
    child = subprocess.run(
        [sys.executable, "-c", "print(hash('colab_gpu_guard'))"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=60,
    )
    assert os.environ["PYTHONHASHSEED"] == "42" and child.returncode == 0
    if kernel == "random":  # no PYTHONHASHSEED when this process started (pytest's default)
        assert int(child.stdout) != hash("colab_gpu_guard")  # 42 seeds the child, not us
        assert (
            "  env PYTHONHASHSEED=42 (for new processes; this process's str hashes stay "
            "random, as set when it started)"
        ) in record.to_text(verbose=True).splitlines()
    seeded = dataclasses.replace(
        record, seeding=dataclasses.replace(record.seeding, kernel_hash_seed="7")
    )
    assert "this process's str hashes stay seeded with 7, as set" in seeded.to_text(True)
    same = dataclasses.replace(
        record, seeding=dataclasses.replace(record.seeding, kernel_hash_seed="42")
    )
    assert "env PYTHONHASHSEED=42 (this process started with it too: its str hashes use it)" in (
        same.to_text(True)
    )
    # a record saved before the field was kept still loads, and says it was not recorded
    data = json.loads(record.to_json())
    del data["seeding"]["kernel_hash_seed"]
    old = ReproRecord.from_dict(data)
    assert old.seeding.kernel_hash_seed is None
    assert "this process's own was not recorded)" in old.to_text(True)
    assert repro_diff(old, record).differences == repro_diff(record, record).differences


# ---------------------------------------------------------------- the diff


def test_t4_to_a100_explains_tf32_convolutions_first():
    seed_all(42)
    torch.set_float32_matmul_precision("highest")
    now = repro_record()
    saved = with_gpus(
        dataclasses.replace(now, seeding=dataclasses.replace(now.seeding, seed=7)), T4
    )
    diff = repro_diff(saved, with_gpus(now, A100), "t4.json")
    first = diff.differences[0]
    assert str(first) == (
        "GPU Tesla T4 (sm_75) → NVIDIA A100-SXM4-40GB (sm_80): cuDNN convolutions now use "
        "TF32 (allow_tf32=True): expect relative differences around 1e-3; run with %seed_all "
        "--strict to rule it out"
    )
    assert [d.what for d in diff.differences] == ["GPU", "seed"]
    assert str(diff).startswith("repro diff: t4.json → this process: 2 differences")
    assert diff.to_dict()["differences"][1]["before"] == "7"


def test_same_gpu_different_precision(monkeypatch):
    torch.set_float32_matmul_precision("highest")
    before = repro_record()
    torch.set_float32_matmul_precision("high")
    after = repro_record()
    on_a100 = repro_diff(with_gpus(before, A100), with_gpus(after, A100))
    # one set_float32_matmul_precision call is one entry: what it wrote besides itself
    # (allow_tf32, the cuda and mkldnn matmul fp32_precision leaves) is folded into it
    assert [(d.what, d.before, d.after) for d in on_a100.differences + on_a100.other] == [
        ("torch float32_matmul_precision", "highest", "high")
    ]
    assert "--strict to rule it out" in on_a100.differences[0].explanation
    on_t4 = repro_diff(with_gpus(before, T4), with_gpus(after, T4))
    # "high" also sets oneDNN's CPU matmuls to TF32 (ATen Context.cpp), which runs only on
    # CPUs with AMX-FP16 (mkldnn/Matmul.cpp): judged by the recorded CPU
    (entry,) = on_t4.differences + on_t4.other
    assert "no effect on these GPUs" in entry.explanation
    amx = torch.cpu._is_amx_fp16_supported()
    assert before.cpu.tf32 is amx and entry.changes_results is amx
    assert ("AMX-FP16" in entry.detail) and (
        ("which neither record's CPU has" in entry.detail) is not amx
    )
    assert "AMX" not in entry.explanation and "oneDNN" not in entry.explanation


def test_flags_env_and_ranks(monkeypatch):
    seed_all(3)
    before = repro_record()
    torch.backends.cudnn.benchmark = True
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    monkeypatch.setenv("WORLD_SIZE", "2")
    after = repro_record()
    diff = repro_diff(before, after)
    benchmark = [d for d in diff.differences + diff.other if d.what == "torch cudnn_benchmark"]
    assert [(d.before, d.after) for d in benchmark] == [("False", "True")]
    # torch reads cudnn.benchmark only in cuDNN calls: a CPU build has none
    assert benchmark[0].changes_results is (torch.backends.cudnn.version() is not None)
    cuda = torch.version.cuda is not None
    assert [d.what for d in diff.differences if d.what != "torch cudnn_benchmark"] == [
        "world size"
    ] + (["CUBLAS_WORKSPACE_CONFIG"] if cuda else [])
    other = sorted(str(d) for d in diff.other if d.what != "torch cudnn_benchmark")
    assert other[-1] == (
        "CUDA_LAUNCH_BLOCKING unset → 1: makes kernel launches synchronous: slower, same numbers"
    )
    if not cuda:  # a torch without CUDA: no cuBLAS to read it
        assert other[0].startswith(
            "CUBLAS_WORKSPACE_CONFIG unset → :16:8: no effect here: neither record's machine "
            "can run CUDA"
        )
    assert "&rarr;" not in diff._repr_html_() and "<li>" in diff._repr_html_()


def test_versions_differ():
    now = repro_record()
    old = dataclasses.replace(
        now, versions=dataclasses.replace(now.versions, torch="2.0.0", numpy="1.26.4")
    )
    diff = repro_diff(old, now)
    assert [d.what for d in diff.differences] == ["torch", "numpy"]
    assert diff.differences[0].after == torch.__version__


# ---------------------------------------------------------------- GPU truth


@pytest.mark.gpu
def test_record_gpu_fields_match_nvidia_smi():
    smi = shutil.which("nvidia-smi")
    assert smi, "nvidia-smi not found on a machine with CUDA"
    out = subprocess.run(
        [smi, "--query-gpu=name,compute_cap,driver_version", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = [[cell.strip() for cell in row] for row in csv.reader(out.strip().splitlines())]
    record = repro_record()
    assert [(g.name, g.compute_capability) for g in record.gpus] == [(r[0], r[1]) for r in rows]
    assert record.versions.driver == rows[0][2]
    cudnn = torch.backends.cudnn.version()
    assert record.versions.cudnn is not None and str(cudnn).startswith(
        record.versions.cudnn.split(".")[0]
    )


def test_gpu_run_against_a_cpu_run_names_the_saved_tf32():
    torch.set_float32_matmul_precision("high")
    saved = with_gpus(repro_record(), A100)
    now = repro_record()
    assert now.gpus == () or not now.gpus  # no GPU on this machine
    diff = repro_diff(saved, dataclasses.replace(now, gpus=()))
    gpu = diff.differences[0]
    assert gpu.what == "GPU" and gpu.after == "none"
    assert "the saved run used TF32 on its GPU (convolutions, float32 matmuls)" in gpu.explanation
    assert all(d.what != "torch float32_matmul_precision" for d in diff.differences)


# ---------------------------------------------------------------- %repro and the CLI


def test_magic_shows_saves_and_diffs(ip, tmp_path, capsys):
    from colab_gpu_guard.seeding import read_record

    ip.run_line_magic("seed_all", "11 --every-cell")
    capsys.readouterr()
    ip.run_line_magic("repro", "")
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "repro: seed 11, reseeded every cell from 11"
    path = tmp_path / "run.json"
    ip.run_line_magic("repro", f"--save {path}")
    assert f"repro: saved to {path}\n" in capsys.readouterr().out
    ip.run_line_magic("repro", f"--save {path}")  # again: the file was there, and it says so
    assert f"repro: saved to {path} (replaced the file there)\n" in capsys.readouterr().out
    saved = read_record(str(path))
    assert saved.seeding.every_cell == 11 and saved.seeding.seed == 11
    ip.run_line_magic("seed_all", "12 --no-every-cell")
    torch.backends.cudnn.benchmark = True
    capsys.readouterr()
    ip.run_line_magic("repro", f"--diff {path}")
    out = capsys.readouterr().out
    count = 3 if torch.backends.cudnn.version() is not None else 2  # benchmark: cuDNN only
    assert f"repro diff: {path} → this kernel: {count} differences" in out
    # seed_all set PYTHONHASHSEED with the seed: said in the seed's entry, not again
    assert "PYTHONHASHSEED 11 → 12" not in out
    assert "seed_all set PYTHONHASHSEED to it" in out
    assert "seed 11 → 12" in out and "per-cell reseeding base 11 → off" in out
    assert "torch cudnn_benchmark False → True" in out
    ip.run_line_magic("repro", "--json")
    assert json.loads(capsys.readouterr().out)["seeding"]["seed"] == 12


def test_magic_diff_with_the_example_says_the_cpu_part_plainly_and_details_with_v(ip, capsys):
    """The example A100 record says nothing of its CPU: the default line claims no CPU
    feature for it, says of this CPU only what torch reads here, and leaves oneDNN and
    AMX-FP16 to -v."""
    from pathlib import Path

    example = Path(__file__).resolve().parents[2] / "notebooks" / "example_repro_a100.json"
    torch.set_float32_matmul_precision("highest")
    capsys.readouterr()
    ip.run_line_magic("repro", f"--diff {example}")
    short = capsys.readouterr().out
    ip.run_line_magic("repro", f"--diff {example} -v")
    verbose = capsys.readouterr().out
    (line,) = [x for x in short.splitlines() if "torch float32_matmul_precision" in x]
    amx = torch.cpu._is_amx_fp16_supported()
    here = "this CPU can" if amx else "this CPU cannot"
    assert line.endswith(
        "torch float32_matmul_precision high → highest: on the GPU it matters only on an "
        "Ampere-or-newer one (A100/L4/H100), which only the saved run has: see the GPU "
        f"difference; on the CPU only where the CPU computes matmuls in TF32 ({here}; the "
        "saved record does not say)"
    ), line
    assert "AMX" not in short and "oneDNN may run" not in short
    (detailed,) = [x for x in verbose.splitlines() if "torch float32_matmul_precision" in x]
    assert detailed.startswith(line[: line.index(": on the GPU")])
    assert (
        "oneDNN may run CPU float32 matmuls in TF32 on CPUs with AMX-FP16" in detailed
        and "set by torch.set_float32_matmul_precision" in detailed
    )
    assert len(verbose.splitlines()) == len(short.splitlines())


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read .*: No such file or directory"),
        ("{not json", "is not JSON: Expecting property name"),
        ('{"schema_version": 1}', "is not a reproducibility record: ReproRecord: missing"),
        ('{"schema_version": 7}', "newer colab_gpu_guard .schema_version 7; this one reads 1"),
        ('{"schema_version": 0}', "expected schema_version 1, found 0 .a record is the JSON"),
    ],
)
def test_magic_bad_file_is_a_usage_error(ip, tmp_path, content, message):
    from IPython.core.error import UsageError

    path = tmp_path / "bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UsageError, match=message + r"[\s\S]*Usage: %repro"):
        ip.run_line_magic("repro", f"--diff {path}")


def test_magic_rejects_unwritable_file_and_bad_combinations(ip, tmp_path):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="cannot write .*No such file or directory"):
        ip.run_line_magic("repro", f"--save {tmp_path}/missing/dir/run.json")
    with pytest.raises(UsageError, match="--diff and --save contradict each other: give one"):
        ip.run_line_magic("repro", "--diff a.json --save b.json")


def test_magic_help_is_the_docstring(ip):
    from colab_gpu_guard.ipython.magics import repro  # the rest: docs/reference.md

    info = ip.object_inspect("%repro")
    assert "--diff run.json" in info["docstring"]
    assert "python -m colab_gpu_guard repro" in repro.REFERENCE


def test_cli_repro_and_diff(tmp_path, capsys):
    from colab_gpu_guard.__main__ import main

    assert main(["repro", "--json"]) == 0
    record = ReproRecord.from_json(capsys.readouterr().out)
    assert record.versions.torch == torch.__version__
    path = tmp_path / "run.json"
    saved = dataclasses.replace(
        record,
        seeding=dataclasses.replace(record.seeding, seed=3),
        env=(("OMP_NUM_THREADS", "1"),),
    )
    path.write_text(saved.to_json())
    assert main(["repro", "--diff", str(path)]) == 0
    out = capsys.readouterr().out
    # a terminal command's own seeds are nobody's: only what the machine decides is compared
    assert "1 difference that can change results" in out and "OMP_NUM_THREADS 1 →" in out
    assert "seed 3" not in out and "seeds and torch flags are set by the program" in out
    path.write_text("[]")
    assert main(["repro", "--diff", str(path)]) == 2
    assert "is not a reproducibility record: expected a JSON object" in capsys.readouterr().err


def test_cli_in_a_fresh_process(tmp_path):
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    example = root / "notebooks" / "example_repro_a100.json"
    out = subprocess.run(
        [sys.executable, "-m", "colab_gpu_guard", "repro", "--diff", str(example)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "(EXAMPLE, not measured" in out.splitlines()[0]
    assert "1. GPU NVIDIA A100-SXM4-40GB (sm_80) → " in out
    # the example was seeded with seed_all(42), which set PYTHONHASHSEED=42 in its program:
    # neither is something this command's process could have
    assert "seed 42" not in out and "PYTHONHASHSEED" not in out
    assert "seeds and torch flags are set by the program that runs" in out
