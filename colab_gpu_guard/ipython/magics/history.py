"""%gpu_history: each cell's memory effect, recorded from %load_ext on."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .base import GuardMagics, usage_error

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ...tracker import MemoryTracker
    from ..registration import Registration

GPU_HISTORY_USAGE = "%gpu_history [--limit N]"


@magics_class
class HistoryMagics(GuardMagics):
    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.tracker: Optional[MemoryTracker] = None

    def on_load(self) -> None:
        from ..tracking import install

        self.tracker = install(self.registration)

    @magic_arguments()
    @argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="show only the last N cells (default: all recorded, at most 500)",
    )
    @line_magic
    def gpu_history(self, line: str = "") -> None:
        """Show each cell's memory effect since the extension was loaded.

        Per cell: time, torch CUDA allocated before/after, change, peak during the cell,
        reserved, CUDA out-of-memory errors, NVML used, host RSS, and LEAK when the same
        cell source, run again, ended with more memory than its previous run did.

        Examples::

          %gpu_history              # every recorded cell (the last 500 at most)
          %gpu_history --limit 10   # the last 10

        From code: ``colab_gpu_guard.memory_history()`` (dataclasses) and
        ``colab_gpu_guard.format_history(...)``.
        """
        from ... import tracker

        args = parse_argstring(self.gpu_history, line)
        if args.limit is not None and args.limit < 0:
            raise usage_error(ValueError("--limit must be 0 or more"), GPU_HISTORY_USAGE)
        history = self.tracker.history() if self.tracker is not None else []
        print(tracker.format_history(history, limit=args.limit))
