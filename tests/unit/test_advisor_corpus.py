"""The advisor held to the errors users really hit: every real message of the corpus
(tests/fixtures/cuda_error_messages.json and cuda_error_corpus.json, verbatim, each with its
source and the cause its thread established) is answered with that cause and a fix true for
it, in a few lines of the user's words; no figure is negative or contradicts the message,
no GPU advice is given for a host or TPU error, and each framework gets its own fix."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from colab_gpu_guard import advisor, cuda_health, nvml
from colab_gpu_guard.advisor import enrich, machine
from colab_gpu_guard.frameworks import torch as torch_support
from colab_gpu_guard.units import jargon_in
from tests import fake_pynvml
from tests.advisor_corpus import ALL, CORPUS, label, make

GPU_ERRORS = [item for item in ALL if item["kind"] is not None]
NOT_GPU = [item for item in ALL if item["kind"] is None]
OTHER_FRAMEWORKS = [
    item
    for item in CORPUS
    if item["kind"] is not None and item.get("framework") in ("cupy", "jax", "tensorflow")
]


@pytest.fixture(autouse=True)
def clean():
    cuda_health.clear()
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    yield
    nvml.set_pynvml(None)
    cuda_health.clear()


def test_the_corpus_is_real_and_covers_every_family():
    assert len(ALL) >= 90 and len(CORPUS) >= 50
    for item in CORPUS:
        assert re.search(
            r"https://github\.com/[\w.-]+/[\w.-]+/(issues|pull)/\d+"
            r"|\b[\w-]+/[\w-]+ [\w/.-]+\.(py|cpp|cu)\b",
            item["source"],
        ), item["source"]
        assert item["cause"], item["message"]
        assert item["kind"] in advisor.KINDS or item["kind"] is None
    assert {item["kind"] for item in ALL} == set(advisor.KINDS) | {None}
    frameworks = {item.get("framework") for item in CORPUS}
    assert {"cupy", "jax", "tensorflow"} <= frameworks


def test_at_least_nine_in_ten_gpu_errors_are_answered():
    answered = [item for item in GPU_ERRORS if advisor.classify(make(item)) is not None]
    assert len(answered) / len(GPU_ERRORS) >= 0.9
    assert len(answered) == len(GPU_ERRORS)  # today: every one of them


@pytest.mark.parametrize("item", ALL, ids=[label(item) for item in ALL])
def test_each_message_gets_its_kind_and_details(item):
    diagnosis = advisor.classify(make(item))
    if item["kind"] is None:
        assert diagnosis is None, "no GPU advice for an error that is not a GPU error"
        return
    assert diagnosis is not None and diagnosis.kind == item["kind"]
    for key, expected in item.get("expect", {}).items():
        if isinstance(expected, int) and key.endswith("bytes"):
            assert diagnosis.details[key] == pytest.approx(expected, rel=5e-3), key
        elif key != "other_process_pids":
            assert diagnosis.details[key] == expected, key


@pytest.mark.parametrize(
    "item", [i for i in CORPUS if i["kind"]], ids=[label(i) for i in CORPUS if i["kind"]]
)
def test_the_answer_names_the_established_cause_and_fix(item):
    text = str(advisor.classify(make(item)))
    for words in item.get("says", ()):
        assert words.lower() in text.lower(), (words, item["cause"])
    for words in item.get("never", ()):
        assert words.lower() not in text.lower(), words


@pytest.mark.parametrize("item", GPU_ERRORS, ids=[label(i) for i in GPU_ERRORS])
def test_answers_are_short_and_in_the_users_words(item):
    diagnosis = advisor.classify(make(item))
    assert len(diagnosis.summary.split()) <= 75
    assert 1 <= len(diagnosis.fixes) <= 4
    for fix in diagnosis.fixes:
        assert len(fix.split()) <= 75, fix
    assert not jargon_in(str(diagnosis))


@pytest.mark.parametrize("item", GPU_ERRORS, ids=[label(i) for i in GPU_ERRORS])
def test_no_figure_is_negative_or_contradicts_the_message(item):
    diagnosis = advisor.classify(make(item))
    for key, value in diagnosis.details.items():
        if key.endswith("_bytes") and isinstance(value, int):
            assert value >= 0, key
    for label_, value in diagnosis.facts.items():
        assert not re.search(r"(^|\s)-\d", str(value)), (label_, value)
    requested = diagnosis.details.get("requested_bytes")
    free = diagnosis.details.get("free_bytes")
    total = diagnosis.details.get("total_bytes")
    if requested is not None and free is not None and free >= requested:
        assert "only" not in diagnosis.summary
    if requested is not None and total is not None and requested > total:
        assert "%gpu_reset" not in " ".join(diagnosis.fixes)
        assert "no cleanup can make it fit" in diagnosis.summary


@pytest.mark.parametrize("item", OTHER_FRAMEWORKS, ids=[label(i) for i in OTHER_FRAMEWORKS])
def test_each_framework_gets_its_own_fix(item):
    fixes = " ".join(advisor.classify(make(item)).fixes)
    assert not re.search(r"`torch\.|pytorch\.org|torch build", fixes), fixes


def test_a_request_bigger_than_the_card_says_no_cleanup_helps():
    item = next(i for i in ALL if "55.57 GiB" in i["message"])
    diagnosis = advisor.classify(make(item))
    assert "more than the whole GPU has (12 GiB)" in diagnosis.summary
    assert diagnosis.fixes[0].startswith("Make the input or the model smaller, or split")


def test_free_memory_above_the_request_is_explained_not_contradicted():
    item = next(i for i in ALL if "2.26 GiB" in i["message"])
    summary = advisor.classify(make(item)).summary
    assert "reports 3.03 GiB free" in summary and "which is more" in summary
    assert "fragmentation" in summary and "another process" in summary


def test_torch_1_0_cached_is_unused_memory_not_all_reserved():
    item = next(i for i in ALL if "576.00 KiB free" in i["message"])
    diagnosis = advisor.classify(make(item))
    assert diagnosis.facts["cached, unused"] == "31 MiB"


@pytest.mark.parametrize(
    ("started", "first_words"),
    [(False, "CUDA could not start in this kernel"), (True, "The GPU ran out of memory outside")],
)
def test_driver_oom_says_which_cause_this_kernel_shows(monkeypatch, started, first_words):
    """'CUDA error: out of memory' at CUDA's start or mid-run: told apart by whether torch
    had started CUDA here (torch.cuda.is_initialized, no CUDA call)."""
    pytest.importorskip("torch")
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch: started)
    item = next(i for i in CORPUS if i["kind"] == "cuda_driver_oom")
    diagnosis = advisor.advise(make(item))
    assert diagnosis.summary.startswith(first_words)
    assert diagnosis.facts["CUDA started in this kernel"] == ("yes (PyTorch)" if started else "no")
    stop_first = diagnosis.fixes[0].startswith("Stop other processes")
    assert stop_first is (not started)


def test_an_ecc_error_sends_the_user_to_another_gpu_first():
    item = next(i for i in CORPUS if "ECC" in i["message"])
    diagnosis = advisor.classify(make(item))
    assert diagnosis.restart_required
    assert "Disconnect and delete runtime" in diagnosis.fixes[0]
    assert "Restart session" not in diagnosis.fixes[0]


def test_memory_in_disguise_shows_the_memory(monkeypatch):
    """'Say it is memory and show the memory': NVML's figures of each GPU."""
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))
    item = next(i for i in CORPUS if "CUBLAS_STATUS_ALLOC_FAILED" in i["message"])
    diagnosis = advisor.advise(make(item))
    shown = {
        label_: value for label_, value in diagnosis.facts.items() if "memory in use" in label_
    }
    snapshot = nvml.snapshot()
    assert shown == {
        f"GPU {d.index} memory in use": (
            f"{advisor_bytes(d.memory_used)} of {advisor_bytes(d.memory_total)}"
        )
        for d in snapshot.devices
    }


