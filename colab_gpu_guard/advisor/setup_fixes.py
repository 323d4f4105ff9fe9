"""The prose of the errors of setup and hardware: tensors on two devices, a random generator
on another device than its draws, a GPU number that does not exist, a busy GPU, NCCL, a
kernel launch asking more than the GPU gives, attention left without a kernel, CUDA-graph
capture, a GPU too old for a feature, a CUDA library missing or of the wrong version, and a
driver whose two halves differ. Built from the details parsed out of the message
(recognise.py) and, for the driver and the GPU, read from this machine (setup_facts.py)."""

from __future__ import annotations

from typing import Any, Sequence

from .advice import NEW_RUNTIME, RESTART_SESSION, Advice
from .kinds import (
    ATTENTION_KERNELS,
    DEVICE_BUSY,
    DEVICE_MISMATCH,
    DRIVER_VERSIONS,
    GENERATOR_DEVICE,
    GPU_TOO_OLD,
    INVALID_DEVICE,
    LAUNCH_RESOURCES,
    LIBRARY_SETUP,
    NCCL_ERROR,
    STREAM_CAPTURE,
)


def device_mismatch(details: dict[str, Any]) -> Advice:
    devices = details.get("devices") or []
    facts: dict[str, str] = {}
    if devices:
        facts["devices"] = " and ".join(devices)
    argument, operation = details.get("argument"), details.get("operation")
    if argument:
        facts["argument"] = (
            f"`{argument}`"
            + (f" of `{operation}`" if operation else "")
            + (f", on {details['argument_on']}" if details.get("argument_on") else "")
        )
    if "indexed_on" in details:
        on = details["indexed_on"]
        facts["indexed tensor"] = on
        summary = (
            f"A tensor on {on} was indexed with indices on another device: indices must be on "
            f"the CPU or on the indexed tensor's device ({on})."
        )
        fixes = [
            "Put the indices where the tensor is, `t[idx.to(t.device)]`, or the tensor where the "
            "indices are, `t.to(idx.device)[idx]`: usually both belong on the GPU with the rest "
            "of the step.",
            "A tensor made in `__init__` as a plain attribute stays on the CPU when the model "
            "moves: `self.register_buffer(...)` moves it with `model.to(device)`.",
        ]
        return Advice(DEVICE_MISMATCH, summary, facts, fixes)
    if "input_on" in details:
        summary = (
            f"A layer got its input on the {_where(details['input_on'])} but has its weights on "
            f"the {_where(details['weight_on'])}: the batch and the model must be on the same "
            "device."
        )
    else:
        both = f" ({' and '.join(devices)})" if devices else ""
        summary = (
            f"One operation got tensors on two devices{both}: every tensor it uses, the "
            "model's weights included, must be on the same device."
        )
    # the device to name in the example: the accelerator the message names ('mps' on a Mac)
    target = next((d.split(":")[0] for d in devices if d != "cpu"), "cuda")
    fixes = [
        "Move the model and every batch to one device: `model.to(device)` once, and "
        "`x, y = x.to(device), y.to(device)` for each batch in the loop "
        f"(`device = '{target}'`).",
        "Layers made inside `forward` (like `nn.BatchNorm2d(c)(x)`) stay on the CPU: create "
        "them in `__init__`, so `model.to(device)` moves them. New tensors in `forward` need "
        "`device=x.device` (`torch.zeros(n, device=x.device)`); a tensor kept as a plain "
        "attribute needs `self.register_buffer(...)` to move with the model.",
    ]
    if len({d for d in devices if d.startswith("cuda:")}) > 1:
        fixes.append(
            "Two GPUs are involved: create the model's tensors on the GPU the batch is on "
            "(`x.device`), or put everything on `cuda:0` unless you split the model on "
            "purpose."
        )
    return Advice(DEVICE_MISMATCH, summary, facts, fixes)


