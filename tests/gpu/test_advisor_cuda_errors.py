"""The advisor against real CUDA errors, each in a fresh subprocess (a device-side assert
ruins the CUDA context of the process it happens in). Skipped without a CUDA device."""

from __future__ import annotations

import os
import re
import sys

import pytest

from tests.child import run_script

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def test_real_device_side_assert_says_restart_and_status_reports_broken_quickly():
    result, output = run_script(
        """
        ip.run_cell(
            "import torch\\n"
            "x = torch.zeros(2, device='cuda')[torch.tensor([5], device='cuda')]\\n"
            "torch.cuda.synchronize()\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        started = time.monotonic()
        state = cuda_health.health().state
        status_health, status_text = None, ""
        try:
            from colab_gpu_guard import status
        except ImportError:
            status = None
        if status is not None:
            snapshot = status.gpu_status(leftovers=False)
            status_health, status_text = snapshot.torch.health, str(snapshot)
        elapsed = time.monotonic() - started
        error = type(sys.last_value).__name__  # %gpu_reset below drops sys.last_value
        probed = cuda_health.health(probe=True, timeout=5.0)  # a broken context fails it
        from IPython.utils.capture import capture_output
        with capture_output() as captured:
            ip.run_line_magic("gpu_reset", "")
        report(state=state, status_health=status_health, status_text=status_text,
               elapsed=elapsed, error=error,
               probed=[probed.state, probed.detail], reset_text=captured.stdout,
               total=time.monotonic() - started)
        """
    )
    assert "device-side assert triggered" in output
    assert "CUDA advisor: the CUDA context is broken - restart required" in output
    assert "Restart session" in output and "CUDA_LAUNCH_BLOCKING=1" in output
    assert output.index("Traceback") < output.index("CUDA advisor:")
    assert result["state"] == "broken"
    if result["status_health"] is not None:
        assert result["status_health"] == "broken"
        assert "broken" in result["status_text"].lower()
    assert result["elapsed"] < 10.0
    assert result["probed"][0] == "broken", result["probed"]  # the probe keeps the mark
    assert "device-side assert triggered" in result["probed"][1]
    assert "CUDA steps skipped" in result["reset_text"]
    assert "restart the runtime" in result["reset_text"]
    assert result["total"] < 30.0


def test_real_cross_entropy_label_out_of_range_is_a_sticky_error():
    result, output = run_script(
        """
        ip.run_cell(
            "import torch, torch.nn.functional as F\\n"
            "logits = torch.randn(4, 3, device='cuda')\\n"
            "labels = torch.tensor([0, 1, 2, 3], device='cuda')  # 3 is out of range\\n"
            "loss = F.cross_entropy(logits, labels)\\n"
            "loss.item()\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        report(state=cuda_health.health().state)
        """
    )
    assert "restart required" in output and "CrossEntropyLoss" in output
    assert result["state"] == "broken"


def test_real_oom_gets_diagnosis_and_memory_returns_to_its_prior_level():
    result, output = run_script(
        """
        import torch
        torch.zeros(1, device="cuda")  # start CUDA before the baseline
        base = torch.cuda.memory_allocated()
        cell = (
            "import torch\\n"  # the cell runs in the shell's namespace, not this script's
            "def step():\\n"
            "    kept = torch.empty(256 * 2**20, dtype=torch.uint8, device='cuda')\\n"
            "    huge = torch.empty(2**50, dtype=torch.uint8, device='cuda')\\n"
            "step()\\n"
        )
        ip.run_cell(cell, store_history=True)
        error = type(sys.last_value).__name__
        after = torch.cuda.memory_allocated()
        ip.run_line_magic("gpu_advice", "off")  # the control: IPython alone keeps `kept`
        ip.run_cell(cell, store_history=True)
        after_plain = torch.cuda.memory_allocated()
        report(base=base, after=after, after_plain=after_plain, error=error)
        """
    )
    assert result["error"] == "OutOfMemoryError"
    assert "CUDA advisor: GPU out of memory" in output
    assert "requested" in output and "1024 TiB" in output
    # 1024 TiB is more than the whole GPU: the answer says no cleanup helps
    assert "more than the whole GPU has" in output and "no cleanup can make it fit" in output
    # the note's figure is what the weakrefs proved freed: `kept`, on the GPU
    assert "Released the traceback frame of step(): 256 MiB of tensors freed on cuda:0" in output
    # the kernel is never filed under other processes (listed as 'this process', or as
    # 'Process N' inside a container); the only other process is this test runner, once
    # earlier GPU tests started CUDA in it (as seen on an H100: "pid 468 (808 MiB)")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        assert "other processes" not in output or f"pid {os.getpid()} " in output, output
    else:
        assert "stop them" not in output, output[-3000:]
    assert result["after"] == result["base"]
    assert result["after_plain"] >= result["base"] + 256 * 2**20


