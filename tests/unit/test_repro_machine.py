"""The record catches what changes results, and the diff judges each difference by what it
does on the machines of the two records: real torch, the ATen capability and thread cases in
child processes (their numbers really differ, or really do not)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from colab_gpu_guard import nvml, repro_diff, repro_record, seed_all  # noqa: E402
from colab_gpu_guard.seeding import precision  # noqa: E402
from colab_gpu_guard.seeding.repro import ReproRecord  # noqa: E402
from colab_gpu_guard.seeding.repro_effects import NO_CUDA  # noqa: E402
from colab_gpu_guard.seeding.repro_parts import (  # noqa: E402
    BACKEND_DEFAULTS,
    BACKEND_SETTINGS,
    REPRO_ENV,
    Cpu,
    Gpu,
)
from tests import fake_pynvml  # noqa: E402
from tests.child import run_forked

ROOT = Path(__file__).resolve().parents[2]
A100 = Gpu(0, "NVIDIA A100-SXM4-40GB", "8.0", 40 * 2**30)
CPU_BUILD = torch.version.cuda is None

# a child's numbers and record: what ATen dispatches to and how many threads add up
CHILD = """
import json, sys, torch
from colab_gpu_guard import repro_record
torch.manual_seed(0)
x = torch.randn(257, 513)
w = torch.randn(513, 129)
numbers = [x.sum().item(), x.softmax(1)[0, :7].tolist(), x.tanh().sum().item(),
           (x @ w).sum().item(), torch.nn.functional.layer_norm(x, (513,)).abs().sum().item(),
           torch.randn(10**6).exp().sum().item()]