def advisor_bytes(size: int) -> str:
    from colab_gpu_guard.units import format_bytes

    return format_bytes(size)


def test_memory_in_disguise_releases_the_failed_frames_like_an_oom():
    assert advisor.MEMORY_IN_DISGUISE in advisor.MEMORY_KINDS


def test_a_device_mismatch_on_one_gpu_does_not_talk_of_two():
    item = next(i for i in CORPUS if "wrapper_CUDA_addmm" in i["message"])
    assert "Two GPUs" not in " ".join(advisor.classify(make(item)).fixes)


def test_an_oom_answer_has_room_for_an_extra_section():
    """The memory trace will add its 'lines alive at the failure' to an OOM answer as a
    Section: shown after the facts, in text and HTML, kept by a rebuild, in to_dict."""
    item = next(i for i in ALL if i["kind"] == "out_of_memory")
    diagnosis = advisor.classify(make(item))
    assert diagnosis.sections == []
    diagnosis.sections.append(advisor.Section("lines alive at the failure", ["cell 3 line 2: <x>"]))
    text = str(diagnosis)
    assert text.index("lines alive at the failure:") < text.index("What to do:")
    assert "  cell 3 line 2: <x>" in text
    assert "lines alive at the failure</b>" in diagnosis._repr_html_()
    assert "&lt;x&gt;" in diagnosis._repr_html_()
    assert diagnosis.to_dict()["sections"] == [
        {"title": "lines alive at the failure", "lines": ["cell 3 line 2: <x>"]}
    ]
    from colab_gpu_guard.advisor.diagnosis import rebuild

    assert rebuild(diagnosis).sections == diagnosis.sections


