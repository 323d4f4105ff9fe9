"""seed_all and %seed_all with real random, NumPy and torch (CPU build here)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from colab_gpu_guard import seed_all, seeding
from colab_gpu_guard.frameworks import torch as torch_support
from colab_gpu_guard.seeding import determinism


@pytest.fixture(autouse=True)
def modes_off():
    """Each test starts and ends with deterministic mode off (a new seed keeps it)."""
    seed_all(0, deterministic=False)
    yield
    seed_all(0, deterministic=False)


def draws() -> tuple:
    return (
        random.random(),
        float(np.random.rand()),
        torch.rand(3).tolist(),
        torch.randint(0, 1000, (4,)).tolist(),
    )


def hand_seeded_draws(seed: int) -> tuple:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return draws()


def state_snapshot() -> tuple:
    """Everything seed_all may touch, to prove a rejected call changed nothing."""
    flags = determinism.read_flags(torch)
    return (
        random.getstate(),
        repr(np.random.get_state()),
        torch.get_rng_state().tolist(),
        dict(os.environ),
        flags,
    )


# ---------------------------------------------------------------- the magic


def test_magic_seeds_like_seeding_by_hand(ip, capsys):
    expected = hand_seeded_draws(42)
    random.random()  # move every stream away from the seeded state
    ip.run_line_magic("seed_all", "42")
    assert draws() == expected
    out = capsys.readouterr().out
    assert out.startswith("seed 42: random, numpy, torch (cpu")


def test_magic_help_is_the_docstring(ip):
    info = ip.object_inspect("%seed_all")
    assert info["found"]
    assert "--deterministic" in info["docstring"]
    from colab_gpu_guard.ipython.magics import seed  # the rest: docs/reference.md

    assert "torch.manual_seed` already seeds every CUDA device" in seed.REFERENCE


def test_bare_magic_draws_and_prints_a_reproducible_seed(ip, capsys):
    ip.run_line_magic("seed_all", "")
    out = capsys.readouterr().out
    assert "drawn from the OS" in out
    seed = int(out.split("seed ", 1)[1].split()[0])
    after_drawn = draws()
    ip.run_line_magic("seed_all", str(seed))
    assert draws() == after_drawn


def test_report_is_truthful_about_torch_cuda():
    report = seed_all(1)
    text = str(report)
    names = {rng.name: rng for rng in report.seeded}
    assert "PyTorch CPU" in names
    if torch.version.cuda is None:
        assert any(s.name == "PyTorch CUDA" for s in report.skipped)
        assert "no CUDA" in text
    assert "PYTHONHASHSEED" in text
    assert "applies to Python processes started from now on" in text
    assert "this kernel's str hashes " in text and "when it started" in text


def test_report_html_escapes_names():
    report = seed_all(3)
    report.warnings.append("<script>alert(1)</script>")
    report.skipped.append(seeding.SkippedRng("<b>x</b>", "<i>why</i>"))
    html = report._repr_html_()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<b>x</b>" not in html and "<i>why</i>" not in html


def test_pythonhashseed_is_set_for_children():
    seed_all(1234)
    assert os.environ["PYTHONHASHSEED"] == "1234"
    out = subprocess.run(
        [sys.executable, "-c", "print(hash('colab'))"], capture_output=True, text=True
    ).stdout
    again = subprocess.run(
        [sys.executable, "-c", "print(hash('colab'))"], capture_output=True, text=True
    ).stdout
    assert out == again


def test_two_processes_with_the_same_seed_draw_the_same():
    script = textwrap.dedent(
        """
        import random, numpy, torch
        from colab_gpu_guard import seed_all
        seed_all(2024)
        print(random.random(), numpy.random.rand(), torch.rand(2).tolist())
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True
        ).stdout
        for _ in range(2)
    ]
    assert runs[0] == runs[1] and runs[0].strip()


def test_api_seed_forms():
    assert seed_all("7").seed == 7
    assert seed_all(7.0).seed == 7
    assert seed_all(np.int64(7)).seed == 7
    assert seed_all(2**32 - 1).seed == 2**32 - 1
    assert seed_all(0).seed == 0


# ---------------------------------------------------------------- bad input changes nothing