print(json.dumps({"numbers": numbers, "record": repro_record().to_dict()}))
"""


_PLAIN: list[str] = []  # the plain child's output: run once, read by each test anew


def child(env: dict = None, affinity: set = None) -> tuple[list, ReproRecord]:
    """A new torch process's numbers and record, with `env` and on the CPUs `affinity`
    (the plain one, neither given, runs once)."""
    if env is None and affinity is None and _PLAIN:
        data = json.loads(_PLAIN[0])
        return data["numbers"], ReproRecord.from_dict(data["record"])
    code = CHILD
    if affinity is not None:  # as `taskset -c 0`: before torch reads the CPUs it may use
        code = f"import os; os.sched_setaffinity(0, {affinity!r})\n" + code
    environment = {k: v for k, v in os.environ.items() if k not in REPRO_ENV}
    environment.update(env or {}, PYTHONPATH=str(ROOT))
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    if env is None and affinity is None:
        _PLAIN.append(done.stdout)
    data = json.loads(done.stdout)
    return data["numbers"], ReproRecord.from_dict(data["record"])


@pytest.fixture(autouse=True)
def clean(monkeypatch):
    for name in REPRO_ENV:
        monkeypatch.delenv(name, raising=False)
    precision_before = torch.get_float32_matmul_precision()
    yield
    torch.set_float32_matmul_precision(precision_before)
    nvml.set_pynvml(None)


def whats(diff) -> dict:
    return {d.what: d for d in diff.differences + diff.other}


# ---------------------------------------------------------------- the CPU


def test_aten_cpu_capability_changes_numbers_and_the_diff_says_so():
    native_numbers, native = child()
    default_numbers, default = child({"ATEN_CPU_CAPABILITY": "default"})
    assert native.cpu.capability == torch.backends.cpu.get_cpu_capability()
    assert default.cpu.capability == "DEFAULT"
    if native.cpu.capability == "DEFAULT":
        pytest.skip("this CPU has no vector capability above the default")
    assert native_numbers != default_numbers  # the same machine, other results
    diff = repro_diff(native, default)
    found = whats(diff)
    assert found["CPU capability"].changes_results
    assert (found["CPU capability"].before, found["CPU capability"].after) == (
        native.cpu.capability,
        "DEFAULT",
    )
    assert diff.differences[0].what == "CPU capability"  # nothing above it here
    # one cause, one entry: the variable that capped it is named there, not listed again
    assert [d.what for d in diff.differences + diff.other] == ["CPU capability"]
    assert "ATEN_CPU_CAPABILITY unset → default set it" in found["CPU capability"].explanation


def test_a_capability_variable_that_changes_nothing_is_said_to():
    native_numbers, native = child()
    same = native.cpu.capability.lower()
    capped_numbers, capped = child({"ATEN_CPU_CAPABILITY": same})
    assert capped.cpu.capability == native.cpu.capability
    assert capped_numbers == native_numbers
    diff = repro_diff(native, capped)
    assert diff.differences == ()
    (variable,) = diff.other
    assert variable.what == "ATEN_CPU_CAPABILITY"
    assert f"torch's CPU kernels used {native.cpu.capability} in both" in variable.explanation


def test_the_cpu_model_and_its_low_precision_are_recorded():
    record = repro_record()
    bf16, tf32 = precision.cpu_low_precision(torch)
    assert bf16 is torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert tf32 is torch.cpu._is_amx_fp16_supported()
    assert (record.cpu.bf16, record.cpu.tf32, record.cpu.cores) == (bf16, tf32, os.cpu_count())
    with open("/proc/cpuinfo") as handle:
        models = {line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")}
    assert record.cpu.model in models
    assert "  CPU: " + record.cpu.model in record.to_text(verbose=True)
    other = dataclasses.replace(record, cpu=dataclasses.replace(record.cpu, model="Other CPU"))
    assert whats(repro_diff(record, other))["CPU"].changes_results


# ---------------------------------------------------------------- threads and the CLI


def test_cli_diff_compares_its_own_cpu_threads(tmp_path):
    one_numbers, _ = child(affinity={0})
    two_numbers, _ = child()
    if os.cpu_count() < 2 or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    assert one_numbers != two_numbers  # x.exp().sum() on 1 and 2 threads
    path = tmp_path / "one.json"
    code = (
        "import os, sys; os.sched_setaffinity(0, {0})\n"
        "from colab_gpu_guard.__main__ import main\n"
        "sys.exit(main(['repro', '--json']))\n"
    )
    run = dict(cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    saved = subprocess.run([sys.executable, "-c", code], **run)
    path.write_text(saved.stdout)
    assert ReproRecord.from_json(saved.stdout).torch_flags.cpu_threads == 1
    done = subprocess.run(
        [sys.executable, "-m", "colab_gpu_guard", "repro", "--diff", str(path)], **run
    )
    assert done.returncode == 0, done.stderr
    assert f"torch cpu_threads 1 → {torch.get_num_threads()}" in done.stdout


# ---------------------------------------------------------------- seeds set another way


def test_cli_diff_takes_the_variables_the_program_set_itself_as_set(tmp_path):
    """A program that ran seed_all(deterministic=True) set TF_DETERMINISTIC_OPS and
    FLASH_ATTENTION_DETERMINISTIC itself (and CUBLAS_WORKSPACE_CONFIG where torch needs
    it): a terminal's process lacks them, and the program would set them here too."""
    code = (
        "import sys, torch\n"
        "from colab_gpu_guard import seed_all\n"
        "from colab_gpu_guard.__main__ import main\n"
        "seed_all(3, deterministic=True)\n"
        "sys.exit(main(['repro', '--json']))\n"
    )
    environment = {k: v for k, v in os.environ.items() if k not in REPRO_ENV}
    run = dict(
        cwd=ROOT, capture_output=True, text=True, env=dict(environment, PYTHONPATH=str(ROOT))
    )
    saved = subprocess.run([sys.executable, "-c", code], **run)
    assert saved.returncode == 0, saved.stderr
    record = ReproRecord.from_json(saved.stdout)
    # the CLI's record is a fresh process's: take the program's flags as %repro would
    path = tmp_path / "deterministic.json"
    flags = dataclasses.replace(record.torch_flags, deterministic_algorithms=True)
    path.write_text(dataclasses.replace(record, torch_flags=flags).to_json())
    assert record.env_value("TF_DETERMINISTIC_OPS") == "1"
    done = subprocess.run(
        [sys.executable, "-m", "colab_gpu_guard", "repro", "--diff", str(path)], **run
    )
    assert done.returncode == 0, done.stderr
    assert "TF_DETERMINISTIC_OPS" not in done.stdout
    assert "FLASH_ATTENTION_DETERMINISTIC" not in done.stdout
    assert "nothing that can change results differs" in done.stdout


