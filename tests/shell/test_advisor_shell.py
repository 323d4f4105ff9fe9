"""The CUDA error advisor in a real IPython shell: the traceback stays, the diagnosis follows,
OOM frames are released, every other error is untouched, and unload restores the handler."""

from __future__ import annotations

import gc
import re
import sys

import pytest
from IPython.core.error import UsageError
from IPython.utils.capture import capture_output

from colab_gpu_guard import advisor, cuda_health
from colab_gpu_guard.advisor import machine
from colab_gpu_guard.ipython import magics, registration_for
from colab_gpu_guard.ipython import shell_advisor as hook

OOM_MESSAGE = (
    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 14.75 GiB "
    "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 13.68 GiB "
    "memory in use. Of the allocated memory 13.50 GiB is allocated by PyTorch, and 50.00 MiB "
    "is reserved by PyTorch but unallocated."
)

# A cell whose function frame alone holds a CPU tensor when the OOM is raised.
OOM_CELL = f"""
import torch, weakref
def training_step():
    activations = torch.ones(512, 512)
    globals()["frame_tensor"] = weakref.ref(activations)
    raise torch.OutOfMemoryError({OOM_MESSAGE!r})
training_step()
"""

VALUE_ERROR_CELL = """
def parse(text):
    local_value = 41
    raise ValueError("not a number: " + text)
parse("x")
"""

STICKY_CELL = """
def forward():
    logits = [1, 2]
    raise RuntimeError("CUDA error: device-side assert triggered\\nCUDA kernel errors might be "
                       "asynchronously reported at some other API call.")
forward()
"""


def normalise(text: str) -> str:
    """Output of a cell minus what differs between two runs of it (cell numbers, colours)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    text = re.sub(r"ipython-input-\d+-", "ipython-input-N-", text)  # IPython 7
    return re.sub(r"(In|Cell In|Input In)\s*\[\d+\]", r"\1[N]", text)


@pytest.fixture(autouse=True)
def clean_state():
    cuda_health.clear()
    yield
    cuda_health.clear()


@pytest.fixture
def run(ip, capsys):
    def run_cell(source: str):
        capsys.readouterr()
        result = ip.run_cell(source, store_history=True)
        return result, capsys.readouterr().out

    return run_cell


@pytest.fixture(params=["Context", "Verbose"])
def xmode(request, ip):
    ip.run_line_magic("xmode", request.param)
    yield request.param
    ip.run_line_magic("xmode", "Context")


def shell_advisor(shell) -> hook.ShellAdvisor:
    registration = registration_for(shell)
    for instance in registration.magics:
        if isinstance(instance, magics.AdvisorMagics):
            return instance.advisor
    raise AssertionError("AdvisorMagics not loaded")


# ---------------------------------------------------------------- out of memory


def test_oom_cell_gets_traceback_diagnosis_and_its_frames_released(ip, run, xmode):
    pytest.importorskip("torch")
    result, out = run(OOM_CELL)
    assert isinstance(result.error_in_exec, Exception)
    assert type(result.error_in_exec).__name__ == "OutOfMemoryError"
    # the normal traceback first ...
    assert "OutOfMemoryError" in out and "training_step" in out
    assert out.index("training_step()") < out.index("CUDA advisor: GPU out of memory")
    # ... then the diagnosis
    assert "requested             2 GiB" in out
    assert "free on GPU 0         1.06 GiB of 14.8 GiB" in out
    assert "%gpu_reset" in out
    assert "Released the traceback frame of training_step(): 1 MiB of tensors freed on cpu" in out
    gc.collect()
    assert ip.user_ns["frame_tensor"]() is None  # the failed frame's tensor is gone
    assert callable(ip.user_ns["training_step"])  # the notebook's own names are not
    assert sys.last_value is result.error_in_exec
    assert shell_advisor(ip).last.kind == advisor.OUT_OF_MEMORY
    assert shell_advisor(ip).last.frames_released == 1


def test_without_the_advisor_the_frame_keeps_the_tensor(ip, run, xmode):
    """The control for the test above: IPython alone keeps the failed frame's tensor."""
    pytest.importorskip("torch")
    ip.run_line_magic("gpu_advice", "off")
    result, out = run(OOM_CELL)
    gc.collect()
    assert ip.user_ns["frame_tensor"]() is not None
    assert "CUDA advisor" not in out and "OutOfMemoryError" in out


# ---------------------------------------------------------------- what releasing the frames freed