BAD_API_SEEDS = [
    (-1, ValueError),
    (2**32, ValueError),
    (1.5, ValueError),
    (True, TypeError),
    (False, TypeError),
    ("abc", ValueError),
    ("-3", ValueError),
    ("1e3", ValueError),
    ("", ValueError),
    ("٤٢", ValueError),  # Arabic-Indic digits: int() takes them, a seed must not
    ("４２", ValueError),  # fullwidth digits
    ("4２", ValueError),
    ([1], TypeError),
    (object(), TypeError),
]


@pytest.mark.parametrize(("seed", "error"), BAD_API_SEEDS)
def test_api_rejects_bad_seed_and_changes_nothing(seed, error):
    seed_all(5, deterministic=False)
    before = state_snapshot()
    with pytest.raises(error, match="0 to 4294967295"):
        seed_all(seed, deterministic=True)
    assert state_snapshot() == before


def test_api_rejects_non_bool_flags_and_changes_nothing():
    before = state_snapshot()
    with pytest.raises(TypeError, match="True, False or None"):
        seed_all(1, deterministic="yes")
    assert state_snapshot() == before


BAD_MAGIC_LINES = [
    "-1",
    "4294967296",
    "1.5",
    "abc",
    "42 43",
    "42 --deterministik",
    "--every-cell --no-every-cell 3 4",
    "42 --every-cell=yes",
    "0x10",
    "٤٢",
    "４２",
    "42 --every-cell --no-every-cell",
    "--no-every-cell --every-cell",
    "42 --deterministic --no-deterministic",
    "42 --strict --no-strict",
    "42 --strict --no-deterministic",
    "--no-deterministic --warn-only",
]


@pytest.mark.parametrize("line", BAD_MAGIC_LINES)
def test_magic_rejects_bad_input_and_changes_nothing(ip, line):
    before = state_snapshot()
    with pytest.raises(UsageError):
        ip.run_line_magic("seed_all", line)
    assert state_snapshot() == before


def test_magic_error_names_the_valid_form(ip):
    from colab_gpu_guard.ipython.magics import usage_lines

    with pytest.raises(UsageError, match=r"0 to 4294967295") as raised:
        ip.run_line_magic("seed_all", "-7")
    assert str(raised.value).endswith(f"\nUsage: {usage_lines()['seed_all']}")