def test_a_variable_only_an_unimported_framework_reads_changes_nothing():
    now = repro_record()
    unset = dataclasses.replace(now, env=(("TF_DETERMINISTIC_OPS", None),))
    set_ = dataclasses.replace(now, env=(("TF_DETERMINISTIC_OPS", "1"),))
    (entry,) = repro_diff(unset, set_).other
    assert "only TensorFlow reads it" in entry.explanation
    with_tf = [
        dataclasses.replace(r, frameworks=(*r.frameworks, ("TensorFlow", "2.17.0")))
        for r in (unset, set_)
    ]
    (entry,) = repro_diff(*with_tf).differences
    assert entry.what == "TF_DETERMINISTIC_OPS"


def test_seeds_set_by_anything_but_seed_all_are_recorded():
    torch.manual_seed(1)  # as Lightning's seed_everything(1) does
    one = repro_record()
    torch.manual_seed(2)
    two = repro_record()
    assert (one.seeding.torch_initial_seed, two.seeding.torch_initial_seed) == (1, 2)
    diff = repro_diff(one, two)
    (entry,) = [d for d in diff.differences if d.what == "torch seed"]
    assert (entry.before, entry.after) == (
        "1",
        "2",
    ) and "torch's random draws differ" in entry.explanation
    # seed_all and a torch seed that followed it: one entry
    seed_all(5)
    five = repro_record()
    seed_all(6)
    six = repro_record()
    assert [d.what for d in repro_diff(five, six).differences if "seed" in d.what] == ["seed"]
    # every-cell records: each cell reseeds torch, so the base seed is what is compared
    cell_a = dataclasses.replace(one, seeding=dataclasses.replace(one.seeding, every_cell=3))
    cell_b = dataclasses.replace(two, seeding=dataclasses.replace(two.seeding, every_cell=3))
    assert not [d for d in repro_diff(cell_a, cell_b).differences if "seed" in d.what]