@pytest.fixture
def tidy(ip):
    """The names a test's cells define are removed from the shared shell's namespace after
    it (later tests count and walk what it holds); IPython's own ``_``-names stay."""
    before = set(ip.user_ns)
    yield
    for name in [name for name in ip.user_ns if name not in before]:
        if not name.startswith("_"):
            del ip.user_ns[name]


def oom_cell(body: str) -> str:
    """A cell that defines functions (`body`) and ends by raising the OOM in them."""
    return f"import torch, weakref\nOOM = {OOM_MESSAGE!r}\n" + body


def test_the_note_names_the_function_and_the_bytes_its_frame_freed(ip, run, xmode, tidy):
    """Verbose mode reads the frames' f_locals (a snapshot on Python < 3.13) first."""
    pytest.importorskip("torch")
    cell = oom_cell(
        "def train_step():\n"
        "    activations = torch.ones(1024, 1024)\n"
        "    globals()['activations_ref'] = weakref.ref(activations)\n"
        "    globals()['activations_bytes'] = activations.untyped_storage().nbytes()\n"
        "    raise torch.OutOfMemoryError(OOM)\n"
        "train_step()\n"
    )
    result, out = run(cell)
    assert (
        "Note: Released the traceback frame of train_step(): 4 MiB of tensors freed on cpu; "
        "`%debug` on this error shows none of its local variables." in out
    )
    gc.collect()
    assert ip.user_ns["activations_ref"]() is None  # what the note says was freed is gone
    diagnosis = shell_advisor(ip).last
    assert ip.user_ns["activations_bytes"] == 4 * 2**20  # torch's own figure
    assert diagnosis.frames_released == 1
    assert diagnosis.frames_released_bytes == ip.user_ns["activations_bytes"]
    assert diagnosis.to_dict()["frames_released_bytes"] == 4 * 2**20
    page = diagnosis._repr_html_()
    assert "Released the traceback frame of train_step(): 4 MiB of tensors freed" in page


def test_a_top_level_raise_claims_no_released_frames(ip, run, tidy):
    """The cell's own frame is module-level: its locals are the notebook's namespace, which
    it keeps, so nothing is released (the quickstart's last cell)."""
    pytest.importorskip("torch")
    result, out = run(
        "import torch, weakref\n"
        "top_level = torch.ones(256, 256)\n"
        "top_level_ref = weakref.ref(top_level)\n"
        f"raise torch.OutOfMemoryError({OOM_MESSAGE!r})\n"
    )
    assert "CUDA advisor: GPU out of memory" in out
    assert "Released" not in out and "%debug" not in out
    diagnosis = shell_advisor(ip).last
    assert diagnosis.frames_released == 0 and diagnosis.frames_released_bytes == 0
    gc.collect()
    assert ip.user_ns["top_level_ref"]() is ip.user_ns["top_level"]  # the notebook keeps it


def test_a_function_frame_without_tensors_is_said_to_hold_none(ip, run, tidy):
    pytest.importorskip("torch")
    result, out = run(
        oom_cell(
            "def parse_batch(text):\n"
            "    sizes = [len(text), 3]\n"
            "    raise torch.OutOfMemoryError(OOM)\n"
            "parse_batch('abc')\n"
        )
    )
    assert (
        "Note: Released the traceback frame of parse_batch(); it held no tensors, so nothing "
        "was freed; `%debug` on this error shows none of its local variables." in out
    )
    assert "tensors freed" not in out
    diagnosis = shell_advisor(ip).last
    assert diagnosis.frames_released == 1 and diagnosis.frames_released_bytes == 0


def test_a_view_and_its_base_in_two_frames_are_counted_once(ip, run, tidy):
    pytest.importorskip("torch")
    result, out = run(
        oom_cell(
            "def forward(half):\n"
            "    raise torch.OutOfMemoryError(OOM)\n"
            "def train_step():\n"
            "    base = torch.ones(1024, 1024)\n"
            "    globals()['base_ref'] = weakref.ref(base)\n"
            "    forward(base[512:])\n"
            "train_step()\n"
        )
    )
    assert (
        "Released the traceback frames of train_step(), forward(): 4 MiB of tensors freed on "
        "cpu; `%debug` on this error shows none of their local variables." in out
    )
    gc.collect()
    assert ip.user_ns["base_ref"]() is None
    diagnosis = shell_advisor(ip).last
    assert diagnosis.frames_released == 2 and diagnosis.frames_released_bytes == 4 * 2**20


