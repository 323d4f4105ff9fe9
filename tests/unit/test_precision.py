"""Deterministic mode's precision report and --strict, against the flags torch reads back
(CPU), and on an sm_80+ GPU against a convolution's real numbers."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from colab_gpu_guard import seed_all
from colab_gpu_guard.seeding import precision

BACKENDS = torch.backends


def full_fp32_in_force() -> bool:
    return (
        BACKENDS.cuda.matmul.allow_tf32 is False
        and BACKENDS.cudnn.allow_tf32 is False
        and torch.get_float32_matmul_precision() == "highest"
        and BACKENDS.cuda.matmul.fp32_precision == "ieee"
        and BACKENDS.cudnn.conv.fp32_precision == "ieee"
        and BACKENDS.cudnn.rnn.fp32_precision == "ieee"
    )


def set_high():
    torch.set_float32_matmul_precision("high")


def set_legacy():
    BACKENDS.cuda.matmul.allow_tf32 = True
    BACKENDS.cudnn.allow_tf32 = False


def set_generic_tf32():
    BACKENDS.fp32_precision = "tf32"


@pytest.fixture
def torch_defaults():
    """Leave torch's precision settings as a fresh process has them."""
    saved = precision.read_precision(torch)
    yield
    seed_all(0, deterministic=False)
    BACKENDS.fp32_precision = "none"
    precision.restore_precision(torch, saved)


def set_onednn_conv_bf16():
    BACKENDS.mkldnn.conv.fp32_precision = "bf16"


@pytest.mark.parametrize(
    "setup", [lambda: None, set_high, set_legacy, set_generic_tf32, set_onednn_conv_bf16]
)
def test_strict_switches_to_full_fp32_and_back(torch_defaults, setup):
    setup()
    before = precision.read_precision(torch)
    report = seed_all(1, strict=True)
    assert full_fp32_in_force()
    assert torch.are_deterministic_algorithms_enabled()  # strict implies deterministic
    assert report.precision is not None and report.precision.tf32_uses == []
    assert "full fp32 (TF32 off)" in report.summary()

    report = seed_all(1, deterministic=False)
    assert precision.read_precision(torch) == before
    changed = {change.name for change in report.changes}
    assert "torch.backends.cudnn.conv.fp32_precision" in changed or not before.conv_tf32


def test_strict_pins_convolutions_against_a_generic_tf32(torch_defaults):
    """The legacy switch alone leaves conv at "none", which inherits a generic "tf32"."""
    BACKENDS.fp32_precision = "tf32"
    BACKENDS.cudnn.allow_tf32 = False
    assert BACKENDS.cudnn.conv.fp32_precision == "tf32"
    seed_all(1, strict=True)
    assert BACKENDS.cudnn.conv.fp32_precision == "ieee"
    assert BACKENDS.cudnn.allow_tf32 is False  # both views agree: torch still answers


def test_deterministic_without_strict_restores_precision_but_stays_deterministic(
    torch_defaults,
):
    before = precision.read_precision(torch)
    seed_all(1, strict=True)
    report = seed_all(1, strict=False)
    assert torch.are_deterministic_algorithms_enabled()
    assert precision.read_precision(torch) == before
    assert report.precision is not None and not report.precision.strict


def test_report_shows_the_settings_torch_reads_back(torch_defaults):
    set_high()
    report = seed_all(1, deterministic=True)
    flags = report.precision.flags
    assert flags["torch.backends.cuda.matmul.allow_tf32"] == str(BACKENDS.cuda.matmul.allow_tf32)
    assert flags["torch.backends.cudnn.allow_tf32"] == str(BACKENDS.cudnn.allow_tf32)
    assert flags["torch.get_float32_matmul_precision()"] == torch.get_float32_matmul_precision()
    for node in precision.FP32_NODES:
        owner, attribute = precision._owner(torch, node)
        assert flags[f"torch.backends.{node}"] == getattr(owner, attribute)
    assert report.precision.tf32_uses == ["cuBLAS matmuls", "cuDNN convolutions", "cuDNN RNNs"]
    text = str(report)
    assert "precision torch.get_float32_matmul_precision() = high" in text
    assert f"precision {report.precision.meaning()}" in text
    assert "fp32_precision" not in text  # no raw dump of the settings they resolve to


def test_torch_refusing_to_read_a_mixed_setting_is_reported(torch_defaults):
    BACKENDS.cudnn.conv.fp32_precision = "ieee"  # rnn stays tf32: the legacy read refuses
    with pytest.raises(RuntimeError):
        BACKENDS.cudnn.allow_tf32  # noqa: B018
    report = seed_all(1, deterministic=True)
    assert "refuses to read it" in report.precision.flags["torch.backends.cudnn.allow_tf32"]
    # conv reads ieee: TF32 is off for it; cuDNN RNNs still use it (ATen's RNN descriptor
    # asks allowTF32CuDNN(RNN)), so the line does not say full fp32
    assert report.precision.tf32_uses == ["cuDNN RNNs"]
    assert "full fp32" not in report.summary()


def test_meaning_on_this_machine_without_a_gpu(torch_defaults):
    report = seed_all(1, deterministic=True)
    assert torch.cuda.is_available() is False
    meaning = report.precision.meaning()
    assert meaning.startswith("TF32 does not apply here (no CUDA GPU)")
    assert "A100/L4/H100" in meaning and "cuDNN convolutions" in meaning
    assert report.warnings == []
    # without a CUDA GPU what TF32 would do elsewhere is off-topic in the one line: -v says it
    assert report.summary() == "seed 1: random, numpy, torch (cpu) seeded; deterministic on"
    assert f"  precision {meaning}" in str(report)