def test_one_seed_all_call_is_one_entry(monkeypatch):
    """seed_all(6) after a run seeded with 5 moves PYTHONHASHSEED and, with per-cell
    reseeding on, its base: one call, one entry that says so."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    seed_all(5)
    five = repro_record(every_cell=5)
    seed_all(6)
    six = repro_record(every_cell=6)
    diff = repro_diff(five, six)
    assert [d.what for d in diff.differences + diff.other] == ["seed"]
    assert diff.differences[0].explanation.endswith(
        "; seed_all set the per-cell reseeding base and PYTHONHASHSEED to it"
    )
    # the base turned off is its own entry
    diff = repro_diff(five, repro_record())
    assert [d.what for d in diff.differences] == ["seed", "per-cell reseeding base"]


def test_an_unseeded_process_starts_from_a_random_torch_seed():
    code = "import torch\nfrom colab_gpu_guard import repro_record\nprint(repro_record().to_json())"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    first, second = (
        ReproRecord.from_json(
            subprocess.run(
                [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True
            ).stdout
        )
        for _ in range(2)
    )
    assert first.seeding.seed is None
    assert first.seeding.torch_initial_seed != second.seeding.torch_initial_seed
    assert "torch seed" in whats(repro_diff(first, second))


# ---------------------------------------------------------------- torch's other settings


def test_backend_settings_are_read_and_their_defaults_are_torchs():
    _, fresh = child()
    recorded = dict(fresh.torch_flags.backends)
    assert set(recorded) <= set(BACKEND_SETTINGS)
    assert "torch.backends.mkldnn.deterministic" in recorded
    for name, value in recorded.items():
        assert BACKEND_DEFAULTS[name] == value, name  # a fresh process: torch's defaults
    assert fresh.backend_lines() == []


def test_default_dtype_and_the_attention_fast_path_are_recorded():
    """Two settings that change numbers and were not recorded: torch.set_default_dtype and
    the MultiheadAttention fast path (measured on this CPU, in a new process)."""
    before, after, _ = fresh_torch_then(
        "torch.set_default_dtype(torch.float64); torch.backends.mha.set_fastpath_enabled(False)"
    )
    code = (
        "import torch\n"
        "torch.manual_seed(0)\n"
        "layer = torch.nn.TransformerEncoderLayer(64, 4, 128, batch_first=True).eval()\n"
        "x = torch.randn(4, 16, 64)\n"
        "with torch.inference_mode():\n"
        "    fast = layer(x)\n"
        "    torch.backends.mha.set_fastpath_enabled(False)\n"
        "    print(int(torch.equal(fast, layer(x))))\n"
    )
    assert run_forked(code) == 0  # the fast path moves the result
    found = whats(repro_diff(before, after))
    dtype = found["torch.get_default_dtype()"]
    fastpath = found["torch.backends.mha.get_fastpath_enabled()"]
    assert (dtype.before, dtype.after) == ("torch.float32", "torch.float64")
    assert (fastpath.before, fastpath.after) == ("True", "False")
    assert dtype.changes_results and fastpath.changes_results
    assert "torch.get_default_dtype() = torch.float64" in after.backend_lines()


def test_reduced_precision_sdpa_and_mkldnn_flags_are_judged_here():
    before = repro_record()
    saved = (
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
        torch.backends.cuda.flash_sdp_enabled(),
        torch.backends.mkldnn.deterministic,
    )
    try:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.enable_flash_sdp(False)
        torch.backends.mkldnn.deterministic = True
        after = repro_record()
    finally:
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = saved[0]
        torch.backends.cuda.enable_flash_sdp(saved[1])
        torch.backends.mkldnn.deterministic = saved[2]
    found = whats(repro_diff(before, after))
    fp16 = found["torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"]
    flash = found["torch.backends.cuda.flash_sdp_enabled()"]
    mkldnn = found["torch.backends.mkldnn.deterministic"]
    assert (fp16.before, fp16.after, flash.before, flash.after) == (
        "True",
        "False",
        "True",
        "False",
    )
    assert mkldnn.changes_results  # oneDNN runs on this CPU
    assert "torch.backends.mkldnn.deterministic = True" in "\n".join(after.backend_lines())
    if CPU_BUILD:  # no CUDA here: the CUDA settings change nothing
        assert not fp16.changes_results and fp16.explanation.startswith(NO_CUDA)
    assert flash.changes_results  # the CPU's attention has a flash kernel too (next test)
    # the same settings in records of a CUDA machine: they change results
    cuda = dataclasses.replace(after.versions, cuda_runtime="12.4")
    gpu_before = dataclasses.replace(before, versions=cuda, gpus=(A100,))
    gpu_after = dataclasses.replace(after, versions=cuda, gpus=(A100,))
    on_gpu = whats(repro_diff(gpu_before, gpu_after))
    assert on_gpu["torch.backends.cuda.flash_sdp_enabled()"].changes_results
    assert on_gpu[
        "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction"
    ].changes_results


@pytest.mark.parametrize(
    "switch, changes",
    [
        ("torch.backends.cuda.enable_flash_sdp(False)", True),
        ("torch.backends.cuda.enable_mem_efficient_sdp(False)", False),
        ("torch.backends.cuda.enable_cudnn_sdp(False)", False),
        ("torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)", True),
    ],
)
def test_attention_switches_are_judged_by_what_they_do_on_the_cpu(switch, changes):
    """torch.backends.cuda's attention switches also choose the CPU's attention kernel
    (flash or math): measured on this CPU, then said so by the diff of two CPU records."""
    code = (
        "import json, sys, torch\n"
        "import torch.nn.functional as F\n"
        "from colab_gpu_guard import repro_record\n"
        "torch.manual_seed(0)\n"
        "q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))\n"
        "math_bf16 = 'fp16_bf16' in sys.argv[1]  # the math kernel, in bf16\n"
        "torch.backends.cuda.enable_flash_sdp(not math_bf16)\n"
        "def run():\n"
        "    if math_bf16:\n"
        "        return F.scaled_dot_product_attention(q.bfloat16(), k.bfloat16(), v.bfloat16())\n"
        "    return F.scaled_dot_product_attention(q, k, v)\n"
        "before, first = repro_record().to_dict(), run()\n"
        "exec(sys.argv[1])\n"
        "after, second = repro_record().to_dict(), run()\n"
        "print(json.dumps({'before': before, 'after': after,"
        " 'changed': not torch.equal(first, second)}))\n"
    )
    data = run_forked(code, args=(switch,))
    if not CPU_BUILD:
        pytest.skip("the CPU-only judgement needs a torch without CUDA")
    assert data["changed"] is changes  # measured on this CPU
    before, after = (ReproRecord.from_dict(data[key]) for key in ("before", "after"))
    diff = repro_diff(before, after)
    (entry,) = [d for d in diff.differences + diff.other if "sdp" in d.what]
    assert entry.changes_results is changes
    if not changes:
        assert entry.explanation.startswith(NO_CUDA)


def test_cuda_only_variables_change_nothing_without_cuda(monkeypatch):
    if not CPU_BUILD:
        pytest.skip("needs a torch built without CUDA")
    before = repro_record()
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    after = repro_record()
    diff = repro_diff(before, after)
    assert diff.differences == ()
    assert {d.what for d in diff.other} == {"CUBLAS_WORKSPACE_CONFIG", "CUDA_VISIBLE_DEVICES"}
    assert all(d.explanation.startswith(NO_CUDA) for d in diff.other)


def test_triton_and_torchvision_versions():
    record = repro_record()
    from importlib.metadata import PackageNotFoundError, version

    for name in ("triton", "torchvision"):
        try:
            expected = version(name)
        except PackageNotFoundError:
            expected = None
        assert getattr(record.versions, name) == expected
    old = dataclasses.replace(record.versions, triton="3.1.0", torchvision="0.20.0")
    new = dataclasses.replace(record.versions, triton="3.2.0", torchvision="0.21.0")
    found = whats(
        repro_diff(
            dataclasses.replace(record, versions=old), dataclasses.replace(record, versions=new)
        )
    )
    assert "torch.compile" in found["Triton"].explanation
    assert "v2 random transforms" in found["torchvision"].explanation


# ---------------------------------------------------------------- precision on this CPU


def test_one_matmul_precision_call_is_one_entry_judged_by_the_cpus():
    torch.set_float32_matmul_precision("highest")
    highest = repro_record()
    torch.set_float32_matmul_precision("medium")
    medium = repro_record()
    for bf16 in (True, False):  # a CPU with bf16 and one without (as its record says)
        cpu = dataclasses.replace(highest.cpu, bf16=bf16, tf32=False)
        a = dataclasses.replace(highest, cpu=cpu, gpus=())
        b = dataclasses.replace(medium, cpu=cpu, gpus=())
        diff = repro_diff(a, b)
        (entry,) = diff.differences + diff.other
        assert entry.what == "torch float32_matmul_precision"
        # the default line in a PyTorch user's words; the library and CPU feature with -v
        assert "set by torch.set_float32_matmul_precision" in entry.detail
        assert "oneDNN" not in entry.explanation and "AVX" not in entry.explanation
        assert entry.changes_results is bf16
        if not bf16:
            assert entry.explanation.endswith(
                "no effect on these CPUs (neither run's CPU computes float32 matmuls in bfloat16)"
            )
            assert "which neither record's CPU has" in entry.text(verbose=True)
        else:
            assert "bf16 on CPUs with AVX-512" in entry.text(verbose=True)
            assert entry.explanation.endswith(
                "CPU float32 matmuls may run in bfloat16 on both runs' CPUs: results change, "
                "up to bfloat16 rounding (~3e-3 relative)"
            )
    # one run's CPU with bf16, the other's without
    mixed = repro_diff(
        dataclasses.replace(highest, cpu=dataclasses.replace(highest.cpu, bf16=False), gpus=()),
        dataclasses.replace(medium, cpu=dataclasses.replace(highest.cpu, bf16=True), gpus=()),
    )
    (entry,) = mixed.differences
    assert "CPU float32 matmuls may run in bfloat16 on this CPU only" in entry.explanation
    # a record from before the CPU was recorded: bf16 unknown, so it may change results
    unknown = repro_diff(
        dataclasses.replace(highest, cpu=Cpu(), gpus=()),
        dataclasses.replace(medium, cpu=Cpu(), gpus=()),
    )
    assert [d.what for d in unknown.differences] == ["torch float32_matmul_precision"]
    # and the line claims no CPU feature the records do not state
    assert unknown.differences[0].explanation.endswith(
        "on the CPU only where the CPU computes matmuls in bfloat16 (the saved record and "
        "this record do not say)"
    )


def test_a_fresh_torchs_precision_then_one_call_is_one_entry():
    """A fresh torch reads 'highest' with its matmul fp32_precision leaves at "none"
    (inheriting); the user's first set_float32_matmul_precision('medium') is one entry."""
    torch.set_float32_matmul_precision("highest")
    torch.backends.cuda.matmul.fp32_precision = "none"  # torch's state at import
    torch.backends.mkldnn.matmul.fp32_precision = "none"
    fresh = repro_record()
    try:
        torch.set_float32_matmul_precision("medium")
        diff = repro_diff(fresh, repro_record())
    finally:
        torch.set_float32_matmul_precision("highest")
    shown = [d.what for d in diff.differences + diff.other]
    assert shown == ["torch float32_matmul_precision"], shown