def test_tensors_still_referenced_elsewhere_are_not_counted_freed(ip, run, tidy):
    pytest.importorskip("torch")
    result, out = run(
        oom_cell(
            "weights = torch.ones(256, 256)\n"
            "def evaluate():\n"
            "    scaled = weights\n"
            "    raise torch.OutOfMemoryError(OOM)\n"
            "def train_step():\n"
            "    batch = torch.ones(512, 512)\n"
            "    scaled = weights\n"
            "    raise torch.OutOfMemoryError(OOM)\n"
            "evaluate()\n"
        )
    )
    assert (
        "Released the traceback frame of evaluate(); the memory of the tensors it held "
        "(256 KiB) is still referenced elsewhere, so nothing was freed;" in out
    )
    assert shell_advisor(ip).last.frames_released_bytes == 0
    result, out = run("train_step()")
    assert (
        "Released the traceback frame of train_step(): 1 MiB of tensors freed on cpu "
        "(256 KiB more it held is still referenced elsewhere);" in out
    )
    assert shell_advisor(ip).last.frames_released_bytes == 2**20
    assert ip.user_ns["weights"].shape == (256, 256)


def test_a_detached_alias_outside_the_frames_keeps_the_memory_and_the_note_says_so(ip, run, tidy):
    """The frame's tensor object dies, but a detached alias of it (same storage, no link
    back to the tensor, unlike a view) held by a global keeps its memory: the storage's own
    weakref says so, where the tensor's says it went."""
    pytest.importorskip("torch")
    result, out = run(
        oom_cell(
            "def step():\n"
            "    activations = torch.ones(1024, 1024)\n"
            "    globals()['tensor_ref'] = weakref.ref(activations)\n"
            "    globals()['storage_ref'] = weakref.ref(activations.untyped_storage())\n"
            "    globals()['last_activations'] = activations.detach()\n"
            "    raise torch.OutOfMemoryError(OOM)\n"
            "step()\n"
        )
    )
    gc.collect()
    assert ip.user_ns["tensor_ref"]() is None  # the tensor object is gone ...
    assert ip.user_ns["storage_ref"]() is not None  # ... its 4 MiB are not
    assert (
        "Released the traceback frame of step(); the memory of the tensors it held (4 MiB) is "
        "still referenced elsewhere, so nothing was freed;" in out
    )
    assert shell_advisor(ip).last.frames_released_bytes == 0
    run("del last_activations")
    gc.collect()
    assert ip.user_ns["storage_ref"]() is None  # the control: the alias was what kept it


# ---------------------------------------------------------------- other errors stay as they were


def test_value_error_keeps_its_traceback_for_debug_and_gets_no_diagnosis(ip, run):
    result, out = run(VALUE_ERROR_CELL)
    assert "ValueError: not a number: x" in out
    assert "CUDA advisor" not in out
    # what %debug reads: sys.last_* point at this error and its frames still have locals
    assert sys.last_value is result.error_in_exec
    assert sys.last_type is ValueError
    tb = sys.last_traceback
    frames = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    assert frames[-1].f_code.co_name == "parse"
    assert frames[-1].f_locals["local_value"] == 41
    assert frames[-1].f_locals["text"] == "x"


@pytest.mark.filterwarnings("ignore:To exit")
@pytest.mark.parametrize(
    "cell",
    [
        VALUE_ERROR_CELL,
        "1/0",
        "raise KeyError('cuda')",
        "x = (1,\n",  # incomplete input
        "1 +* 2",  # SyntaxError while compiling
        "def f():\nreturn 1",  # IndentationError
        "import nonexistent_module_xyz",
        "raise SystemExit(3)",
    ],
)
def test_other_errors_look_exactly_as_without_the_extension(ip, capsys, cell):
    ip.run_line_magic("gpu_advice", "off")
    capsys.readouterr()
    plain = ip.run_cell(cell, store_history=True)
    plain_out = capsys.readouterr()
    ip.run_line_magic("gpu_advice", "on")
    capsys.readouterr()
    advised = ip.run_cell(cell, store_history=True)
    advised_out = capsys.readouterr()
    assert normalise(advised_out.out) == normalise(plain_out.out)
    assert normalise(advised_out.err) == normalise(plain_out.err)
    assert type(advised.error_in_exec) is type(plain.error_in_exec)
    assert type(advised.error_before_exec) is type(plain.error_before_exec)


# ---------------------------------------------------------------- sticky errors