_tokens = st.sampled_from(
    [
        "42",
        "0",
        "-1",
        "4294967295",
        "4294967296",
        "1.5",
        "x",
        "--deterministic",
        "--warn-only",
        "--every-cell",
        "--no-every-cell",
        "--strict",
        "--no-deterministic",
        "--no-strict",
        "--junk",
        "'7'",
        "+3",
        " ",
    ]
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(st.lists(_tokens, max_size=4))
def test_property_magic_either_seeds_or_changes_nothing(ip, tokens):
    line = " ".join(tokens)
    seed_all(9, deterministic=False)  # deterministic mode off, a known state
    before = state_snapshot()
    try:
        ip.run_line_magic("seed_all", line)
    except UsageError:
        assert state_snapshot() == before
        return
    finally:
        ip.run_line_magic("seed_all", "--no-every-cell")
    seeded_with = seeding.last_seed()
    if seeded_with is not None and any(t.strip().isdigit() for t in tokens):
        expected = hand_seeded_draws(seeded_with)
        ip.run_line_magic("seed_all", str(seeded_with))
        assert draws() == expected


# ---------------------------------------------------------------- every cell


def test_every_cell_makes_a_cell_draw_the_same_whatever_ran_before(ip, run_cell):
    cell_a = "a_draw = (random.random(), float(numpy.random.rand()), torch.rand(2).tolist())"
    cell_b = "b_draw = [random.random() for _ in range(5)]; torch.rand(7)"
    run_cell("import random, numpy, torch")
    run_cell("%seed_all 42 --every-cell")
    run_cell(cell_a)
    first = ip.user_ns["a_draw"]
    run_cell(cell_b)
    run_cell(cell_a)
    assert ip.user_ns["a_draw"] == first
    run_cell(cell_b)
    run_cell(cell_b)
    run_cell(cell_a)
    assert ip.user_ns["a_draw"] == first

    run_cell("%seed_all --no-every-cell")
    run_cell(cell_a)
    assert ip.user_ns["a_draw"] != first


def test_every_cell_differs_per_cell_and_base_seed():
    reseeder = seeding.CellReseeder(42)
    assert reseeder.seed_for("x = 1") != reseeder.seed_for("x = 2")
    assert reseeder.seed_for("x = 1") != seeding.CellReseeder(43).seed_for("x = 1")
    assert reseeder.seed_for("x = 1") == seeding.CellReseeder(42).seed_for("x = 1")


def test_every_cell_seed_is_cached_per_source_and_bounded():
    reseeder = seeding.CellReseeder(42)
    assert reseeder.seed_for("x = 1") == seeding.derive_seed(42, "x = 1")
    assert reseeder.seed_for("x = 1") == seeding.derive_seed(42, "x = 1")  # from the cache
    for n in range(3 * seeding.CellReseeder._CACHED_SOURCES):
        assert reseeder.seed_for(f"y = {n}") == seeding.derive_seed(42, f"y = {n}")
    assert len(reseeder._seeds) <= seeding.CellReseeder._CACHED_SOURCES


def test_fast_python_seed_is_random_seed_gauss_cache_included():
    from colab_gpu_guard.frameworks import python_random

    random.seed(7)
    expected = [random.random(), random.gauss(0, 1), random.gauss(0, 1)]
    random.gauss(0, 1)  # leaves a cached second normal in gauss_next
    python_random.seed_fast(7)
    assert [random.random(), random.gauss(0, 1), random.gauss(0, 1)] == expected


def test_fast_python_seed_respects_a_patched_random_seed(monkeypatch):
    from colab_gpu_guard.frameworks import python_random

    calls = []
    monkeypatch.setattr(random, "seed", lambda value: calls.append(value))
    python_random.seed_fast(11)
    assert calls == [11]


def test_reseed_never_imports_numpy_random(monkeypatch):
    """NumPy 2 imports numpy.random lazily: a notebook that never touched it keeps it so."""
    monkeypatch.delitem(sys.modules, "numpy.random")
    seeding.reseed_loaded(5)
    assert "numpy.random" not in sys.modules


def test_reseed_before_cuda_starts_queues_in_torchs_slot(monkeypatch):
    """On a CUDA build before CUDA starts: the cell's seed is queued where
    torch.cuda.manual_seed_all queues it (torch runs it when CUDA initialises), without
    torch's traceback.format_stack() per call, and only the latest seed is kept."""
    import traceback

    tracker = torch.cuda._lazy_seed_tracker
    monkeypatch.setattr(tracker, "manual_seed_all_cb", None)
    monkeypatch.setattr(tracker, "call_order", [])
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # this CPU build posing as CUDA
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    stacks = []
    monkeypatch.setattr(traceback, "format_stack", lambda *a: stacks.append(1) or [])
    seeding.reseed_loaded(1234)
    seeding.reseed_loaded(5678)
    assert stacks == []
    queued, origin = tracker.manual_seed_all_cb
    assert tracker.call_order[-1] == (queued, origin)
    assert "seed_all --every-cell" in "".join(origin)
    # What torch's lazy init will run: every device's generator gets the latest seed.
    generators = [torch.Generator(), torch.Generator()]
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "default_generators", tuple(generators))
    queued()
    assert [g.initial_seed() for g in generators] == [5678, 5678]


def test_reseed_falls_back_to_manual_seed_all_without_torchs_tracker(monkeypatch):
    calls = []
    monkeypatch.delattr(torch.cuda, "_lazy_seed_tracker")
    monkeypatch.setattr(torch.cuda, "manual_seed_all", lambda value: calls.append(value))
    torch_support.queue_cuda_seed_all(torch, 99)
    assert calls == [99]


def test_no_every_cell_alone_does_not_reseed(ip, capsys):
    random.seed(5)
    expected = random.random()
    random.seed(5)
    ip.run_line_magic("seed_all", "--no-every-cell")
    assert random.random() == expected
    assert "per-cell reseeding off" in capsys.readouterr().out


# ---------------------------------------------------------------- deterministic mode