@pytest.mark.parametrize("item", GPU_ERRORS, ids=[label(i) for i in GPU_ERRORS])
def test_advise_answers_every_message_without_raising(item):
    diagnosis = advisor.advise(make(item))
    assert diagnosis is not None and diagnosis.fixes
    assert not jargon_in(str(diagnosis))


def test_every_kind_has_an_enricher_or_says_why_not():
    told_by_the_message = {
        advisor.DEVICE_MISMATCH,
        advisor.GENERATOR_DEVICE,
        advisor.NCCL_ERROR,
        advisor.STREAM_CAPTURE,
    }
    assert set(enrich._ENRICHERS) | told_by_the_message == set(advisor.KINDS)


def test_driver_oom_with_this_process_on_a_gpu_in_nvml_is_mid_run(monkeypatch):
    """NVML listing this process on a GPU means CUDA had started here, whoever started it
    (the fake lists this process on GPU 1; with another PID it lists none of ours)."""
    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch: False)
    item = next(i for i in CORPUS if i["kind"] == "cuda_driver_oom")
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))
    listed = advisor.advise(make(item))
    assert listed.facts["CUDA started in this kernel"] == "yes (NVML lists this process on a GPU)"
    assert listed.summary.startswith("The GPU ran out of memory outside")
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus(this_pid=os.getpid() + 1)))
    absent = advisor.advise(make(item))
    assert absent.facts["CUDA started in this kernel"] == "no"
    assert absent.summary.startswith("CUDA could not start in this kernel")


def test_an_ecc_error_from_elsewhere_still_sends_to_another_gpu_and_marks_nothing():
    diagnosis = advisor.advise(RuntimeError("CUDA error: uncorrectable ECC error encountered"))
    if diagnosis.kind == advisor.STICKY_ERROR_ELSEWHERE:  # PyTorch never started CUDA here
        assert cuda_health.broken_reason() is None
    assert "Disconnect and delete runtime" in diagnosis.fixes[0]


@pytest.mark.parametrize(
    ("mode", "first_words"),
    [
        (fake_pynvml.NVML_COMPUTEMODE_DEFAULT, "CUDA could not use the GPU, and no GPU"),
        (3, "CUDA could not use the GPU: it is in exclusive-process mode"),  # Exclusive Process
        (2, "A GPU here is in the 'Prohibited' compute mode"),
    ],
)
def test_a_busy_gpu_is_told_apart_by_its_compute_mode(mode, first_words):
    world = fake_pynvml.one_gpu()
    world.gpus[0].compute_mode = mode
    nvml.set_pynvml(fake_pynvml.install(world))
    item = next(i for i in CORPUS if i["kind"] == "device_busy")
    diagnosis = advisor.advise(make(item))
    assert diagnosis.summary.startswith(first_words)
    assert diagnosis.facts["GPU 0 compute mode"] == nvml.COMPUTE_MODES[mode]