def generator_device(details: dict[str, Any]) -> Advice:
    """ATen checks that a draw's generator is on the draw's device type. The usual way in
    is a DataLoader's shuffling: RandomSampler (torch/utils/data/sampler.py) makes its
    generator with `torch.Generator()`, on the CPU, and draws its order with
    `torch.randperm` / `torch.randint` on the default device; `random_split` draws with
    torch's CPU generator the same way (torch/utils/data/dataset.py)."""
    drawn, on = details.get("drawn_on", "cuda"), details.get("generator_on", "cpu")
    facts = {"numbers drawn on": drawn, "generator on": on}
    where = {device: "CPU" if device == "cpu" else "GPU" for device in (drawn, on)}  # mps too
    summary = (
        f"Random numbers were drawn on the {where[drawn]} with a `torch.Generator` on the "
        f"{where[on]}: a generator only serves draws on its own device."
    )
    if drawn == "cpu":
        fixes = [
            "A DataLoader's shuffling, a sampler or `random_split` draws on the CPU here: give "
            "it a CPU generator, `torch.Generator().manual_seed(seed)` (or "
            f"`colab_gpu_guard.dataloader_generator(seed)`), not one made with `device='{on}'`.",
            f"For a draw of your own, make the generator where the numbers are drawn: "
            f"`torch.Generator()` for the CPU, `torch.Generator(device='{on}')` with "
            f"`device='{on}'` in the draw.",
        ]
        return Advice(GENERATOR_DEVICE, summary, facts, fixes)
    also = " or `torch.set_default_tensor_type(torch.cuda.FloatTensor)`" if drawn == "cuda" else ""
    fixes = [
        "A DataLoader with `shuffle=True` (or `random_split`) does this when the default "
        f"device is the GPU (`torch.set_default_device('{drawn}')`{also}): its generator is "
        "on the CPU, its draws on the GPU. Keep the default device the CPU "
        "(`torch.set_default_device('cpu')`) and move each batch with `.to(device)`, or give "
        "it a generator on the GPU: "
        f"`DataLoader(..., generator=torch.Generator(device='{drawn}'))` (seeded: "
        f"`colab_gpu_guard.dataloader_generator(device='{drawn}')`).",
        "For a draw of your own, make the generator where the numbers are drawn: "
        f"`g = torch.Generator(device='{drawn}')` for `torch.randn(..., device='{drawn}', "
        "generator=g)`.",
    ]
    return Advice(GENERATOR_DEVICE, summary, facts, fixes)


def _where(device: str) -> str:
    return "GPU" if device.startswith("cuda") else "CPU"


def invalid_device(details: dict[str, Any]) -> Advice:
    facts: dict[str, str] = {}
    if details.get("problem") == "checkpoint":
        index, count = details["device_index"], details["device_count"]
        facts["saved on"] = f"cuda:{index}"
        facts["GPUs torch sees"] = str(count)
        summary = (
            f"The checkpoint holds tensors saved on GPU {index} (cuda:{index}) of another "
            f"machine, and this runtime has {count} GPU{'s' * (count != 1)}: torch.load puts "
            "tensors back on the GPU they were saved on."
        )
        fixes = [
            "Load it onto a GPU this runtime has: `torch.load(path, map_location='cuda:0')` "
            "(or `map_location='cpu'`, then `.to(device)`).",
        ]
        return Advice(INVALID_DEVICE, summary, facts, fixes)
    summary = (
        "The code asked for a GPU number this runtime does not have (say `cuda:1` or "
        "`.cuda(1)` where only `cuda:0` exists; Colab gives one GPU)."
    )
    fixes = [
        "Use a GPU that exists: `cuda:0`, or just `'cuda'` (`torch.cuda.device_count()` says "
        "how many there are). Look for `.cuda(1)`, `device='cuda:1'`, "
        "`torch.cuda.set_device(...)`, or a `--gpu` / `device_ids` / `local_rank` setting in "
        "the code you run.",
        "`CUDA_VISIBLE_DEVICES` renumbers the GPUs it lists from 0: with "
        "`CUDA_VISIBLE_DEVICES=1`, that GPU is `cuda:0`.",
    ]
    return Advice(INVALID_DEVICE, summary, facts, fixes)