def test_deterministic_mode_sets_and_restores_flags(monkeypatch):
    seed_all(1, deterministic=False)
    torch.backends.cudnn.benchmark = True
    monkeypatch.delenv("FLASH_ATTENTION_DETERMINISTIC", raising=False)
    original = determinism.read_flags(torch)

    report = seed_all(1, deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert not torch.is_deterministic_algorithms_warn_only_enabled()
    assert torch.backends.cudnn.deterministic is True
    assert torch.backends.cudnn.benchmark is False
    assert os.environ["FLASH_ATTENTION_DETERMINISTIC"] == "1"
    assert any("benchmark was True" in w for w in report.warnings)
    assert report.deterministic

    seed_all(2, warn_only=True)  # implies deterministic, warn-only
    assert torch.is_deterministic_algorithms_warn_only_enabled()

    report = seed_all(3, deterministic=False)
    assert determinism.read_flags(torch) == original
    assert "FLASH_ATTENTION_DETERMINISTIC" not in os.environ
    assert any("restored" in note for note in report.notes)
    torch.backends.cudnn.benchmark = False


@pytest.mark.parametrize(
    ("current", "asked", "expected"),
    [
        # a new seed: every mode in force is kept
        ((True, True, True), (None, None, None), (True, True, True)),
        ((False, False, False), (None, None, None), (False, False, False)),
        # a mode named is added to those in force
        ((True, True, False), (None, None, True), (True, True, True)),
        ((True, False, True), (True, None, None), (True, False, True)),
        ((False, False, False), (None, True, None), (True, True, False)),
        # switching one off is explicit; deterministic off ends the others
        ((True, True, True), (None, None, False), (True, True, False)),
        ((True, True, True), (None, False, None), (True, False, True)),
        ((True, True, True), (False, None, None), (False, False, False)),
        ((True, True, True), (False, False, False), (False, False, False)),
    ],
)
def test_resolve_modes_keeps_what_is_not_named(current, asked, expected):
    modes = determinism.resolve_modes(determinism.Modes(*current), *asked)
    assert modes == determinism.Modes(*expected)


@pytest.mark.parametrize("asked", [(False, True, None), (False, None, True)])
def test_resolve_modes_refuses_off_and_on_at_once(asked):
    with pytest.raises(ValueError, match="contradict each other"):
        determinism.resolve_modes(determinism.Modes(), *asked)


def test_modes_in_force_are_read_from_torch():
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        modes = determinism.modes_in_force(torch)
        assert modes == determinism.Modes(deterministic=True, warn_only=True, strict=False)
    finally:
        torch.use_deterministic_algorithms(False)
    assert determinism.modes_in_force(torch) == determinism.Modes()


def test_deterministic_off_switches_off_a_mode_switched_on_by_hand():
    torch.use_deterministic_algorithms(True)
    report = seed_all(1, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()
    assert any(c.name == "torch.use_deterministic_algorithms" for c in report.changes)


def test_deterministic_off_without_on_leaves_user_flags_alone():
    seed_all(1, deterministic=False)
    torch.backends.cudnn.benchmark = True
    try:
        seed_all(2, deterministic=False)
        assert torch.backends.cudnn.benchmark is True
    finally:
        torch.backends.cudnn.benchmark = False


def test_deterministic_mode_is_really_on_in_torch():
    # Under deterministic algorithms torch fills uninitialised memory (torch.empty) with NaN,
    # a CPU-visible effect of the global switch.
    seed_all(1, deterministic=True)
    try:
        assert torch.isnan(torch.empty(64)).all()
    finally:
        seed_all(1, deterministic=False)
    assert not torch.are_deterministic_algorithms_enabled()


# ---------------------------------------------------------------- cuBLAS workspace detection


def _fake_library(tmp_path, name: str, with_check: bool):
    path = tmp_path / name
    filler = b"\0ELF" + os.urandom(4096)
    marker = determinism.CUBLAS_CHECK_MARKER if with_check else b"nothing to see"
    path.write_bytes(filler + marker + filler)
    return path


def test_cublas_detection_old_torch_needs_workspace(tmp_path):
    library = _fake_library(tmp_path, "libtorch_cpu.so", with_check=True)
    requirement = determinism.cublas_requirement_from_libraries([library])
    assert requirement.needed is True


def test_cublas_detection_new_torch_does_not(tmp_path):
    library = _fake_library(tmp_path, "libtorch_cpu.so", with_check=False)
    requirement = determinism.cublas_requirement_from_libraries([library])
    assert requirement.needed is False
    assert "161749" in requirement.evidence


def test_cublas_detection_unknown_without_library():
    assert determinism.cublas_requirement_from_libraries([]).needed is None


def test_installed_torch_library_is_scanned_for_real():
    libraries = determinism._torch_libraries(torch)
    assert libraries, "the installed torch should ship libtorch_cpu"
    requirement = determinism.cublas_requirement_from_libraries(libraries)
    # torch 2.13 is after pytorch/pytorch#161749: the check is gone from ATen.
    assert requirement.needed is (torch.__version__ < "2.10")


@pytest.mark.parametrize(
    "version, needed",
    [
        ("2.10.0", False),  # the first release without the check (pytorch/pytorch#161749)
        ("2.10.0+cu128", False),
        ("2.10.0rc3", False),  # release candidates are built from the release branch
        ("2.11.0+cu130", False),
        ("2.13.0+cpu", False),
        ("2.12.0a0+git1234abc", False),  # main after 2.10's branch cut
        ("2.12.0.dev20260301+cu130", False),
        ("3.0.0", False),
        ("2.9.1+cu128", True),  # Colab's torch is older than 2.10
        ("2.8.0+cu126", True),
        ("2.5.1", True),
        ("1.13.1+cu117", True),
        ("2.8.0a0+5228986c39.nv25.05", True),  # a vendor build of main before 2.9's cut
        ("2.9.0a0+gitabcdef", None),  # main around the change: only the library can tell
        ("2.10.0a0+git1234567", None),
        ("2.10.0.dev20250915+cu128", None),
        ("not-a-version", None),
    ],
)
def test_cublas_requirement_from_version(version, needed):
    requirement = determinism.cublas_requirement_from_version(version)
    if needed is None:
        assert requirement is None
    else:
        assert requirement.needed is needed and version in requirement.evidence


def test_cublas_requirement_reads_no_library_where_the_version_decides(monkeypatch):
    def no_scan(_torch):
        raise AssertionError("scanned the library")

    monkeypatch.setattr(determinism, "_torch_libraries", no_scan)
    monkeypatch.setattr(torch.version, "cuda", "12.8")  # this CPU build posing as CUDA
    for version, needed in (("2.9.1+cu128", True), ("2.11.0+cu130", False)):
        monkeypatch.setattr(torch, "__version__", version)
        assert determinism.cublas_requirement(torch).needed is needed


def test_cublas_requirement_scans_the_library_where_the_version_cannot_tell(monkeypatch):
    scanned = []
    monkeypatch.setattr(determinism, "_torch_libraries", lambda _torch: scanned.append(1) or [])
    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch, "__version__", "2.10.0a0+git0000000")
    monkeypatch.setattr(torch, "__file__", "/nowhere/torch/__init__.py")  # a fresh cache key
    assert determinism.cublas_requirement(torch).needed is None  # no library found
    assert scanned == [1]


@pytest.mark.parametrize("needed", [True, False])
def test_cublas_env_var_follows_detection(monkeypatch, needed):
    requirement = determinism.CublasRequirement(needed, "test")
    monkeypatch.setattr(determinism, "cublas_requirement", lambda _torch: requirement)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    seed_all(1, deterministic=False)
    report = seed_all(1, deterministic=True)
    try:
        if needed:
            assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
            assert any(c.name.startswith("CUBLAS_WORKSPACE_CONFIG") for c in report.changes)
        else:
            assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ
            assert any("CUBLAS_WORKSPACE_CONFIG not needed" in n for n in report.notes)
    finally:
        seed_all(1, deterministic=False)
    assert "CUBLAS_WORKSPACE_CONFIG" not in os.environ


def test_cublas_user_value_is_kept_and_warned_about(monkeypatch):
    requirement = determinism.CublasRequirement(True, "test")
    monkeypatch.setattr(determinism, "cublas_requirement", lambda _torch: requirement)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":0:0")
    report = seed_all(1, deterministic=True)
    seed_all(1, deterministic=False)
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":0:0"
    assert any("not one cuBLAS accepts" in w for w in report.warnings)


