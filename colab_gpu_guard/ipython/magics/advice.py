"""%gpu_advice: the CUDA error advisor (a custom exception handler, on from %load_ext)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .base import GuardMagics, help_format, usage_error

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration
    from ..shell_advisor import ShellAdvisor

REFERENCE = """\
Examples:

```text
%gpu_advice          # is it on?
%gpu_advice on       # explain CUDA errors under their traceback (the default)
%gpu_advice off      # plain tracebacks only, exactly as without the extension
```

When a cell fails with a CUDA error, the normal traceback is shown unchanged and then a
short diagnosis: the real cause and the fix, in the words of the framework that raised it
(torch, CuPy, JAX, TensorFlow). It covers:

- GPU out of memory: requested vs free, and the biggest tensors still held, by name (a
  request bigger than the whole GPU is said to be one no cleanup helps). The frames of the
  functions the failed cell called are released, and a note names them and the memory
  that freed. Also out of memory in disguise (`CUBLAS_STATUS_ALLOC_FAILED`,
  `CUDNN_STATUS_NOT_INITIALIZED`, `CUDNN_STATUS_INTERNAL_ERROR`, no valid cuDNN algorithm,
  "GET was unable to find an engine" - with bfloat16 named where a GPU here is older than
  compute capability 8.0 - TensorFlow's "cuDNN failed to initialize") and the CUDA driver
  out of memory.
- Errors after which this process's CUDA context is unusable, such as a device-side
  assert (the runtime must be restarted; `%gpu_status` and `%gpu_reset` then say so too),
  and cuBLAS/cuDNN execution failures that usually report such an error late.
- Tensors on two devices (`cuda:0 and cpu`), a random generator on another device than
  its draws (a shuffling DataLoader after `torch.set_default_device('cuda')`), a GPU
  number the runtime does not have, a busy GPU, NCCL, CUDA-graph capture, a GPU too old
  for bfloat16, FlashAttention or Triton, a kernel launch refused for asking too much ("too
  many resources requested for launch"), attention left without a kernel
  (`scaled_dot_product_attention`'s "No available kernel" with its math kernel switched off).
- CUDA used in forked DataLoader workers; cuBLAS determinism, and operations with no
  deterministic implementation.
- A driver too old for the CUDA build, a build with no code for this GPU ("device kernel
  image is invalid" included), a driver whose running version and loaded libraries differ
  (error 803: the two versions and what to restart), a missing or old cuDNN, a cuBLAS or
  cuDNN other than torch's own (`CUBLAS_STATUS_INVALID_VALUE`, and the cuDNN failures above:
  the copy this process loaded, and what pip installed against torch's versions), a CPU-only
  build, CUDA unable to start ("CUDA unknown error", as after the machine slept), no GPU at
  all (JAX's "No visible GPU devices" included).

Out-of-memory errors of host memory or of a TPU get no GPU advice. Any other error is
shown exactly as without the extension, and `%debug` works as usual.
Outside notebooks: `colab_gpu_guard.advise(exc)`.
"""


@magics_class
class AdvisorMagics(GuardMagics):
    """The CUDA error advisor: a custom exception handler, on from %load_ext."""

    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.advisor: Optional[ShellAdvisor] = None

    def on_load(self) -> None:
        from ..shell_advisor import ShellAdvisor

        self.advisor = ShellAdvisor(self.shell)
        self.advisor.install()
        self.registration.add_cleanup(self.advisor.uninstall)

    @magic_arguments()
    @help_format()
    @argument(
        "state",
        nargs="?",
        type=str.lower,
        choices=("on", "off"),
        metavar="on|off",
        help="on: explain CUDA errors; off: plain tracebacks; none: say which",
    )
    @line_magic
    def gpu_advice(self, line: str = "") -> None:
        """Turn the CUDA error advisor on or off, or show whether it is on (it is on from
        %load_ext).

        When a cell fails with a CUDA error (out of memory, a device-side assert, ...),
        the cause and the fix follow the traceback. Other errors are shown unchanged.

        Example: %gpu_advice off
        More (the errors it explains): colab_gpu_guard.reference('gpu_advice')
        """
        state, bad = None, False
        try:
            state = parse_argstring(self.gpu_advice, line).state
        except UsageError:
            bad = True
        if bad:  # raised outside the handler: nothing internal chained to it
            raise usage_error(
                ValueError(f"expected 'on' or 'off', got {line.strip()!r}"), self.gpu_advice
            )
        if state == "on":
            self.advisor.install()
        elif state == "off":
            self.advisor.uninstall()
        print(f"gpu_advice: {'on' if self.advisor.enabled else 'off'}")