# a new torch process, one precision setting: the records before and after, and whether a
# CPU float32 matmul changed with it
SETTING_CHILD = """
import json, sys, torch
from colab_gpu_guard import repro_record
torch.manual_seed(0)
x, w = torch.randn(256, 512), torch.randn(512, 256)
full, before = x @ w, repro_record().to_dict()
exec(sys.argv[1])
print(json.dumps({"before": before, "after": repro_record().to_dict(),
                  "matmul_changed": not torch.equal(full, x @ w)}))
"""


def fresh_torch_then(setting: str) -> tuple[ReproRecord, ReproRecord, bool]:
    """Records before and after `setting` in a new torch process (no GPU listed)."""
    data = run_forked(SETTING_CHILD, args=(setting,))
    before, after = (
        dataclasses.replace(ReproRecord.from_dict(data[key]), gpus=())
        for key in ("before", "after")
    )
    return before, after, data["matmul_changed"]


@pytest.mark.parametrize(
    "setting, entry",
    [
        # torch resolves a "none" leaf to its parent: one generic setting moves all nine
        ("torch.backends.fp32_precision = 'tf32'", "torch.backends.fp32_precision"),
        ("torch.backends.cudnn.fp32_precision = 'tf32'", "torch.backends.cudnn.fp32_precision"),
        # the legacy cuDNN flag writes the conv and rnn leaves with it
        ("torch.backends.cudnn.allow_tf32 = False", "torch cudnn_allow_tf32"),
        (
            "torch.backends.cudnn.conv.fp32_precision = 'ieee'",
            "torch.backends.cudnn.conv.fp32_precision",
        ),
        ("torch.backends.cuda.matmul.allow_tf32 = True", "torch float32_matmul_precision"),
        ("torch.set_float32_matmul_precision('high')", "torch float32_matmul_precision"),
    ],
)
def test_one_precision_setting_in_a_fresh_torch_is_one_entry(setting, entry):
    before, after, _ = fresh_torch_then(setting)
    diff = repro_diff(before, after)
    shown = [d.what for d in diff.differences + diff.other]
    assert shown == [entry], shown
    assert "unset" not in str(diff)  # a legacy setting torch refuses to read is not "unset"