@pytest.mark.parametrize(
    ("arch", "warned"),
    [
        (precision.GpuArch(0, "NVIDIA A100-SXM4-40GB", (8, 0)), True),
        (precision.GpuArch(0, "Tesla T4", (7, 5)), False),
    ],
)
def test_meaning_per_gpu_generation(torch_defaults, monkeypatch, arch, warned):
    """What the settings mean on an sm_80 and an sm_75 GPU (the GPU list is given here;
    reading it from a real GPU is the GPU test's part)."""
    monkeypatch.setattr(precision, "gpu_archs", lambda torch: [arch])
    report = seed_all(1, deterministic=True)
    lines = report.summary().splitlines()
    if warned:
        assert "cuDNN convolutions and cuDNN RNNs use TF32 here" in lines[0]
        assert lines[1].startswith(
            "  WARNING  cuDNN convolutions and cuDNN RNNs run in TF32 on cuda:0 NVIDIA"
        )
        assert "(sm_80)" in lines[1] and "--strict" in lines[1]
    else:
        assert len(lines) == 1
        assert "cuda:0 Tesla T4 (sm_75): below sm_80" in report.precision.meaning()
        # a T4 user may move to an A100: the one line says what would change there
        assert lines[0].endswith(
            "deterministic on, cuDNN convolutions and cuDNN RNNs would use TF32 on an "
            "A100/L4/H100 (not here)"
        )
    strict = seed_all(1, strict=True)
    assert strict.warnings == [] and len(strict.summary().splitlines()) == 1


# ---------------------------------------------------------------- GPU truth


@pytest.mark.gpu
def test_gpu_archs_read_from_torch():
    torch.cuda.init()
    archs = precision.gpu_archs(torch)
    assert [a.capability for a in archs] == [
        torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())
    ]


@pytest.mark.gpu
def test_gpu_tf32_changes_a_convolution_and_strict_matches_float64(torch_defaults):
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs compute capability 8.0 or newer")
    generator = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(16, 64, 32, 32, device="cuda", generator=generator)
    w = torch.randn(64, 64, 3, 3, device="cuda", generator=generator)
    reference = torch.nn.functional.conv2d(x.double(), w.double())
    scale = reference.abs().max().item()

    seed_all(0, deterministic=True)
    assert BACKENDS.cudnn.conv.fp32_precision == "tf32"  # torch's default
    tf32 = torch.nn.functional.conv2d(x, w)
    seed_all(0, strict=True)
    full = torch.nn.functional.conv2d(x, w)
    seed_all(0, deterministic=False)

    tf32_error = (tf32.double() - reference).abs().max().item() / scale
    full_error = (full.double() - reference).abs().max().item() / scale
    assert not torch.equal(tf32, full)
    assert full_error < 1e-5, full_error  # fp32 accumulation over 576 terms
    assert tf32_error > 10 * full_error, (tf32_error, full_error)


def test_cpu_matmuls_below_fp32_are_said_and_strict_pins_them(torch_defaults):
    """precision 'medium' sets oneDNN's CPU matmuls to bf16 (torch reads it back): on a CPU
    with bf16 the line says so; on one without, the meaning says they run in full fp32
    here (as ATen decides, read from torch: this CPU's own answer picks the branch);
    --strict pins oneDNN's matmuls, convolutions and RNNs to ieee (a CPU matmul then
    matches the 'highest' one bit for bit) and restores them."""
    torch.set_float32_matmul_precision("medium")
    assert BACKENDS.mkldnn.matmul.fp32_precision == "bf16"
    report = seed_all(1, deterministic=True)
    if precision.cpu_low_precision(torch)[0] is False:  # this CPU lacks bf16: oneDNN stays in fp32
        assert "CPU matmuls (bf16) run in full fp32 here (this CPU lacks it)" in (
            report.precision.meaning()
        )
        assert "below fp32" not in report.summary()
    else:
        assert "CPU matmuls (bf16) may run below fp32 here" in report.summary()
        assert "CPU matmuls (bf16)" in report.precision.meaning()
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    seed_all(1, strict=True)
    nodes = ("matmul", "conv", "rnn")
    assert all(getattr(BACKENDS.mkldnn, node).fp32_precision == "ieee" for node in nodes)
    strict = a @ b
    assert "full fp32 (TF32 off)" in seed_all(1, strict=True).summary()
    seed_all(1, deterministic=False)  # deterministic mode off: back to what it was
    assert BACKENDS.mkldnn.matmul.fp32_precision == "bf16"
    torch.set_float32_matmul_precision("highest")
    assert torch.equal(strict, a @ b)


@pytest.mark.gpu
def test_gpu_cudnn_rnns_use_tf32_by_default_and_strict_turns_it_off(torch_defaults):
    """The report counts cuDNN RNNs among TF32's users (ATen's RNN descriptor asks
    allowTF32CuDNN(RNN)): an LSTM on an sm_80+ GPU differs from float64 by TF32's error
    under torch's defaults, and by fp32's under --strict."""
    if torch.cuda.get_device_capability() < (8, 0):
        pytest.skip("TF32 needs compute capability 8.0 or newer")
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(512, 512, num_layers=2, batch_first=True).cuda()
    x = torch.randn(8, 64, 512, device="cuda")
    with torch.no_grad():
        reference = lstm.double()(x.double())[0]
        lstm.float()
        report = seed_all(0, deterministic=True)
        assert "cuDNN RNNs" in report.precision.tf32_uses
        tf32 = lstm(x)[0]
        seed_all(0, strict=True)
        full = lstm(x)[0]
    seed_all(0, deterministic=False)
    scale = reference.abs().max().item()
    tf32_error = (tf32.double() - reference).abs().max().item() / scale
    full_error = (full.double() - reference).abs().max().item() / scale
    assert full_error < 1e-5, full_error
    assert tf32_error > 10 * full_error, (tf32_error, full_error)