def test_real_forked_cuda_error_is_diagnosed_and_the_kernel_stays_ok():
    result, output = run_script(
        """
        ip.run_cell(
            "import functools, multiprocessing, torch\\n"
            "x = torch.ones(1, device='cuda')  # CUDA starts in the kernel\\n"
            "# a function the pool can pickle (one defined in a cell is not importable)\\n"
            "touch = functools.partial(torch.ones, device='cuda')\\n"
            "with multiprocessing.get_context('fork').Pool(1) as pool:\\n"
            "    pool.map(touch, [1])\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        report(error=type(sys.last_value).__name__, cause=type(sys.last_value.__cause__).__name__,
               state=cuda_health.health(probe=True, timeout=5.0).state)
        """
    )
    assert result["error"] == "RuntimeError" and result["cause"] == "RemoteTraceback"
    assert "Cannot re-initialize CUDA in forked subprocess" in output
    assert "CUDA advisor: CUDA used in a forked subprocess" in output
    assert re.search(r"start method +not chosen yet \(the default here is \w+\)", output)
    assert re.search(r"CUDA initialised here +yes", output)
    assert "Raised in a child process and raised again here." in output
    assert result["state"] == "ok"  # the kernel's own context is fine


def test_real_illegal_address_is_a_sticky_error_of_this_process():
    result, output = run_script(
        """
        ip.run_cell(
            "import torch\\n"
            "base = torch.zeros(1024, device='cuda')\\n"
            "class FarOff:  # element 1 lies 64 GiB past a 4 KiB allocation\\n"
            "    __cuda_array_interface__ = {'shape': (2,), 'typestr': '<f4', 'version': 2,\\n"
            "        'data': (base.data_ptr(), False), 'strides': (2**36,)}\\n"
            "far = torch.as_tensor(FarOff(), device='cuda')\\n"
            "(far * 2).cpu()\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        error = getattr(sys, "last_value", None)
        report(error=type(error).__name__ if error is not None else None,
               message=str(error), state=cuda_health.health().state)
        """
    )
    if result["error"] is None:
        pytest.skip("the out-of-range read did not fault on this GPU")
    assert "an illegal memory access was encountered" in result["message"], result
    assert "CUDA advisor: the CUDA context is broken - restart required" in output
    assert re.search(r"CUDA error +an illegal memory access was encountered", output)
    assert result["state"] == "broken"


def test_real_device_mismatch_names_the_argument_and_leaves_cuda_usable():
    result, output = run_script(
        """
        ip.run_cell(
            "import torch\\n"
            "weights = torch.ones(3, 3, device='cuda')\\n"
            "batch = torch.ones(2, 3)  # left on the CPU\\n"
            "batch @ weights\\n",
            store_history=True,
        )
        from colab_gpu_guard import cuda_health
        error = getattr(sys, "last_value", None)
        report(message=str(error), state=cuda_health.health(probe=True, timeout=5.0).state)
        """
    )
    assert "same device" in result["message"], result
    assert "CUDA advisor: tensors on different devices" in output
    assert "model.to(device)" in output
    assert output.index("Traceback") < output.index("CUDA advisor:")
    assert result["state"] == "ok"


