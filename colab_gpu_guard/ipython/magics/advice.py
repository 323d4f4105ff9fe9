"""%gpu_advice: the CUDA error advisor (a custom exception handler, on from %load_ext)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .base import GuardMagics

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration
    from ..shell_advisor import ShellAdvisor

GPU_ADVICE_USAGE = "%gpu_advice [on|off]"


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
    @argument(
        "state",
        nargs="?",
        type=str.lower,
        choices=("on", "off"),
        help="on: diagnose CUDA errors; off: plain tracebacks; none: say which it is",
    )
    @line_magic
    def gpu_advice(self, line: str = "") -> None:
        """Turn the CUDA error advisor on or off, or show whether it is on.

        Usage::

          %gpu_advice          # is it on?
          %gpu_advice on       # diagnose CUDA errors under their traceback (the default)
          %gpu_advice off      # plain tracebacks only, exactly as without the extension

        When a cell fails with a CUDA error, the normal traceback is shown unchanged and then
        a short diagnosis: the real cause and the fix. It covers CUDA out-of-memory (torch,
        CuPy, JAX/XLA, TensorFlow: requested vs free, the biggest leftover tensors by name;
        the frames of the functions the failed cell called are released, and a note names
        them and the tensor bytes that freed), sticky errors such as a device-side assert
        (the runtime must be restarted; the context is marked broken for %gpu_status and
        %gpu_reset), CUDA in forked DataLoader workers, cuBLAS determinism and ops with no
        deterministic implementation, driver/build mismatches, and the driver out of memory
        because another process holds the GPU. Any other error is shown exactly as without
        the extension, and %debug works as usual. Outside notebooks:
        ``colab_gpu_guard.advise(exc)``.
        """
        state, bad = None, False
        try:
            state = parse_argstring(self.gpu_advice, line).state
        except UsageError:
            bad = True
        if bad:  # raised outside the handler: nothing internal chained to it
            raise UsageError(
                f"expected 'on' or 'off', got {line.strip()!r}\nUsage: {GPU_ADVICE_USAGE}"
            )
        if state == "on":
            self.advisor.install()
        elif state == "off":
            self.advisor.uninstall()
        print(f"gpu_advice: {'on' if self.advisor.enabled else 'off'}")