@pytest.mark.parametrize(
    "error",
    [
        OSError(16, "Device or resource busy"),
        RuntimeError("mat1 and mat2 shapes cannot be multiplied (64x512 and 256x10)"),
        RuntimeError("expected scalar type Float but found Double"),
        RuntimeError("The service is busy or unavailable, retry later"),
        ValueError("invalid literal for int() with base 10: 'cuda'"),
    ],
)
def test_look_alikes_that_are_not_gpu_errors_get_no_advice(error):
    assert advisor.classify(error) is None


def test_a_device_mismatch_on_a_mac_names_mps_not_cuda():
    diagnosis = advisor.classify(
        RuntimeError(
            "Expected all tensors to be on the same device, but found at least two devices, "
            "mps:0 and cpu!"
        )
    )
    assert "`device = 'mps'`" in diagnosis.fixes[0]


def test_a_generator_on_a_mac_is_a_gpu_named_mps_not_cuda():
    """ATen's check_generator names device types: on a Mac, 'mps' is the GPU."""
    drawn_on_gpu = advisor.classify(
        RuntimeError("Expected a 'mps' device type for generator but found 'cpu'")
    )
    assert drawn_on_gpu.summary.startswith("Random numbers were drawn on the GPU")
    assert "torch.Generator(device='mps')" in drawn_on_gpu.fixes[0]
    assert "cuda" not in " ".join(drawn_on_gpu.fixes)
    generator_on_gpu = advisor.classify(
        RuntimeError("Expected a 'cpu' device type for generator but found 'mps'")
    )
    assert "with a `torch.Generator` on the GPU" in generator_on_gpu.summary
    assert "not one made with `device='mps'`" in generator_on_gpu.fixes[0]


def test_a_per_process_limit_is_named_as_the_cause_not_fragmentation():
    """torch's template with set_per_process_memory_fraction (c10/cuda/CUDACachingAllocator.cpp:
    allowed_info = format_size(allowed_memory_maximum) + " allowed; ")."""
    diagnosis = advisor.classify(
        RuntimeError(
            "CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.90 GiB total capacity; "
            "1.50 GiB already allocated; 13.80 GiB free; 2.00 GiB allowed; 1.52 GiB reserved "
            "in total by PyTorch)"
        )
    )
    assert diagnosis.facts["allowed for this process"] == "2 GiB"
    assert "set_per_process_memory_fraction" in diagnosis.summary
    assert "fragmentation" not in diagnosis.summary
    assert diagnosis.fixes[0].startswith("Raise this process's limit")


@pytest.mark.parametrize(
    "message",
    [
        "CUDA error: CUDA-capable device(s) is/are busy or unavailable",  # CUDA 11+'s wording
        "CUDA error: all CUDA-capable devices are busy or unavailable",
    ],
)
def test_each_wording_of_a_busy_gpu_is_recognised(message):
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))
    assert advisor.classify(RuntimeError(message)).kind == advisor.DEVICE_BUSY


ERROR_803 = (
    "Unexpected error from cudaGetDeviceCount(). Did you run some cuda functions before "
    "calling NumCudaDevices() that might have already set an error? Error 803: system has "
    "unsupported display driver / cuda driver combination"
)


def _machine_files(tmp_path, monkeypatch, module: str, libcuda: str) -> None:
    """This machine's /sys/module/nvidia/version (or /proc/driver/nvidia/version) and this
    process's /proc/self/maps with a driver's libcuda mapped: the real maps file, with the
    lines the loader adds for libcuda (no NVIDIA driver here: the one fake)."""
    version_file = tmp_path / "version"
    version_file.write_text(module)
    maps = tmp_path / "maps"
    proc = Path("/proc/self/maps")
    real = proc.read_text() if proc.exists() else ""
    mapped = "".join(
        f"7f3c8a{n}00000-7f3c8a{n}20000 {perms} 00000000 08:01 1312 {libcuda}\n"
        for n, perms in enumerate(("r--p", "r-xp", "rw-p"))
    )
    maps.write_text(real + mapped if libcuda else real)
    monkeypatch.setattr(machine, "MODULE_VERSION_FILES", (str(version_file),))
    monkeypatch.setattr(machine, "PROCESS_MAPS", str(maps))


