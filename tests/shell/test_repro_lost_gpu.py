"""%repro in a real shell says what NVML could not do: a lost GPU, a GPU without a name,
NVML failing to count the GPUs (never "GPUs: None (sm_?)")."""

from __future__ import annotations

import pytest

from colab_gpu_guard import nvml
from tests import fake_pynvml


@pytest.fixture(autouse=True)
def real_nvml_after():
    yield
    nvml.set_pynvml(None)


def test_repro_names_a_lost_gpu_and_why_a_name_is_missing(ip, capsys):
    unknown = fake_pynvml.NVML_ERROR_UNKNOWN
    world = fake_pynvml.FakeWorld(
        gpus=[
            fake_pynvml.FakeGpu(lost="handle"),
            fake_pynvml.FakeGpu(fail={"nvmlDeviceGetName": unknown}),
        ]
    )
    nvml.set_pynvml(fake_pynvml.install(world))
    ip.run_line_magic("repro", "")
    out = capsys.readouterr().out
    assert "None (sm_" not in out, out
    assert "GPUs: GPU 0 lost (NVML cannot reach it), GPU 1 (NVML gave no name: " in out, out


def test_repro_says_nvml_failed_to_count(ip, capsys):
    world = fake_pynvml.FakeWorld(
        gpus=[fake_pynvml.FakeGpu()],
        fail={"nvmlDeviceGetCount": fake_pynvml.NVML_ERROR_UNKNOWN},
    )
    nvml.set_pynvml(fake_pynvml.install(world))
    ip.run_line_magic("repro", "")
    out = capsys.readouterr().out
    assert "GPUs: no GPU listed: NVML could not count the GPUs (" in out, out
    assert "NVML sees none" not in out