def test_cublas_late_warning_when_cuda_already_initialised(monkeypatch):
    requirement = determinism.CublasRequirement(True, "test")
    monkeypatch.setattr(determinism, "cublas_requirement", lambda _torch: requirement)
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda _torch=None: True)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    report = seed_all(1, deterministic=True)
    seed_all(1, deterministic=False)
    (warning,) = [w for w in report.warnings if "CUBLAS_WORKSPACE_CONFIG" in w]
    assert "torch reads CUBLAS_WORKSPACE_CONFIG at the first one" in warning
    assert "restart the runtime" in warning and "before any CUDA matmul" in warning
    assert "before CUDA" not in warning


def test_cublas_no_late_warning_when_the_value_was_already_right(monkeypatch):
    requirement = determinism.CublasRequirement(True, "test")
    monkeypatch.setattr(determinism, "cublas_requirement", lambda _torch: requirement)
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda _torch=None: True)
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":16:8")
    report = seed_all(1, deterministic=True)
    seed_all(1, deterministic=False)
    assert not any("CUBLAS" in w for w in report.warnings)
    assert "CUBLAS_WORKSPACE_CONFIG already ':16:8'" in report.notes


# ---------------------------------------------------------------- frameworks not imported


def test_frameworks_installed_but_not_imported_are_reported(monkeypatch):
    from colab_gpu_guard.frameworks import cupy as cupy_support
    from colab_gpu_guard.frameworks import tensorflow as tensorflow_support

    monkeypatch.setattr(tensorflow_support, "installed", lambda: True)
    monkeypatch.setattr(cupy_support, "installed", lambda: True)
    monkeypatch.delitem(sys.modules, "tensorflow", raising=False)
    report = seed_all(1)
    skipped = {s.name: s.reason for s in report.skipped}
    assert "run %seed_all again after importing it" in skipped["TensorFlow"]
    assert "run %seed_all again after importing it" in skipped["CuPy"]
    assert "tensorflow" not in sys.modules