def device_busy(details: dict[str, Any], modes: Sequence[str] = ()) -> Advice:
    """`modes`: the GPUs' compute modes where NVML says them (setup_facts), which tell the causes
    apart; without them both causes stand."""
    stop_others = (
        "Stop the other process on the GPU (another notebook's kernel, a previous run; "
        "`!nvidia-smi` lists them): in exclusive-process mode one process at a time may use "
        "it (`!nvidia-smi -q | grep 'Compute Mode'`)."
    )
    bad_state = (
        f"get a new runtime ({NEW_RUNTIME}); your own machine: check the driver install "
        "(`!nvidia-smi` must work), then reboot."
    )
    if modes and all(mode == "Default" for mode in modes):
        summary = (
            "CUDA could not use the GPU, and no GPU here is in an exclusive or prohibited "
            "compute mode: the GPU or its driver is in a bad state."
        )
        return Advice(DEVICE_BUSY, summary, {}, [bad_state[0].upper() + bad_state[1:]])
    if "Prohibited" in modes:
        summary = (
            "A GPU here is in the 'Prohibited' compute mode: no process may use it until "
            "its administrator sets it back (`nvidia-smi -c DEFAULT`)."
        )
        return Advice(DEVICE_BUSY, summary, {}, ["Use another GPU, or ask the administrator."])
    summary = (
        "CUDA could not use the GPU: it is in exclusive-process mode and another process "
        "holds it, or the GPU or its driver is in a bad state."
    )
    return Advice(DEVICE_BUSY, summary, {}, [stop_others, "If none is listed: " + bad_state])


def nccl_error(details: dict[str, Any]) -> Advice:
    why = details.get("nccl_error")
    facts = {"NCCL says": why} if why else {}
    summary = (
        "NCCL, the library that moves tensors between GPUs and processes (DDP, "
        "`torch.distributed`, multi-GPU inference), failed, and its message does not say why."
    )
    fixes = [
        "Set `NCCL_DEBUG=INFO` in the environment before the processes start "
        "(`os.environ['NCCL_DEBUG'] = 'INFO'` before launching) and rerun: NCCL's log names "
        "the real cause.",
    ]
    if why == "unhandled system error":
        fixes.append(
            "In a container this is most often too little shared memory (/dev/shm): start it "
            "with `--ipc=host` or a larger `--shm-size`, or set `NCCL_SHM_DISABLE=1` (slower)."
        )
    elif why == "unhandled cuda error":
        fixes.append(
            "A CUDA call inside NCCL failed, often out of memory or an earlier GPU error: "
            "the log (NCCL_DEBUG=INFO) shows which; with one GPU per process, check that each "
            "process uses its own (`torch.cuda.set_device(local_rank)`)."
        )
    fixes.append(
        "On one GPU (Colab) no NCCL is needed: run the training in this process, without "
        "`torchrun` / DDP."
    )
    return Advice(NCCL_ERROR, summary, facts, fixes)


def launch_resources(details: dict[str, Any]) -> Advice:
    """CUDA error 701: the launch was refused, at the launch itself (cudaLaunchKernel
    returns it), so the traceback's last frames are the call that launched the kernel."""
    summary = (
        "A GPU kernel was launched asking for more than this GPU gives one launch: more "
        "threads than its registers allow, or too many arguments (CUDA error 701). It is not "
        "GPU memory running out. The launch is refused at once, so the traceback ends at "
        "the call that launched it."
    )
    fixes = [
        "If the kernel is your own (a CUDA extension, Numba's `@cuda.jit`, CuPy's "
        "`RawKernel`): launch it with fewer threads at a time (say 256 instead of 1024), or "
        "cap them where it is compiled (`__launch_bounds__` in CUDA C++).",
        "If it is inside PyTorch or another library (the traceback's last frames say "
        "which): that build does not fit this GPU. Update the library (`pip install -U`), "
        "or run that step on another GPU type, and report it with the GPU's name.",
    ]
    return Advice(LAUNCH_RESOURCES, summary, {}, fixes)


def stream_capture(details: dict[str, Any]) -> Advice:
    summary = (
        "A CUDA graph was being recorded (`torch.cuda.graph`, or `torch.compile` with "
        "mode='reduce-overhead' or 'max-autotune', which record CUDA graphs) and an operation "
        "that cannot be recorded ran: one that waits for the GPU (`.item()`, printing a "
        "tensor, `.cpu()`, `torch.cuda.synchronize()`), or one on another GPU or stream."
    )
    fixes = [
        "With `torch.compile`: use `mode='default'` or `mode='max-autotune-no-cudagraphs'` "
        "(no CUDA graphs) and see whether the error goes.",
        "With `torch.cuda.graph`: warm up on a side stream first, and move `.item()`, "
        "printing and copies to the CPU out of the recorded region.",
        f"If later CUDA calls fail too, restart the runtime ({RESTART_SESSION}).",
    ]
    return Advice(STREAM_CAPTURE, summary, {}, fixes)