def test_real_gpu_number_past_the_last_says_which_exist():
    result, output = run_script(
        """
        import torch
        count = torch.cuda.device_count()
        ip.run_cell(f"import torch\\ntorch.zeros(1, device='cuda:{count}')\\n",
                    store_history=True)
        error = getattr(sys, "last_value", None)
        report(message=str(error), count=count)
        """
    )
    if "invalid device ordinal" not in result["message"]:
        pytest.skip(f"this torch words it otherwise: {result['message'][:200]!r}")
    assert "CUDA advisor: a GPU number this runtime does not have" in output
    assert "torch.cuda.device_count()" in output


def test_real_memory_in_disguise_shows_nvmls_memory_beside_cudas():
    """The GPU memory the answer shows (NVML) checked against CUDA's own figure."""
    result, output = run_script(
        """
        import torch
        free, total = torch.cuda.mem_get_info(0)
        ip.run_cell(
            "raise RuntimeError('CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling "
            "`cublasCreate(handle)`')",
            store_history=True,
        )
        report(free=free, total=total)
        """
    )
    assert "CUDA advisor: a CUDA library failed, most likely for lack of GPU memory" in output
    match = re.search(r"GPU 0 memory in use +(\S+ \S+) of (\S+ \S+)", output)
    if match is None:
        pytest.skip("NVML reports no memory figures here")
    from colab_gpu_guard.advisor import parse_size

    used, total = parse_size(match.group(1)), parse_size(match.group(2))
    cuda_used = result["total"] - result["free"]
    assert abs(total - result["total"]) <= 0.03 * result["total"]
    assert abs(used - cuda_used) <= max(512 * 2**20, 0.05 * result["total"]), (used, cuda_used)


def test_real_shuffling_loader_on_a_cuda_default_device_and_the_fixes_it_gives():
    """A DataLoader with shuffle=True after torch.set_default_device('cuda'): the sampler's
    CPU generator meets a draw on the GPU. The answer's two fixes each make the loader run:
    a generator on the GPU, or the CPU as the default device again. Then the reverse: a
    CUDA generator for a loader on a CPU default device, fixed by a CPU generator."""
    result, output = run_script(
        """
        ip.run_cell(
            "import torch, colab_gpu_guard\\n"
            "from torch.utils.data import DataLoader, TensorDataset\\n"
            "data = TensorDataset(torch.arange(8.0, device='cpu'))\\n"
            "torch.set_default_device('cuda')\\n"
            "next(iter(DataLoader(data, batch_size=4, shuffle=True)))\\n",
            store_history=True,
        )
        first = str(getattr(sys, "last_value", None))

        def batches(generator="", failing=False):  # a whole epoch, or the error it raised
            loader = f"DataLoader(data, batch_size=4, shuffle=True{generator})"
            ran = ip.run_cell(f"len(list({loader}))", store_history=failing)
            return str(getattr(sys, "last_value", None)) if failing else ran.result

        on_gpu = batches(", generator=torch.Generator(device='cuda')")
        seeded = batches(", generator=colab_gpu_guard.dataloader_generator(device='cuda')")
        ip.run_cell("torch.set_default_device('cpu')")
        back = batches()
        second = batches(", generator=torch.Generator(device='cuda')", failing=True)
        on_cpu = batches(", generator=torch.Generator().manual_seed(0)")
        report(first=first, second=second, on_gpu=on_gpu, seeded=seeded, back=back, on_cpu=on_cpu)
        """
    )
    assert "Expected a 'cuda' device type for generator but found 'cpu'" in result["first"]
    assert "Expected a 'cpu' device type for generator but found 'cuda'" in result["second"]
    assert (result["on_gpu"], result["seeded"], result["back"], result["on_cpu"]) == (2, 2, 2, 2)
    assert output.count("CUDA advisor: a random generator on another device than its draws") == 2
    assert "generator=torch.Generator(device='cuda')" in output
    assert "colab_gpu_guard.dataloader_generator(device='cuda')" in output
    assert "torch.Generator().manual_seed(seed)" in output


