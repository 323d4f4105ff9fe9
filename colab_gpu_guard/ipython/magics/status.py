"""%gpu_status: one snapshot of the GPU, NVML's view beside this kernel's allocator."""

from __future__ import annotations

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, help_format, parse_line

REFERENCE = """\
Examples:

```text
%gpu_status                  # HTML in notebooks, text in terminals
%gpu_status --processes      # every process on each GPU
%gpu_status --history        # plus the per-cell memory history
%gpu_status --json           # JSON (schema: colab_gpu_guard.status.json_schema())
```

What it shows: the driver, CUDA driver and NVML versions; per GPU its name, UUID, PCI bus
id, memory (used / reserved by the driver / total / free), utilisation, temperature,
power, compute mode, MIG instances and ECC; the processes using it (this kernel marked;
by default the 5 using the most memory, and this kernel); this kernel's allocated and
reserved memory per device beside what NVML charges to it (the difference is the CUDA
context and other libraries); whether this process's CUDA context is usable; torch and
CUDA runtime versions; host RAM; the biggest arrays still held between runs. It works
without a GPU (it says so).

The same snapshot from code: `colab_gpu_guard.gpu_status()`; from a terminal:
`python -m colab_gpu_guard status [--json] [--watch SECONDS]`.
"""


@magics_class
class StatusMagics(GuardMagics):
    @magic_arguments()
    @help_format()
    @argument("--json", action="store_true", help="print the snapshot as JSON instead")
    @argument(
        "--processes",
        action="store_true",
        help="list every process on each GPU (default: the top 5)",
    )
    @argument("--history", action="store_true", help="add the per-cell memory history")
    @argument(
        "--no-leftovers",
        dest="leftovers",
        action="store_false",
        help="skip looking for arrays still held between runs",
    )
    @line_magic
    def gpu_status(self, line: str = "") -> None:
        """Show the GPU now: its memory as NVML sees it (used by this kernel, by other
        processes, free), what this kernel's tensors hold, and the biggest arrays still
        held between runs. Works without a GPU (it says so).

        Example: %gpu_status --processes
        More (every line it shows, the terminal command): colab_gpu_guard.reference('gpu_status')
        """
        from ... import notebook_refs, status

        args = parse_line(self.gpu_status, line)
        snapshot = status.gpu_status(
            leftovers=args.leftovers,
            history=args.history,
            namespace=notebook_refs.namespace_to_scan(self.shell),
            process_limit=None if args.processes else status.DEFAULT_PROCESS_LIMIT,
        )
        if args.json:
            print(snapshot.to_json())
            return
        from IPython.display import display

        # Both representations, whatever the shell's formatters: notebooks render the HTML,
        # terminals the text.
        bundle = {"text/plain": snapshot.to_text(), "text/html": snapshot.to_html()}
        display(bundle, raw=True)
