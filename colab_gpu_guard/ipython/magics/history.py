"""%gpu_history: each cell's memory effect, recorded from %load_ext on."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Optional

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .base import GuardMagics, help_format, read_value, usage_error

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ...cells.output_warning import OutputWarning
    from ...cells.tracker import MemoryTracker
    from ..registration import Registration

REFERENCE = """\
Examples:

```text
%gpu_history                     # every recorded cell (the last 500 at most)
%gpu_history --limit 10          # the last 10
%gpu_history --reset-peaks on    # exact per-cell peaks from the next cell on
%gpu_history --warn-output 1GiB  # warn under results keeping >= 1 GiB
```

Per cell: the time, torch's CUDA memory allocated before and after, the change, the peak
during the cell, reserved, CUDA out-of-memory errors, NVML used, host RSS, and a LEAK line
when the same cell code, run again, kept memory again.

What a cell keeps is the memory after it minus the memory before it (what other cells
allocated in between is not its), per device: torch's allocated bytes on each CUDA device,
and host memory ("cpu") above a noise floor measured in this kernel (how much host memory
grows when a cell only rebinds names and drops temporaries). A rerun is flagged when it
and the run before it both kept some on a device, and the LEAK line says what holds the
earlier run's objects where it can tell: a list, dict or set that grew, whether the cell
names it (`losses`, by one autograd graph a run: the line says what the earlier run's
graph keeps, the figure `%gpu_status` gives it) or reaches it in one step (a list a
function or a forward hook of the notebook fills, an object's attribute such as
`trainer.history`, a global of your own module such as `nbutils._cache`, a
`functools.cache` function's results, named by the function); the earlier output
(`Out[7]`); a failed run's traceback (the line says whether `%gpu_reset` releases it); or
the earlier run's object the cell rebound (`model = Net()`), when only unreachable
reference cycles keep it (garbage not collected yet: `%gpu_reset` frees it). A rerun after
a `%gpu_reset` is flagged only where the earlier run's objects are found still held.

Host memory is measured exactly with glibc's malloc figures; where they are missing
(macOS, Windows, glibc before 2.33), what a rerun kept on the host is read from those
holders alone, so a host leak into a container the cell does not name is not flagged there
(CUDA figures are exact everywhere).

**Output history** (`--warn-output`): after a cell whose displayed result keeps 256 MiB or
more of accelerator memory alive (`Out[N]` holds it until `%gpu_reset`), a line under the
output says so. `--warn-output 1GiB` changes the size (e.g. 1GiB, 500MB), `--warn-output
off` turns the line off.

**Peaks** (`--reset-peaks`): torch's peak counters are left alone, so your own
`torch.cuda.max_memory_allocated()` keeps covering the whole process. A cell's peak is then
exact when the cell set a new process peak, or only allocated; otherwise the cell stayed
below an earlier peak and the column shows an upper bound, "<= X" (the smaller of that
earlier peak and what the cell started with plus all it allocated). `--reset-peaks on`
resets torch's peak counters before every cell instead: every peak is exact, and
`max_memory_allocated()` then covers only the current cell; `--reset-peaks off` leaves
them alone again.

Settings combine, with each other and with `--limit`: `%gpu_history --reset-peaks on
--limit 5` switches exact peaks on, then shows the last 5 cells; a setting alone shows no
history.

From code: `colab_gpu_guard.memory_history()` (records) and
`colab_gpu_guard.format_history(...)`.
"""
_NEGATIVE_SIZE = re.compile(r"--warn-output\s+(-\S*)")


@magics_class
class HistoryMagics(GuardMagics):
    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.tracker: Optional[MemoryTracker] = None
        self.output_warning: Optional[OutputWarning] = None

    def on_load(self) -> None:
        from ..tracking import install

        self.tracker, self.output_warning = install(self.registration)

    @magic_arguments()
    @help_format()
    @argument("--limit", type=int, default=None, metavar="N", help="show only the last N cells")
    @argument(
        "--reset-peaks",
        type=str.lower,
        choices=("on", "off"),
        default=None,
        metavar="on|off",
        help="on: exact per-cell peaks (resets torch's peak counters)",
    )
    @argument(
        "--warn-output",
        default=None,
        metavar="SIZE|off",
        help="warn under a result that keeps SIZE alive (default 256MiB)",
    )
    @line_magic
    def gpu_history(self, line: str = "") -> None:
        """Show each cell's memory effect since the extension was loaded: memory before
        and after, the peak, and a LEAK line when a cell run again kept memory again.

        Example: %gpu_history --limit 10
        More (each column, peaks, the LEAK line): colab_gpu_guard.reference('gpu_history')
        """
        from ...cells.history_text import format_history

        failure = None
        try:
            args = parse_argstring(self.gpu_history, line)
        except UsageError as error:
            failure = usage_error(error, self.gpu_history)
            negative = _NEGATIVE_SIZE.search(line)
            if negative:  # argparse took "-1MiB" for an option: "expected one argument"
                from ...cells.output_warning import SIZE_FORM

                failure = usage_error(
                    ValueError(f"--warn-output takes {SIZE_FORM}, not {negative.group(1)!r}"),
                    self.gpu_history,
                )
        if failure is not None:
            raise failure  # outside the handler: no internal exception chained to it
        if args.limit is not None and args.limit < 0:
            raise usage_error(ValueError("--limit must be 0 or more"), self.gpu_history)
        threshold = None
        if args.warn_output is not None:
            from ...cells.output_warning import parse_threshold

            threshold = read_value(self.gpu_history, parse_threshold, args.warn_output)
        # every value checked: each setting given, with its line; then the history, unless
        # only settings were given (none is dropped: --reset-peaks on --limit 5 does both)
        if args.warn_output is not None and self.output_warning is not None:
            self.output_warning.threshold = threshold
            print(self.output_warning.describe() + _no_gpu_clause(threshold is not None))
        if args.reset_peaks is not None:
            if self.tracker is not None:
                self.tracker.reset_peaks = args.reset_peaks == "on"
            print(_peaks_state(self.tracker) + _no_gpu_clause(args.reset_peaks == "on"))
        if args.limit is not None or (args.warn_output is None and args.reset_peaks is None):
            history = self.tracker.history() if self.tracker is not None else []
            print(format_history(history, limit=args.limit))


def _no_gpu_clause(applies: bool) -> str:
    """Where torch is imported and sees no GPU: the setting has nothing to act on yet."""
    from ...frameworks import cupy as cupy_support
    from ...frameworks import torch as torch_support

    torch = torch_support.loaded()
    if not applies or torch is None or torch_support.has_accelerator(torch):
        return ""
    if cupy_support.loaded() is not None:
        return ""
    return "; torch sees no GPU in this kernel, so there is nothing to show until one is used"


def _peaks_state(recorder: Optional[MemoryTracker]) -> str:
    if recorder is not None and recorder.reset_peaks:
        return (
            "gpu_history: torch's peak memory counters are reset before every cell: exact "
            "per-cell peaks; torch.cuda.max_memory_allocated() covers the current cell only "
            "(--reset-peaks off to stop)"
        )
    return (
        "gpu_history: torch's peak memory counters are left alone "
        "(torch.cuda.max_memory_allocated() covers the whole process); a cell below an "
        "earlier peak shows '<= X' (--reset-peaks on for exact per-cell peaks)"
    )