def test_driver_parts_reads_this_machines_files(tmp_path, monkeypatch):
    """The kernel module's version as /sys and /proc write it (proprietary and open
    modules), the libcuda from the memory map with the version in its file name; none here."""
    assert machine.driver_parts().libcuda_path is None  # this process: no libcuda mapped
    open_module = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  545.23.08  Release Build  "
        "(dvs-builder@U16-I3-A16-1-1)  Mon Nov  6 23:37:57 UTC 2023\nGCC version:  gcc 11.4.0\n"
    )
    for module, libcuda, expected in [
        ("550.54.15\n", "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15", ("550.54.15",) * 2),
        (
            open_module,
            "/usr/local/cuda-12.5/compat/libcuda.so.555.42.06",
            ("545.23.08", "555.42.06"),
        ),
        (
            "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 2023",
            "",
            ("535.104.05", None),
        ),
        ("550.54.15", "/usr/lib/wsl/lib/libcuda.so.1", ("550.54.15", None)),
        (
            "550.54.15",
            "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15 (deleted)",
            ("550.54.15",) * 2,
        ),
    ]:
        _machine_files(tmp_path, monkeypatch, module, libcuda)
        parts = machine.driver_parts()
        assert (parts.kernel_module, parts.libcuda) == expected, module
        assert parts.libcuda_path == (libcuda.removesuffix(" (deleted)") or None)


def test_error_803_names_the_two_versions_and_the_copy_to_take_off_the_library_path(
    tmp_path, monkeypatch
):
    """CUDA error 803 (cudaErrorSystemDriverMismatch): the kernel module and the libcuda
    this process loaded are of different versions. With a compatibility package's libcuda
    first on LD_LIBRARY_PATH the answer names that directory; with the system's own libcuda
    (a driver updated without a reboot, NVML failing the same way) it says to restart."""
    compat = "/usr/local/cuda-12.5/compat"
    _machine_files(tmp_path, monkeypatch, "545.23.08\n", f"{compat}/libcuda.so.555.42.06")
    monkeypatch.setenv("LD_LIBRARY_PATH", f"/opt/x:{compat}")
    diagnosis = advisor.advise(RuntimeError(ERROR_803))
    assert diagnosis.kind == advisor.DRIVER_VERSIONS
    assert diagnosis.summary == (
        "CUDA cannot start: the NVIDIA driver running is 545.23.08, but this process loaded "
        "the CUDA driver library (libcuda) of 555.42.06."
    )
    assert diagnosis.facts["NVIDIA driver running"] == "545.23.08"
    assert diagnosis.facts["libcuda loaded"] == f"555.42.06 ({compat}/libcuda.so.555.42.06)"
    assert diagnosis.fixes[0].startswith(f"This process loaded libcuda from `{compat}`")
    assert "take that directory off `LD_LIBRARY_PATH`" in diagnosis.fixes[0]
    assert diagnosis.fixes[1].startswith("Restart the machine")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/opt/x")  # found through ld.so.conf.d instead
    diagnosis = advisor.advise(RuntimeError(ERROR_803))
    assert "it is not on `LD_LIBRARY_PATH`" in diagnosis.fixes[0]
    assert "/etc/ld.so.conf.d/" in diagnosis.fixes[0]

    system = "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15"
    _machine_files(tmp_path, monkeypatch, "535.104.05", system)
    mismatch = fake_pynvml.FakeWorld(init_error=fake_pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH)
    nvml.set_pynvml(fake_pynvml.install(mismatch))
    diagnosis = advisor.advise(RuntimeError(ERROR_803))
    assert (
        "is 535.104.05, but this process loaded the CUDA driver library (libcuda) of 550.54.15"
        in (diagnosis.summary)
    )
    assert diagnosis.facts["nvidia-smi (NVML)"] == (
        "fails the same way: 'Driver/library version mismatch'"
    )
    assert diagnosis.fixes[0].startswith("Restart the machine: after an NVIDIA driver update")
    assert "LD_LIBRARY_PATH" in diagnosis.fixes[1]
    assert jargon_in(str(diagnosis)) == []


def test_error_803_without_a_driver_to_read_says_what_the_error_means():
    """No NVIDIA driver here: no version is claimed, the cause is the error's own meaning."""
    diagnosis = advisor.advise(RuntimeError(ERROR_803))
    assert diagnosis.summary == (
        "CUDA cannot start: the NVIDIA driver running and the CUDA driver library this "
        "process loaded (libcuda) are different versions."
    )
    assert not {"NVIDIA driver running", "libcuda loaded", "nvidia-smi (NVML)"} & set(
        diagnosis.facts
    )