@pytest.fixture
def cuda_started(monkeypatch):
    """As in a CUDA build of torch that has started CUDA in this kernel."""
    pytest.importorskip("torch")
    from colab_gpu_guard.frameworks import torch as torch_support

    monkeypatch.setattr(torch_support, "cuda_initialized", lambda torch=None: True)
    monkeypatch.setattr(torch_support, "cuda_version", lambda torch: "12.1")


def test_sticky_error_says_restart_and_marks_the_context_broken(ip, run, cuda_started):
    result, out = run(STICKY_CELL)
    assert "RuntimeError: CUDA error: device-side assert triggered" in out
    assert "CUDA advisor: the CUDA context is broken - restart required" in out
    assert "Restart session" in out and "CUDA_LAUNCH_BLOCKING=1" in out
    assert "CrossEntropyLoss" in out
    health = cuda_health.health()
    assert health.broken and "device-side assert triggered" in health.detail
    # not an OOM: the frames stay for %debug
    tb = sys.last_traceback
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_locals["logits"] == [1, 2]


@pytest.mark.cpu_only
def test_sticky_error_while_cuda_never_started_here_does_not_mark_or_say_restart(ip, run):
    pytest.importorskip("torch")  # a CPU build: CUDA never starts in this kernel
    result, out = run(STICKY_CELL)
    assert "RuntimeError: CUDA error: device-side assert triggered" in out
    assert (
        "CUDA advisor: a CUDA error from another process or library - PyTorch's CUDA in this "
        "kernel is not affected" in out
    )
    assert "no restart is needed for this kernel" in out
    assert cuda_health.broken_reason() is None
    from colab_gpu_guard import status

    text = status.gpu_status(leftovers=False).to_text()
    assert "CUDA context: broken" not in text
    assert "CPU-only build: no CUDA" in text and "CUDA context" not in text


def test_child_process_error_in_a_cell_does_not_mark_this_kernel(ip, run, cuda_started):
    cell = (
        "from torch.multiprocessing.spawn import ProcessRaisedException\n"
        "raise ProcessRaisedException('\\n\\n-- Process 0 terminated with the following "
        "error:\\nTraceback (most recent call last):\\ntorch.AcceleratorError: CUDA error: "
        "device-side assert triggered\\n', 0, 321)\n"
    )
    result, out = run(cell)
    assert type(result.error_in_exec).__name__ == "ProcessRaisedException"
    assert "PyTorch's CUDA in this kernel is not affected" in out
    assert "raised in" in out and "process 0 (pid 321)" in out
    assert cuda_health.broken_reason() is None


# ---------------------------------------------------------------- notebook display


def test_notebook_gets_an_html_box_with_escaped_names(ip, monkeypatch):
    monkeypatch.setattr(hook, "is_notebook_shell", lambda shell: True)
    # an operation name from the message is shown in the box: it must arrive escaped
    cell = (
        'raise RuntimeError("index_add_cuda_<script> does not have a deterministic '
        "implementation, but you set 'torch.use_deterministic_algorithms(True)'.\")"
    )
    with capture_output() as captured:
        ip.run_cell(cell, store_history=True)
    assert "RuntimeError" in captured.stdout  # the traceback, as usual
    boxes = [o.data for o in captured.outputs if "text/html" in o.data]
    assert len(boxes) == 1
    page, plain = boxes[0]["text/html"], boxes[0]["text/plain"]
    assert "colab-gpu-guard-advice" in page and "deterministic" in page
    assert "<script>" not in page and "index_add_cuda_&lt;script&gt;" in page
    assert "<code>%seed_all SEED --warn-only</code>" in page
    assert "index_add_cuda_<script>" in plain
    assert plain.startswith("CUDA advisor:")


def test_terminal_shell_is_not_a_notebook(ip):
    assert not hook.is_notebook_shell(ip)

    class ZMQInteractiveShell:  # the name ipykernel's (and Colab's base) shell class has
        pass

    class ColabShell(ZMQInteractiveShell):
        pass

    assert hook.is_notebook_shell(ColabShell())


# ---------------------------------------------------------------- the handler never hides errors


def test_an_advisor_crash_still_shows_the_traceback(ip, run, monkeypatch):
    def explode(*args, **kwargs):
        raise RuntimeError("advisor bug")

    monkeypatch.setattr(advisor, "advise", explode)
    result, out = run(STICKY_CELL)
    assert "device-side assert triggered" in out and "forward()" in out
    assert "advisor bug" not in out
    assert shell_advisor(ip).enabled  # IPython did not unregister the handler