# What to use instead of a feature the GPU is too old for.
_INSTEAD = {
    "bfloat16": "Use float16 (or float32) instead: `torch_dtype=torch.float16` in "
    "Transformers, `dtype='half'` (`--dtype=half`) in vLLM, `bnb_4bit_compute_dtype="
    "torch.float16` with bitsandbytes, `torch.autocast('cuda', dtype=torch.float16)`.",
    "FlashAttention": "Use another attention: `attn_implementation='sdpa'` (or 'eager') "
    "instead of 'flash_attention_2' in Transformers; PyTorch's "
    "`scaled_dot_product_attention` picks a kernel this GPU can run.",
    "Triton (torch.compile)": "Run without `torch.compile` (or set `TORCHDYNAMO_DISABLE=1` "
    "before running): its default backend generates Triton code, which this GPU cannot run.",
}


def gpu_too_old(details: dict[str, Any]) -> Advice:
    feature = details.get("feature", "this feature")
    needs = details.get("needs_capability", "")
    gpu = details.get("gpu", "this GPU")
    capability = details.get("capability")
    facts = {"needs": f"compute capability {needs} or newer"}
    if capability:
        facts["this GPU"] = f"{gpu}, compute capability {capability}"
    has = f" ({gpu} has {capability})" if capability else ""
    summary = f"{feature} needs a GPU of compute capability {needs} or newer{has}."
    fixes = [
        _INSTEAD.get(feature, "Switch the feature off."),
        "Or a newer GPU: on Colab a T4 is 7.5 (enough for torch.compile's Triton, not for "
        "bfloat16 or FlashAttention), an L4 (8.9) or A100 (8.0) has all three: Runtime > "
        "Change runtime type, where your plan offers one.",
    ]
    return Advice(GPU_TOO_OLD, summary, facts, fixes)


# torch's flash-attention kernel runs on compute capability 8.0 to 12.1 (sdp_utils.cpp,
# check_flash_attention_hardware_support); the memory-efficient one from 5.0
FLASH_CAPABILITY = (8, 0)


def attention_kernels(details: dict[str, Any]) -> Advice:
    """scaled_dot_product_attention found no kernel it may use: the plain (math) one switched
    off, each fused one refusing the inputs (torch warns why, one warning per kernel, just
    before it raises); or every kernel allowed is off or has none on this device."""
    if details.get("problem") == "none allowed here":
        summary = (
            "`scaled_dot_product_attention` was allowed no kernel that runs here: the kernels "
            "it may use are switched off, or exist only on a CUDA GPU (the memory-efficient "
            "and cuDNN ones; on the CPU only the flash and the plain, math, kernels run)."
        )
    else:
        summary = (
            "`scaled_dot_product_attention` had no kernel it may use for these inputs: its "
            "plain (math) kernel is switched off, and each fused kernel refused these inputs "
            "or this GPU. The warnings printed just before the error say why each refused "
            '("Flash attention kernel not used because: ...").'
        )
    fixes = [
        "Let it fall back to the plain kernel: add `SDPBackend.MATH` to the list given to "
        "`torch.nn.attention.sdpa_kernel(...)` (or remove that `with` statement), or "
        "`torch.backends.cuda.enable_math_sdp(True)`. Where a library switched it off, turn "
        "off that library's flash-attention option.",
    ]
    old = [cap for cap in details.get("capabilities") or () if tuple(cap) < FLASH_CAPABILITY]
    if old:
        major, minor = old[0]
        fixes.append(
            f"This GPU (compute capability {major}.{minor}) has no flash-attention kernel in "
            "PyTorch: it needs 8.0 or newer. Allow the memory-efficient kernel too "
            "(`SDPBackend.EFFICIENT_ATTENTION`), or the plain one."
        )
    elif details.get("problem") != "none allowed here":
        fixes.append(
            "To keep a fused kernel, give it what the warnings ask: flash attention needs a GPU "
            "of compute capability 8.0 or newer (a T4 is 7.5), float16 or bfloat16 inputs, "
            "and 4-D (batch, heads, sequence, head size) tensors."
        )
    return Advice(ATTENTION_KERNELS, summary, {}, fixes)


_INSTALL = {
    "tensorflow": "Install the TensorFlow build with its own CUDA libraries, `pip install "
    "'tensorflow[and-cuda]'`, then restart. On Colab, use the preinstalled TensorFlow: a "
    "`pip install tensorflow==...` that replaced it is the usual cause.",
    "jax": 'Install JAX with its own CUDA libraries, `pip install -U "jax[cuda12]"`, then '
    "restart. An older cuDNN found first (on `LD_LIBRARY_PATH`, or from a conda package) can "
    "shadow the one pip installed.",
}