def test_real_driver_halves_read_as_nvml_and_cuda_see_them():
    """What the answer to error 803 reads from this machine, on a healthy one: the kernel
    module's version is NVML's driver version, and the libcuda CUDA loaded is of that
    version (a mismatch is the error itself, so it cannot be raised here for real)."""
    result, _ = run_script(
        """
        import torch
        torch.zeros(1, device="cuda")
        from colab_gpu_guard import nvml
        from colab_gpu_guard.advisor import machine
        parts = machine.driver_parts()
        report(parts=list(parts), nvml=nvml.snapshot(processes=False).driver_version,
               details=machine.driver_versions_details())
        """
    )
    module, path, library = result["parts"]
    assert module == result["nvml"], result
    assert path and "libcuda.so" in path, result
    if library is not None:  # a versioned file name (WSL's libcuda.so.1 carries none)
        assert library == module, result
    assert result["details"]["nvml_mismatch"] is False


def test_real_cublas_and_cudnn_are_torchs_own_on_a_healthy_machine():
    """After a real matrix multiply and convolution, the check reads the cuBLAS and cuDNN
    this process mapped, and on a healthy torch it finds no copy other than torch's own:
    no fix would be put first (no false alarm on every GPU machine)."""
    result, _ = run_script(
        """
        import torch
        a = torch.ones(64, 64, device="cuda")
        (a @ a).sum().item()
        torch.nn.functional.conv2d(torch.ones(1, 1, 8, 8, device="cuda"),
                                   torch.ones(1, 1, 3, 3, device="cuda")).sum().item()
        from colab_gpu_guard.advisor import cuda_libraries
        checks = {name: cuda_libraries.check(name) for name in ("cuBLAS", "cuDNN")}
        report(checks={name: [list(found.loaded), list(found.installed),
                              [list(m) for m in found.mismatched], list(found.outside),
                              cuda_libraries.first_fix(found)]
                       for name, found in checks.items()},
               cudnn=torch.backends.cudnn.version())
        """
    )
    for name, (loaded, _installed, _mismatched, _outside, fix) in result["checks"].items():
        assert loaded, (name, result)
        assert fix is None, (name, result)


def test_real_attention_with_only_flash_allowed_on_float32_says_why_and_how():
    """Flash attention takes float16 and bfloat16 only: allowed alone, on float32 inputs,
    torch warns why each kernel refused and raises "No available kernel". The answer follows
    the traceback; on a GPU below compute capability 8.0 it says PyTorch has no flash kernel
    there. CUDA stays usable."""
    result, output = run_script(
        """
        ip.run_cell(
            "import torch\\n"
            "from torch.nn.attention import SDPBackend, sdpa_kernel\\n"
            "q = torch.randn(1, 2, 16, 64, device='cuda')\\n"
            "with sdpa_kernel(SDPBackend.FLASH_ATTENTION):\\n"
            "    torch.nn.functional.scaled_dot_product_attention(q, q, q)\\n",
            store_history=True,
        )
        import torch
        from colab_gpu_guard import cuda_health
        error = getattr(sys, "last_value", None)
        report(
            message=str(error),
            capability=list(torch.cuda.get_device_capability()),
            state=cuda_health.health(probe=True, timeout=5.0).state,
        )
        """
    )
    assert "No available kernel" in result["message"], result
    assert "CUDA advisor: scaled_dot_product_attention had no kernel it may use" in output
    assert output.index("Traceback") < output.index("CUDA advisor:")
    assert "SDPBackend.MATH" in output
    if tuple(result["capability"]) < (8, 0):
        assert "has no flash-attention kernel in PyTorch" in output
    else:
        assert "float16 or bfloat16" in output
    assert result["state"] == "ok"