def test_the_precision_lines_name_the_setting_that_was_set():
    """A fresh torch's cuDNN conv leaf reads 'tf32' because cudnn.allow_tf32 is True (its
    default), and a leaf that follows torch.backends.fp32_precision reads its value: the
    lines name the setting a user set, not the leaf."""
    fresh, generic, _ = fresh_torch_then("torch.backends.fp32_precision = 'tf32'")
    lines = fresh.precision_lines()
    assert lines[1].endswith("set by torch.backends.cudnn.allow_tf32 = True"), lines
    assert lines[0].endswith("set by torch.get_float32_matmul_precision() = 'highest'"), lines
    lines = generic.precision_lines()
    assert lines[0].endswith("set by torch.backends.fp32_precision = 'tf32'"), lines


def test_allow_tf32_is_not_said_to_move_the_cpus_matmuls():
    """torch.backends.cuda.matmul.allow_tf32 = True reads back as precision 'high' but
    leaves oneDNN's matmul leaf alone; set_float32_matmul_precision('high') writes it."""
    for setting, cpu_moves in (
        ("torch.backends.cuda.matmul.allow_tf32 = True", False),
        ("torch.set_float32_matmul_precision('high')", True),
    ):
        before, after, _ = fresh_torch_then(setting)
        tf32_cpu = dataclasses.replace(after.cpu, tf32=True)  # a CPU with AMX-FP16
        diff = repro_diff(*(dataclasses.replace(r, cpu=tf32_cpu) for r in (before, after)))
        (entry,) = diff.differences + diff.other
        assert "torch.backends.cuda.matmul.allow_tf32" in entry.detail
        assert ("oneDNN may run CPU float32 matmuls in TF32" in entry.detail) is cpu_moves
        assert ("CPU float32 matmuls may run in TF32 on both" in entry.explanation) is cpu_moves
        assert entry.changes_results is cpu_moves


