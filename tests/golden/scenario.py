"""Every magic's output in one fixed session, written to stdout for `test_golden.py`.

Run in a fresh interpreter: a plain IPython shell (text output), a fake two-GPU NVML, the
real CPU torch, and the host's memory readings fixed at the OS boundary (psutil,
``/proc/self/statm``, ``/proc/meminfo``), so that the same code gives the same text on
every machine. What still varies (times, PIDs, versions) is normalised at the end. Only the
public API, the magics and the fake NVML are used: moving code inside the package must not
change a byte of this output.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import platform
import re
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

MiB = 1 << 20
GiB = 1 << 30
FIXED_RSS = 600 * MiB
FIXED_TOTAL = 16 * GiB
FIXED_AVAILABLE = 10 * GiB

sections: list[str] = []


# ---------------------------------------------------------------- the host, held still


def _hold_host_memory_still() -> None:
    import psutil

    memory = types.SimpleNamespace(total=FIXED_TOTAL, available=FIXED_AVAILABLE)
    psutil.virtual_memory = lambda: memory
    psutil.Process.memory_info = lambda self: types.SimpleNamespace(rss=FIXED_RSS)
    psutil.Process.name = lambda self: "python3"

    real_pread = os.pread
    pages = FIXED_RSS // os.sysconf("SC_PAGE_SIZE")

    def pread(fd: int, count: int, offset: int) -> bytes:
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            target = ""
        if target.endswith("/statm"):
            return f"{pages * 2} {pages} 0 0 0 0 0\n".encode()[:count]
        if target == "/proc/meminfo":  # host_ram reads it there, psutil's figures elsewhere
            kib = (FIXED_TOTAL >> 10, FIXED_AVAILABLE >> 10)
            text = "MemTotal: {} kB\nMemFree: 0 kB\nMemAvailable: {} kB\n".format(*kib)
            return text.encode()[:count]
        return real_pread(fd, count, offset)

    os.pread = pread

    from colab_gpu_guard import host_memory

    host_memory.MallocInUse.read = lambda self: FIXED_RSS // 2  # malloc's in-use bytes too
    # the resident-size reader calls libc's pread itself (keeping the GIL): through os.pread
    # here, so the stub above answers it
    host_memory._pread_keeping_the_gil = lambda: host_memory._os_pread


# ---------------------------------------------------------------- capturing


def capture(title: str, action, settle: bool = False) -> None:
    """Run `action` and keep what it printed; with `settle`, first let every recorded
    cell's NVML reading land (the tracker takes it in a thread after the cell)."""
    if settle:
        wait_for_nvml_history()
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        action()
    sections.append(f"### {title}\n{out.getvalue().rstrip()}\n")