def test_a_display_crash_still_shows_the_traceback(ip, run, monkeypatch):
    def explode(self):
        raise RuntimeError("render bug")

    monkeypatch.setattr(advisor.Diagnosis, "__str__", explode)
    result, out = run(STICKY_CELL)
    assert "device-side assert triggered" in out and "render bug" not in out
    assert shell_advisor(ip).enabled


# ---------------------------------------------------------------- install, chain, restore


def test_unload_restores_the_default_handler_exactly(bare_shell):
    before = bare_shell.custom_exceptions, bare_shell.CustomTB
    bare_shell.run_line_magic("load_ext", "colab_gpu_guard")
    assert Exception in bare_shell.custom_exceptions
    assert bare_shell.CustomTB is not before[1]
    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")
    assert bare_shell.custom_exceptions is before[0]
    assert bare_shell.CustomTB is before[1]


def test_a_previous_custom_handler_is_chained_and_restored_exactly(bare_shell, capsys):
    seen = []

    def previous(shell, etype, value, tb, tb_offset=None):
        seen.append(value)
        print("previous handler ran")
        return None

    bare_shell.set_custom_exc((KeyError, RuntimeError), previous)
    before = bare_shell.custom_exceptions, bare_shell.CustomTB
    bare_shell.run_line_magic("load_ext", "colab_gpu_guard")
    assert set(bare_shell.custom_exceptions) == {KeyError, RuntimeError, Exception}

    capsys.readouterr()
    bare_shell.run_cell("raise KeyError('k')", store_history=True)
    out = capsys.readouterr().out
    assert "previous handler ran" in out and "CUDA advisor" not in out
    bare_shell.run_cell("raise RuntimeError('CUDA error: out of memory')", store_history=True)
    out = capsys.readouterr().out
    assert out.index("previous handler ran") < out.index("CUDA advisor:")
    assert [type(v) for v in seen] == [KeyError, RuntimeError]
    bare_shell.run_cell("raise ValueError('v')", store_history=True)
    out = capsys.readouterr().out
    assert "ValueError: v" in out and "previous handler ran" not in out

    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")
    assert bare_shell.custom_exceptions is before[0]
    assert bare_shell.CustomTB is before[1]


def test_reload_does_not_stack_handlers(bare_shell):
    before = bare_shell.custom_exceptions, bare_shell.CustomTB
    for _ in range(5):
        bare_shell.run_line_magic("reload_ext", "colab_gpu_guard")
    assert bare_shell.custom_exceptions == (Exception,)
    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")
    assert (bare_shell.custom_exceptions, bare_shell.CustomTB) == before
    assert bare_shell.CustomTB is before[1]


def test_a_handler_installed_over_ours_is_left_alone_on_unload(bare_shell, capsys):
    bare_shell.run_line_magic("load_ext", "colab_gpu_guard")

    def later(shell, etype, value, tb, tb_offset=None):
        print("later handler ran")

    bare_shell.set_custom_exc((ZeroDivisionError,), later)
    theirs = bare_shell.CustomTB
    bare_shell.run_line_magic("unload_ext", "colab_gpu_guard")
    assert bare_shell.CustomTB is theirs


# ---------------------------------------------------------------- %gpu_advice


def test_gpu_advice_toggles(ip, capsys):
    default = ip.custom_exceptions
    ip.run_line_magic("gpu_advice", "")
    assert "gpu_advice: on" in capsys.readouterr().out
    ip.run_line_magic("gpu_advice", "off")
    assert "gpu_advice: off" in capsys.readouterr().out
    assert Exception not in ip.custom_exceptions
    ip.run_line_magic("gpu_advice", "OFF")  # twice is fine
    ip.run_line_magic("gpu_advice", "on")
    assert "gpu_advice: on" in capsys.readouterr().out.splitlines()[-1]
    assert ip.custom_exceptions == default
    ip.run_line_magic("gpu_advice", "on")
    assert ip.custom_exceptions == default


@pytest.mark.parametrize("line", ["maybe", "on off", "--on", "1"])
def test_gpu_advice_bad_arguments(ip, line):
    before = shell_advisor(ip).enabled
    with pytest.raises(UsageError, match=r"Usage: %gpu_advice \[on\|off\]") as raised:
        ip.run_line_magic("gpu_advice", line)
    assert str(raised.value).startswith(f"expected 'on' or 'off', got {line!r}")
    assert shell_advisor(ip).enabled == before  # nothing changed


def test_gpu_advice_takes_any_case(ip):
    with capture_output() as captured:
        ip.run_line_magic("gpu_advice", "OFF")
        ip.run_line_magic("gpu_advice", "On")
    assert captured.stdout.splitlines() == ["gpu_advice: off", "gpu_advice: on"]