def library_setup(details: dict[str, Any]) -> Advice:
    framework = details.get("framework")
    if details.get("library_error") == "CUBLAS_STATUS_INVALID_VALUE":
        summary = (
            "cuBLAS refused the arguments of a matrix multiply (CUBLAS_STATUS_INVALID_VALUE). "
            "torch checks the shapes before it calls cuBLAS, so the usual cause is a cuBLAS "
            "other than the one this torch was built with; it has also been seen with the GPU "
            "nearly full."
        )
        fixes = [
            "Use torch with its own CUDA libraries: in a fresh environment `pip install "
            "torch` alone (on Colab, the preinstalled torch; a `pip install` that upgraded an "
            "`nvidia-cublas-cu*` package can cause it), then restart the runtime.",
            "If it comes only with large batches: `%gpu_reset` and a smaller step.",
        ]
        return Advice(LIBRARY_SETUP, summary, {"error": "CUBLAS_STATUS_INVALID_VALUE"}, fixes)
    summary = (
        "The framework could not load a CUDA library it needs (usually cuDNN), or found one "
        "older than the version it was built for, so it cannot run on the GPU."
    )
    fixes = [
        _INSTALL.get(
            framework or "",
            "Install a build of the framework that matches the CUDA and cuDNN libraries here "
            "(or one that brings its own), then restart the runtime.",
        ),
        "The log printed above the error names the library and both versions (run "
        "with `TF_CPP_MIN_LOG_LEVEL=0` to see it for JAX and TensorFlow).",
    ]
    return Advice(LIBRARY_SETUP, summary, {}, fixes)


def driver_versions(details: dict[str, Any]) -> Advice:
    """'system has unsupported display driver / cuda driver combination' (CUDA error 803):
    the kernel module and the user-space libcuda are of different driver versions. Details
    from this machine where read (`machine.driver_versions_details`): kernel_module,
    libcuda, libcuda_path, libcuda_elsewhere (outside the system's library directories),
    libcuda_on_library_path (its directory is on LD_LIBRARY_PATH), nvml_mismatch."""
    module, library, path = (
        details.get(key) for key in ("kernel_module", "libcuda", "libcuda_path")
    )
    facts: dict[str, str] = {}
    if module:
        facts["NVIDIA driver running"] = module
    if path:
        facts["libcuda loaded"] = f"{library or 'version not in its name'} ({path})"
    if details.get("nvml_mismatch"):
        facts["nvidia-smi (NVML)"] = "fails the same way: 'Driver/library version mismatch'"
    if module and library and module != library:
        summary = (
            f"CUDA cannot start: the NVIDIA driver running is {module}, but this process "
            f"loaded the CUDA driver library (libcuda) of {library}."
        )
    else:
        summary = (
            "CUDA cannot start: the NVIDIA driver running and the CUDA driver library this "
            "process loaded (libcuda) are different versions."
        )
    reboot = (
        "Restart the machine: after an NVIDIA driver update (an automatic one included) the "
        "old driver keeps running until a reboot, while programs load the new one's "
        f"libraries ({NEW_RUNTIME})."
    )
    if path and details.get("libcuda_elsewhere"):
        where = path.rpartition("/")[0]
        how = (
            "take that directory off `LD_LIBRARY_PATH`"
            if details.get("libcuda_on_library_path")
            else "it is not on `LD_LIBRARY_PATH`: take off the loader's entry for it (a file "
            "in `/etc/ld.so.conf.d/`, then `ldconfig`)"
        )
        fixes = [
            f"This process loaded libcuda from `{where}`, not from the system's library "
            f"directories: {how} so the driver's own libcuda is used (such a copy comes from, "
            "say, a CUDA compatibility package's `compat` directory or a container), then "
            f"restart the kernel ({RESTART_SESSION}).",
            reboot,
        ]
    else:
        fixes = [
            reboot,
            "If it fails again after a restart: look for another libcuda on "
            "`LD_LIBRARY_PATH` (a CUDA compatibility package's `compat` directory, or a copy "
            "a container brought) and take it off, or reinstall the NVIDIA driver so that "
            "its kernel module and its libraries are one version.",
        ]
    return Advice(DRIVER_VERSIONS, summary, facts, fixes)