def test_cpu_bf16_set_through_the_mkldnn_node_is_seen():
    """torch.backends.mkldnn.fp32_precision = 'bf16' makes torch refuse to read the legacy
    cuDNN flag; the CPU's matmuls still change (on a CPU with bf16), and the diff says so."""
    before, after, matmul_changed = fresh_torch_then(
        "torch.backends.mkldnn.fp32_precision = 'bf16'"
    )
    assert after.torch_flags.cudnn_allow_tf32 is None  # torch refuses to read it now
    diff = repro_diff(before, after)
    (entry,) = diff.differences + diff.other
    # torch 2.13 writes the generic node through the mkldnn one: the generic is in force
    assert entry.what in ("torch.backends.fp32_precision", "torch.backends.mkldnn.fp32_precision")
    assert entry.after == "bf16"
    assert entry.changes_results is after.cpu.bf16
    if after.cpu.bf16:
        assert matmul_changed  # this CPU's matmul really changed
        assert "oneDNN may run CPU float32 ops in bf16" in entry.detail
        assert "CPU float32 ops may run in bfloat16 on both runs' CPUs" in entry.explanation


def test_deterministic_report_says_bf16_only_where_the_cpu_has_it(monkeypatch):
    """No CPU without bf16 is at hand: the one reader that asks torch is replaced."""
    torch.set_float32_matmul_precision("medium")
    try:
        here = seed_all(1, deterministic=True)
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            assert "CPU matmuls (bf16) may run below fp32 here" in here.summary()
        monkeypatch.setattr(precision, "cpu_low_precision", lambda torch: (False, False))
        lacking = seed_all(1, deterministic=True)
        assert "may run below fp32 here" not in lacking.summary()
        assert "CPU matmuls (bf16) run in full fp32 here (this CPU lacks it)" in str(lacking)
    finally:
        seed_all(0, deterministic=False)