def test_gpu_advice_help_is_useful(ip):
    """Its help and the rest of it in docs/reference.md (its module's REFERENCE)."""
    from colab_gpu_guard.ipython.magics import advice

    doc = ip.find_line_magic("gpu_advice").__doc__ + advice.REFERENCE
    assert "%gpu_advice off" in doc and "%gpu_advice on" in doc
    assert "device-side assert" in doc and "%debug" in doc
    assert "advise(exc)" in doc


def test_the_note_names_the_users_frames_not_ipythons_or_ours(ip, run, tidy):
    """Under a cell magic (here `%%gpu_trace`, which runs the cell's body itself) the
    traceback also holds IPython's and this package's frames: the note names the user's
    function only (it listed run_cell_magic(), TraceMagics.gpu_trace(), ... on a GPU)."""
    pytest.importorskip("torch")
    result, out = run(
        "%%gpu_trace\n"
        + oom_cell(
            "def parse_batch(text):\n"
            "    sizes = [len(text), 3]\n"
            "    raise torch.OutOfMemoryError(OOM)\n"
            "parse_batch('abc')\n"
        )
    )
    assert "Note: Released the traceback frame of parse_batch();" in out, out
    for machinery in ("run_cell_magic", "TraceMagics", "gpu_trace()", "_run()"):
        assert machinery not in out.split("Note:", 1)[1], out


@pytest.mark.cpu_only
def test_cuda_on_a_machine_without_an_nvidia_driver_says_run_on_the_cpu(ip, run):
    """`.cuda()` with a CPU-only torch on a machine with no NVIDIA driver: the real error,
    advised with the real NVML door. A CUDA build of torch cannot help here, so the advice
    runs the model on the CPU (or takes a GPU runtime), never installs one."""
    pytest.importorskip("torch")
    from colab_gpu_guard import nvml

    nvml.reset()
    if not machine.gpu_presence().no_driver:
        pytest.skip("this machine has an NVIDIA driver")
    result, out = run("import torch\nmodel = torch.nn.Linear(3, 3).cuda()")
    assert "Torch not compiled with CUDA enabled" in out
    advice = out[out.index("CUDA advisor:") :]
    assert (
        "This machine has no NVIDIA GPU (no NVIDIA driver is installed), and this torch is a "
        "CPU-only build: this code can only run on the CPU here." in advice
    )
    assert "GPUs NVML sees        none: no NVIDIA driver on this machine" in advice
    assert (
        '1. Run on the CPU: `device = "cuda" if torch.cuda.is_available() else "cpu"`, then '
        "`model.to(device)` and `x.to(device)` in place of `.cuda()`." in advice
    )
    assert "2. Colab: Runtime > Change runtime type > a GPU" in advice
    assert "pip install" not in advice and "CUDA build" not in advice
    # the line the advice gives runs here
    result, out = run(
        'device = "cuda" if torch.cuda.is_available() else "cpu"\n'
        "model = torch.nn.Linear(3, 3).to(device)\nprint(next(model.parameters()).device)"
    )
    assert result.success and out.strip() == "cpu"


def test_attention_left_without_a_kernel_is_answered_in_a_real_cell(ip, run, tidy):
    """torch's own error, raised here for real: scaled_dot_product_attention allowed only the
    memory-efficient kernel, which has no CPU implementation. The traceback stays; the
    answer says why and how to let it fall back to the plain kernel."""
    pytest.importorskip("torch")
    result, out = run(
        "import torch\n"
        "from torch.nn.attention import SDPBackend, sdpa_kernel\n"
        "q = torch.randn(1, 2, 4, 8)\n"
        "with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):\n"
        "    torch.nn.functional.scaled_dot_product_attention(q, q, q)"
    )
    assert "No viable backend for scaled_dot_product_attention" in str(result.error_in_exec)
    text = normalise(out)
    assert text.index("RuntimeError: No viable backend") < text.index("CUDA advisor")
    assert f"CUDA advisor: {advisor.TITLES[advisor.ATTENTION_KERNELS]}" in text
    assert "only on a CUDA GPU" in text and "SDPBackend.MATH" in text
    fixed, _ = run(  # the fix the answer names
        "with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):\n"
        "    out = torch.nn.functional.scaled_dot_product_attention(q, q, q)"
    )
    assert fixed.error_in_exec is None and tuple(ip.user_ns["out"].shape) == (1, 2, 4, 8)