def test_jax_is_reported_as_keyless_when_installed(monkeypatch):
    from colab_gpu_guard.frameworks import jax as jax_support

    monkeypatch.setattr(jax_support, "installed", lambda: True)
    report = seed_all(1)
    assert any(s.name == "JAX" and "no global RNG" in s.reason for s in report.skipped)


# ---------------------------------------------------------------- GPU truth


@pytest.mark.gpu
def test_gpu_seeded_cuda_draws_repeat():
    seed_all(42)
    first = torch.randn(1000, device="cuda").cpu()
    seed_all(42)
    second = torch.randn(1000, device="cuda").cpu()
    assert torch.equal(first, second)


@pytest.mark.gpu
def test_gpu_every_cell_reseed_covers_the_cell_that_starts_cuda():
    """The cell that initialises CUDA draws what its later reruns draw."""
    script = textwrap.dedent(
        """
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("import torch")
        shell.run_cell("%load_ext colab_gpu_guard")
        shell.run_cell("%seed_all 42 --every-cell")
        cell = "draw = torch.rand(4, device='cuda').tolist()"
        shell.run_cell(cell)
        first = shell.user_ns["draw"]
        shell.run_cell("torch.rand(100, device='cuda')")
        shell.run_cell(cell)
        print("same" if shell.user_ns["draw"] == first else f"differ {first}")
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "same" in result.stdout, result.stdout + result.stderr


@pytest.mark.gpu
def test_gpu_deterministic_cublas_matmul_runs_in_a_fresh_process():
    script = textwrap.dedent(
        """
        import torch
        from colab_gpu_guard import seed_all
        seed_all(0, deterministic=True)   # first thing, before CUDA starts
        a = torch.randn(256, 256, device="cuda", requires_grad=True)
        b = torch.randn(256, 256, device="cuda")
        out = (a @ b).sum()
        out.backward()
        torch.cuda.synchronize()
        print("ok")
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
    assert "CuBLAS" not in result.stderr


def test_a_rocm_build_is_reported_seeded_not_skipped(monkeypatch):
    """A ROCm build drives AMD GPUs through torch.cuda (torch.version.hip set, .cuda None):
    torch.manual_seed seeds them, so the report says so instead of 'has no CUDA'."""
    from colab_gpu_guard.frameworks import torch as torch_support

    monkeypatch.setattr(torch.version, "hip", "6.2.41133", raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    monkeypatch.setattr(torch_support, "cuda_device_count", lambda torch=None: 1)
    report = seed_all(3)
    names = [rng.name for rng in report.seeded]
    assert "PyTorch ROCm (1 device)" in names, names
    assert not any(rng.name == "PyTorch CUDA" for rng in report.skipped)
    assert "torch (cpu, rocm (1))" in report.summary()


def test_torch_blocked_by_sys_modules_is_said_to_be_blocked_not_missing():
    """`sys.modules['torch'] = None` (a user's or a test's way to switch torch off): the
    report said "installed but import failed: PyTorch is not installed", contradicting
    itself."""
    from tests.child import run_python

    result = run_python(
        """
        import json, sys
        sys.modules["torch"] = None
        from colab_gpu_guard import seed_all
        report = seed_all(1)
        print(json.dumps([skip.reason for skip in report.skipped if skip.name == "PyTorch"]))
        """
    )
    assert result == [
        "installed but import failed: import of torch is blocked in this process "
        "(sys.modules['torch'] is None)"
    ]