def advice_only(title: str, shell, source: str) -> None:
    """A failing cell: only the advisor's part (the traceback's paths and line numbers
    differ between IPython versions)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        shell.run_cell(source, store_history=True)
    text = out.getvalue()
    start = text.find("CUDA advisor:")
    sections.append(f"### {title}\n{text[start:].rstrip() if start >= 0 else '(no advice)'}\n")


def cell(shell, source: str):
    return lambda: shell.run_cell(source, store_history=True)


def magic(shell, line: str):
    return cell(shell, line)


def wait_for_nvml_history() -> None:
    import colab_gpu_guard

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        records = colab_gpu_guard.memory_history()
        if records and all(record.nvml_used_after is not None for record in records):
            return
        time.sleep(0.01)


# ---------------------------------------------------------------- a stub CUDA torch


class _StubCuda:
    def __init__(self) -> None:
        self.properties = [
            types.SimpleNamespace(uuid="aaaaaaaa-1111-1111-1111-111111111111"),
            types.SimpleNamespace(uuid="bbbbbbbb-0000-0000-0000-000000000000"),
        ]
        self.stats = [
            {
                "allocated_bytes.all.current": 3 * GiB,
                "reserved_bytes.all.current": 4 * GiB,
                "allocated_bytes.all.peak": 5 * GiB,
                "num_ooms": 1,
            },
            {
                "allocated_bytes.all.current": 1536 * MiB,
                "reserved_bytes.all.current": 5 * GiB,
                "allocated_bytes.all.peak": 2 * GiB,
                "num_ooms": 0,
            },
        ]

    def is_initialized(self) -> bool:
        return True

    def device_count(self) -> int:
        return 2

    def memory_stats(self, index: int) -> dict:
        return self.stats[index]

    def get_device_properties(self, index: int):
        return self.properties[index]


def stub_cuda_torch() -> types.ModuleType:
    stub = types.ModuleType("torch")
    stub.__version__ = "2.3.0+cu121"
    stub.version = types.SimpleNamespace(cuda="12.1")
    stub.cuda = _StubCuda()
    return stub


# ---------------------------------------------------------------- the session


def main() -> None:
    for key in ("COLAB_RELEASE_TAG", "COLAB_GPU", "COLAB_BACKEND_VERSION", "CUDA_VISIBLE_DEVICES"):
        os.environ.pop(key, None)
    _hold_host_memory_still()

    from IPython.core.interactiveshell import InteractiveShell

    from colab_gpu_guard import nvml
    from tests import fake_pynvml

    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))
    shell = InteractiveShell.instance(colors="NoColor")
    shell.run_line_magic("load_ext", "colab_gpu_guard")

    capture("%seed_all 42", magic(shell, "%seed_all 42"))
    capture("%seed_all 42 --deterministic", magic(shell, "%seed_all 42 --deterministic"))
    capture("%seed_all 42 --warn-only", magic(shell, "%seed_all 42 --warn-only"))
    capture("%seed_all 42 (keeps the modes)", magic(shell, "%seed_all 42"))
    capture(
        "%seed_all 42 --no-deterministic (restores)",
        magic(shell, "%seed_all 42 --no-deterministic"),
    )
    capture("%seed_all 42 --strict -v", magic(shell, "%seed_all 42 --strict -v"))
    capture("%seed_all 42 -v (keeps strict)", magic(shell, "%seed_all 42 -v"))
    capture(
        "%seed_all 42 -v --no-deterministic (restores precision)",
        magic(shell, "%seed_all 42 -v --no-deterministic"),
    )
    capture("%seed_all 7 --every-cell", magic(shell, "%seed_all 7 --every-cell"))
    capture("%seed_all 5 (takes over per-cell)", magic(shell, "%seed_all 5"))
    capture("%seed_all --no-every-cell", magic(shell, "%seed_all --no-every-cell"))
    capture(
        "%seed_all 5 --every-cell --no-every-cell",
        magic(shell, "%seed_all 5 --every-cell --no-every-cell"),
    )
    capture("%seed_all abc", magic(shell, "%seed_all abc"))
    capture("%seed_all -1", magic(shell, "%seed_all -1"))
    capture("%gpu_advice", magic(shell, "%gpu_advice"))
    capture("%gpu_advice off", magic(shell, "%gpu_advice off"))
    capture("%gpu_advice on", magic(shell, "%gpu_advice on"))
    capture("%gpu_advice maybe", magic(shell, "%gpu_advice maybe"))

    capture(
        "cells",
        cell(
            shell,
            "import torch\n"
            "torch.manual_seed(0)\n"
            "small = torch.ones(1000)\n"
            "big = torch.zeros(256, 1024)\n"
            "view = big[:10]\n"
            "model = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.Linear(8, 4))\n"
            "batches = [torch.ones(64, 64) for _ in range(3)]",
        ),
    )
    capture("an output", cell(shell, "torch.full((128, 128), 2.0).sum()"))
    capture(
        "an output holding memory", cell(shell, "torch.ones(300, 300).shape, torch.ones(300, 300)")
    )
    capture("print", cell(shell, "print('hello')"))
    capture("print again", cell(shell, "print('hello')"))
    capture("%gpu_history", magic(shell, "%gpu_history"), settle=True)
    capture("%gpu_history --limit 2", magic(shell, "%gpu_history --limit 2"), settle=True)
    capture("%gpu_history --limit -1", magic(shell, "%gpu_history --limit -1"))
    capture("%gpu_status", magic(shell, "%gpu_status"))
    capture(
        "%gpu_status --processes --history",
        magic(shell, "%gpu_status --processes --history"),
        settle=True,
    )
    capture("%gpu_status --json", lambda: print(_normal_json(_run_json(shell))))
    capture("find_leftovers()", lambda: print(_api().find_leftovers()))
    capture("%gpu_reset --dry-run", magic(shell, "%gpu_reset --dry-run"))
    capture("%gpu_reset nosuch", magic(shell, "%gpu_reset nosuch"))
    capture("%gpu_reset big --all", magic(shell, "%gpu_reset big --all"))
    capture("%gpu_reset 1x", magic(shell, "%gpu_reset 1x"))
    capture("%gpu_reset", magic(shell, "%gpu_reset"))
    capture("%gpu_reset big", magic(shell, "%gpu_reset big"))

    advice_only(
        "an OOM cell",
        shell,
        "def step():\n"
        "    activations = torch.ones(256, 256)\n"
        "    raise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB. "
        "GPU 0 has a total capacity of 14.75 GiB of which 1.06 GiB is free. Process 4242 has "
        "3.00 GiB memory in use. Including non-PyTorch memory, this process has 10.68 GiB "
        "memory in use. Of the allocated memory 9.50 GiB is allocated by PyTorch, and "
        "2.00 GiB is reserved by PyTorch but unallocated.')\n"
        "step()",
    )
    capture("%gpu_reset after the OOM", magic(shell, "%gpu_reset"))
    for name, message in _advisor_messages():
        advice_only(name, shell, f"raise RuntimeError({message!r})")
    capture(
        "%gpu_status (after sticky-error messages; CUDA never started here)",
        magic(shell, "%gpu_status --no-leftovers"),
    )
    capture(
        "%gpu_reset (after sticky-error messages; CUDA never started here)",
        magic(shell, "%gpu_reset --dry-run"),
    )
    from colab_gpu_guard import cuda_health

    cuda_health.clear()

    capture("panel sections", lambda: _panel_sections(shell), settle=True)
    capture("panel Free memory", lambda: _panel_free(shell))
    capture("%gpu_panel --close", magic(shell, "%gpu_panel --close"))
    capture("%gpu_panel --close (none open)", magic(shell, "%gpu_panel --close"))
    capture("%gpu_reset --all --dry-run", magic(shell, "%gpu_reset --all --dry-run"))
    capture("%gpu_reset --all", magic(shell, "%gpu_reset --all"))

    real_torch = sys.modules["torch"]
    sys.modules["torch"] = stub_cuda_torch()
    try:
        capture("stub CUDA: gpu_status()", lambda: _status_text(shell))
        capture("stub CUDA: %gpu_status --json", lambda: print(_normal_json(_run_json(shell))))
        capture("stub CUDA: OOM advice", lambda: _stub_oom_advice())
    finally:
        sys.modules["torch"] = real_torch

    capture("cli: status", lambda: _cli(["status"]))
    capture("cli: status --processes", lambda: _cli(["status", "--processes"]))
    wait_for_nvml_history()
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    capture("no NVML: %gpu_status", magic(shell, "%gpu_status --no-leftovers"))
    capture("no NVML: panel", lambda: _panel_sections(shell, new=True))
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.two_gpus()))

    capture("%unload_ext", magic(shell, "%unload_ext colab_gpu_guard"))
    print(normalise("\n".join(sections)))


def _advisor_messages() -> list[tuple[str, str]]:
    return [
        (
            "a device-side assert",
            "CUDA error: device-side assert triggered\nCUDA kernel errors might be "
            "asynchronously reported at some other API call.",
        ),
        ("a forked CUDA", "Cannot re-initialize CUDA in forked subprocess. To use CUDA ..."),
        (
            "cuBLAS determinism",
            "Deterministic behavior was enabled with either `torch.use_deterministic_"
            "algorithms(True)` or `at::Context::setDeterministicAlgorithms(true)`, but this "
            "operation is not deterministic because it uses CuBLAS and you have CUDA >= 10.2. "
            "To enable deterministic behavior in this case, you must set an environment "
            "variable before running your PyTorch application: CUBLAS_WORKSPACE_CONFIG=:4096:8"
            " or CUBLAS_WORKSPACE_CONFIG=:16:8.",
        ),
        (
            "a nondeterministic op",
            "index_add_cuda_ does not have a deterministic implementation, but you set "
            "'torch.use_deterministic_algorithms(True)'.",
        ),
        (
            "an old driver",
            "The NVIDIA driver on your system is too old (found version 11040). Please update "
            "your GPU driver.",
        ),
        ("no kernel image", "CUDA error: no kernel image is available for execution on the device"),
        ("driver OOM", "CUDA error: out of memory"),
        ("no GPU", "No CUDA GPUs are available"),
        ("a CPU-only torch", "Torch not compiled with CUDA enabled"),
        (
            "tensors on two devices",
            "Expected all tensors to be on the same device, but found at least two devices, "
            "cpu and cuda:0! (when checking argument for argument mat1 in method "
            "wrapper_CUDA_addmm)",
        ),
        (
            "out of memory in disguise",
            "CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
        ),
        (
            "a late kernel error",
            "CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasSgemm( handle, "
            "opa, opb, m, n, k, &alpha, a, lda, b, ldb, &beta, c, ldc)`",
        ),
        ("a GPU number that does not exist", "CUDA error: invalid device ordinal"),
        (
            "a checkpoint from another machine's GPU",
            "Attempting to deserialize object on CUDA device 1 but torch.cuda.device_count() "
            "is 1. Please use torch.load with map_location to map your storages to an "
            "existing device.",
        ),
        ("a busy GPU", "CUDA error: all CUDA-capable devices are busy or unavailable"),
        ("NCCL", "NCCL error in: /torch/lib/c10d/ProcessGroupNCCL.cpp:260, unhandled system error"),
        ("CUDA-graph capture", "CUDA error: operation not permitted when stream is capturing"),
        (
            "bfloat16 on a T4",
            "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your "
            "Tesla T4 GPU has compute capability 7.5.",
        ),
        (
            "a request bigger than the GPU",
            "CUDA out of memory. Tried to allocate 55.57 GiB. GPU 0 has a total capacty of "
            "12.00 GiB of which 9.02 GiB is free.",
        ),
        (
            "more free than requested (torch 1.x)",
            "CUDA out of memory. Tried to allocate 2.26 GiB (GPU 0; 6.00 GiB total capacity; "
            "781.59 MiB already allocated; 3.03 GiB free; 1.24 GiB reserved in total by "
            "PyTorch)",
        ),
        ("an ECC error", "CUDA error: uncorrectable ECC error encountered"),
        (
            "host memory (no GPU advice)",
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 35184372088832 "
            "bytes.",
        ),
    ]


def _run_json(shell) -> dict:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        shell.run_cell("%gpu_status --json --no-leftovers", store_history=True)
    return json.loads(out.getvalue())


VOLATILE_KEYS = {"taken_at", "duration_ms", "pid", "python", "storage_id", "version"}


def _normal_json(data) -> str:
    def scrub(value, key=None):
        if isinstance(value, dict):
            return {
                k: ("<volatile>" if k in VOLATILE_KEYS else scrub(v, k)) for k, v in value.items()
            }
        if isinstance(value, list):
            return [scrub(item) for item in value]
        return value

    return json.dumps(scrub(data), indent=1, sort_keys=True)


def _panel_sections(shell, new: bool = False) -> None:
    import colab_gpu_guard

    widget = colab_gpu_guard.panel(shell, new=new)
    for toggle in widget.toggles.values():
        toggle.value = True
    parts = [
        ("header", widget.header),
        *[(f"device {index}", part) for index, part in enumerate(widget.devices.children)],
        ("now", widget.now),
        ("message", widget.message),
        ("leftovers", widget.leftovers.head),
        *[(f"group {row.toggle.description}", row.line) for row in widget.leftovers.rows],
        ("leftovers foot", widget.leftovers.foot),
        ("processes", widget.processes),
        ("history", widget.history),
        ("details", widget.details),
    ]
    for name, part in parts:
        value = part.value
        if name == "history":  # host memory per cell differs run to run: its shape only
            measure = re.search(r"What each cell kept</b> \(([^)]*)\)", value)
            cells = value.count('class="cgg-cell"')
            value = f"{measure.group(1) if measure else value}: {cells} cells charted"
        print(f"-- {name}\n{value}")
    print(f"-- text\n{widget!r}")


def _panel_free(shell) -> None:
    import colab_gpu_guard

    widget = colab_gpu_guard.panel(shell)
    widget.free_button.click()
    print(widget.message.value)
    widget.seed_value.value = 3
    widget.seed_button.click()
    print(widget.message.value)


def _status_text(shell) -> None:
    import colab_gpu_guard

    print(colab_gpu_guard.gpu_status(leftovers=False, history=False).to_text())
    print(colab_gpu_guard.gpu_status(leftovers=False, history=False).to_html())


def _stub_oom_advice() -> None:
    import colab_gpu_guard

    error = RuntimeError(
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 6.00 GiB total capacity; "
        "3.49 GiB already allocated; 1.04 GiB free; 3.50 GiB reserved in total by PyTorch)"
    )
    print(colab_gpu_guard.advise(error))


def _cli(argv: list[str]) -> None:
    from colab_gpu_guard.__main__ import main as cli_main

    cli_main(argv)


def normalise(text: str) -> str:
    import numpy

    # whole numbers only: a PID of 327 must not turn 32768 into <pid>68
    for value, label in (
        (str(os.getpid()), "<pid>"),
        (platform.python_version(), "<python>"),
        (numpy.__version__, "<numpy>"),
    ):
        text = re.sub(rf"(?<![\d.]){re.escape(value)}(?![\d])", label, text)
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<date time>", text)
    text = re.sub(r"\b\d\d:\d\d:\d\d\b", "<time>", text)
    text = re.sub(r"\d+\.\d+ ms\b", "<n> ms", text)
    text = re.sub(r"\(\d+ ms\)", "(<n> ms)", text)
    text = re.sub(r"took \d+ ms\b", "took <n> ms", text)
    text = re.sub(r"\b\d+\.\d{3} s\b", "<t> s", text)
    text = re.sub(r"\b\d+\.\d\d s\b", "<t> s", text)
    text = re.sub(r"collector found \d+ unreachable", "collector found <n> unreachable", text)
    text = re.sub(r"model_id='[0-9a-f]+'", "model_id='<id>'", text)
    # the history table's columns widen with the time column's text: fold the padding
    return "\n".join(re.sub(r"(?<=\S)  +", "  ", line).rstrip() for line in text.splitlines())


def _api():
    import colab_gpu_guard

    return colab_gpu_guard


if __name__ == "__main__":
    main()