def test_no_cudnn_engine_names_bfloat16_only_where_a_gpu_here_is_older_than_ampere():
    """torch's 'GET was unable to find an engine': memory first; bfloat16 on a GPU before
    compute capability 8.0 (NVML's figure) as the other cause, and not on an A100."""
    item = next(i for i in CORPUS if i["message"].startswith("GET was unable"))
    world = fake_pynvml.one_gpu()  # a Tesla T4, 7.5
    nvml.set_pynvml(fake_pynvml.install(world))
    t4 = advisor.advise(make(item))
    assert t4.summary.startswith("cuDNN tried each way it has to run this convolution")
    assert t4.summary.endswith(
        "The GPU here is of compute capability 7.5, where a bfloat16 convolution can fail "
        "this way too."
    )
    assert t4.facts["GPU 0"] == "Tesla T4, compute capability 7.5"
    assert t4.fixes[0].startswith("Run `%gpu_reset`")
    assert t4.fixes[-1].startswith("If this convolution runs in bfloat16: bfloat16 is not")
    world.gpus[0].name, world.gpus[0].capability = "NVIDIA A100-SXM4-40GB", (8, 0)
    nvml.set_pynvml(fake_pynvml.install(world))
    a100 = advisor.advise(make(item))
    assert "bfloat16" not in a100.summary + " ".join(a100.fixes[2:])
    assert "the cuDNN install" in a100.fixes[-1]
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))  # NVML says nothing
    unknown = advisor.advise(make(item))
    assert "GPU 0" not in unknown.facts
    assert "a T4 is 7.5" in unknown.fixes[-1] and "cuDNN loaded" in unknown.fixes[-1]


def test_a_refused_launch_is_not_memory_and_names_the_gpu_to_report():
    item = next(i for i in CORPUS if i["kind"] == advisor.LAUNCH_RESOURCES)
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))
    diagnosis = advisor.advise(make(item))
    assert diagnosis.facts["GPU 0"] == "Tesla T4, compute capability 7.5"
    assert "not GPU memory" in diagnosis.summary
    assert not any("%gpu_reset" in fix for fix in diagnosis.fixes)
    assert not diagnosis.restart_required


def test_cuda_unknown_at_start_says_the_driver_runs_where_nvml_sees_the_gpu():
    """torch's 'CUDA unknown error' at CUDA's start (cuInit gave error 999): where NVML lists
    the GPU, the driver runs and its unified-memory part is what failed; no CPU fallback is
    offered as the fix, as for a runtime without a GPU."""
    item = next(i for i in CORPUS if i["message"].startswith("CUDA unknown error"))
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))
    diagnosis = advisor.advise(make(item))
    assert diagnosis.facts["GPUs NVML sees"] == "1"
    assert "NVML sees 1 NVIDIA GPU, so the driver runs: its unified-memory part" in (
        diagnosis.summary
    )
    assert not any(fix.startswith("Run on the CPU") for fix in diagnosis.fixes)


def test_attention_without_a_kernel_says_whether_this_gpu_has_flash_attention():
    """On a T4 (7.5) PyTorch has no flash-attention kernel (it needs 8.0): the answer says
    so and names the memory-efficient kernel; on an A100 it names what flash attention
    needs instead, the warnings being the user's to read."""
    item = next(i for i in CORPUS if i["source"].endswith("pytorch/issues/117354"))
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.one_gpu()))
    t4 = advisor.advise(make(item))
    assert t4.facts["GPU 0"] == "Tesla T4, compute capability 7.5"
    assert "compute capability 7.5) has no flash-attention kernel" in t4.fixes[-1]
    assert "SDPBackend.EFFICIENT_ATTENTION" in t4.fixes[-1]
    world = fake_pynvml.one_gpu()
    world.gpus[0].name, world.gpus[0].capability = "NVIDIA A100-SXM4-40GB", (8, 0)
    nvml.set_pynvml(fake_pynvml.install(world))
    a100 = advisor.advise(make(item))
    assert "has no flash-attention kernel" not in str(a100)
    assert "float16 or bfloat16" in a100.fixes[-1]