# ---------------------------------------------------------------- GPUs NVML cannot read


def test_a_lost_gpu_and_a_failing_name_are_said_so():
    world = fake_pynvml.FakeWorld(
        gpus=[
            fake_pynvml.FakeGpu(lost="handle"),
            fake_pynvml.FakeGpu(fail={"nvmlDeviceGetName": fake_pynvml.NVML_ERROR_UNKNOWN}),
        ]
    )
    nvml.set_pynvml(fake_pynvml.install(world))
    record = repro_record()
    text = record.to_text(verbose=True)
    assert "None" not in text and "sm_?" not in text.split("GPUs:")[1].splitlines()[0], text
    assert "GPUs: GPU 0 lost (NVML cannot reach it), GPU 1 (NVML gave no name: " in text
    assert record.gpus[0].lost and record.gpus[1].unknown
    if record.versions.torch is not None:
        assert "TF32 unknown (a GPU NVML could not read)" in text


def test_nvml_failing_to_count_gpus_is_said_so():
    world = fake_pynvml.FakeWorld(
        gpus=[fake_pynvml.FakeGpu()], fail={"nvmlDeviceGetCount": fake_pynvml.NVML_ERROR_UNKNOWN}
    )
    nvml.set_pynvml(fake_pynvml.install(world))
    record = repro_record()
    assert record.gpus == ()
    assert record.gpu_note.startswith("no GPU listed: NVML could not count the GPUs (")
    assert "NVML sees none" not in str(record)


# ---------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_cuda_generators_initial_seeds_are_recorded_and_compared():
    seed_all(7)
    torch.rand(1, device="cuda")  # a context on cuda:0
    seven = repro_record()
    assert seven.seeding.cuda_initial_seeds[0] == ("cuda:0", 7)
    torch.cuda.manual_seed(8)  # the GPU's generator alone
    eight = repro_record()
    found = whats(repro_diff(seven, eight))
    assert found["cuda:0 generator's seed"].changes_results
    assert (found["cuda:0 generator's seed"].before, found["cuda:0 generator's seed"].after) == (
        "7",
        "8",
    )


@pytest.mark.gpu
def test_sdpa_backends_on_cuda_change_results_and_the_record_says_so():
    q = torch.randn(2, 4, 128, 64, device="cuda", dtype=torch.float16)
    before = repro_record()
    flash = torch.nn.functional.scaled_dot_product_attention(q, q, q)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_mem_efficient_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        math = torch.nn.functional.scaled_dot_product_attention(q, q, q)
        after = repro_record()
    finally:
        torch.backends.cuda.enable_flash_sdp(True)
        torch.backends.cuda.enable_mem_efficient_sdp(True)
        torch.backends.cuda.enable_cudnn_sdp(True)
    found = whats(repro_diff(before, after))
    assert found["torch.backends.cuda.flash_sdp_enabled()"].changes_results
    assert not torch.equal(flash, math)  # another kernel, other numbers


@pytest.mark.gpu
def test_per_rank_seeding_on_cuda_generators(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    seed_all(42)
    torch.rand(1, device="cuda")
    assert torch.cuda.initial_seed() == 42  # every rank alike by default
    seed_all(42, per_rank=True)
    assert torch.cuda.initial_seed() == 43
    assert repro_record().seeding.cuda_initial_seeds[0] == ("cuda:0", 43)
