"""%gpu_panel: show, replace or close the live GPU panel widget."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, conflicts, help_format, parse_line, read_value

REFERENCE = """\
Examples:

```text
%gpu_panel             # show the panel
%gpu_panel --live 2    # GPU lines update every 2 s while a cell runs
%gpu_panel --live off  # back to refreshing after each cell only
%gpu_panel --new       # replace it with a fresh one
%gpu_panel --close     # close it (no more refreshes)
```

The panel is compact, and leads with three facts: the driver and CUDA versions (or why
they are unknown), one line per GPU (this kernel / other processes / free, used of total,
how busy, temperature, power; "unattributed" for used memory NVML charges to no process it
lists, such as the driver's own few MiB) with its MIG instances, and what is held between
cells, by name ("held between cells: `keep` 382 MiB, `Out[3]` 191 MiB"), with the last
rerun that kept memory again. Then the buttons Refresh and Free memory (`%gpu_reset`), and
what else matters now. Sections that stay open across refreshes: Leftovers, Processes,
History (what each cell kept) and Details (versions, notes, the last action's result with
its full report one click away, and Seed: `%seed_all` with a seed and deterministic mode).
Lines wrap at a narrow width; no figure is cut.

It refreshes after every cell while shown; without `--live` nothing runs between cells.
A click while a cell runs is queued, and says so: it runs when the cell ends (with
`--live` the header also says "cell [N] running since HH:MM:SS"). After a cell that
changed nothing it looks at (no variable added, removed or rebound, no list grown, no new
output, memory as it was) it keeps its last leftovers scan, and within a second of its
last snapshot it takes none: cells run back to back cost it almost nothing. A slow
snapshot (looking for leftovers among 10^5 arrays takes about 0.5 s) is taken again after
a cell only once it costs at most a tenth of the time since the last one; until then the
leftovers shown say how old they are, and Refresh looks again. One panel per kernel:
running `%gpu_panel` again shows the same live panel. Core ipywidgets only: no custom
widget to install (Colab needs none). Checked in JupyterLab 4 and Notebook 6.5; not
checked in Colab or VS Code. From code: `colab_gpu_guard.panel()`.

`--live SECONDS` (0.5 to 60; `off` or 0 stops it): one thread also re-reads NVML (no
leftovers scan, no CUDA synchronisation) every SECONDS while a cell runs and updates the
header ("GPU lines live, HH:MM:SS") and the GPU lines, with sparklines of each GPU's memory
and how busy it was over the last readings, so a long training cell (or a training run in
another process) shows its memory as it grows. It needs a front end that shows widget
updates sent during a cell (checked in JupyterLab 4 and Notebook 6.5): in Colab, in a
terminal or without a GPU it says why and starts nothing. It applies to the open panel
(opening one if none is).

Without widgets (GitHub, a terminal, `nbconvert --to markdown`) the panel shows as text,
and `nbconvert --to html` shows a static copy, both with the three facts. `nbconvert
--execute --to html` stores the widget state by default and the panel is then blank
offline: export with `--ExecutePreprocessor.store_widget_state=False`.
"""

if TYPE_CHECKING:
    from ..panel import GpuPanel

LIVE_OFF = "live updates off: the panel refreshes after each cell"

# The widget package (ipywidgets): imported only when a panel is first shown.
_PANEL_MODULE = f"{__package__.rsplit('.', 1)[0]}.panel"


@magics_class
class PanelMagics(GuardMagics):
    def on_load(self) -> None:
        self.registration.add_cleanup(self._stop_panel)

    def _stop_panel(self) -> None:
        panel_module = sys.modules.get(_PANEL_MODULE)
        if panel_module is not None:  # never imported: no panel to stop
            panel_module.stop_panels(self.shell)

    @conflicts(("--close", "--new"), ("--close", "--live"))
    @magic_arguments()
    @help_format()
    @argument("--new", action="store_true", help="close the panel and show a fresh one")
    @argument("--close", action="store_true", help="close the panel (it stops refreshing)")
    @argument(
        "--live",
        metavar="SECONDS",
        help="also update the GPU lines every SECONDS while a cell runs; off: stop",
    )
    @line_magic
    def gpu_panel(self, line: str = "") -> None:
        """Show the live GPU panel: per GPU the memory this kernel and other processes use
        and what is free, buttons to refresh and to free memory, and sections to open for
        more. It refreshes after every cell; %gpu_panel again shows the same panel.

        Example: %gpu_panel --live 2
        More (what it shows, --live): colab_gpu_guard.reference('gpu_panel')
        """
        args = parse_line(self.gpu_panel, line)
        seconds = None
        from ..panel.missing import unavailable_panel, widgets_problem

        why = widgets_problem()
        if why is not None:  # not installed, or installed without its dependencies
            if args.close:
                print(f"gpu_panel: {why}")
            else:
                print(unavailable_panel(self.shell, why, "gpu_panel"))
            return

        from IPython.display import display

        from .. import panel as panel_module
        from ..panel import live

        if args.live is not None:
            seconds = read_value(self.gpu_panel, live.parse_seconds, args.live)
        if args.close:
            current = panel_module.current_panel(self.shell)
            if current is not None:
                current.close()
            print("gpu_panel: closed" if current is not None else "gpu_panel: no panel open")
            return
        current = panel_module.current_panel(self.shell)
        if args.live is not None and seconds is None and not args.new:
            if current is None:
                print("gpu_panel: no panel open")
                return
            current.live_every(None)
            print(f"gpu_panel: {LIVE_OFF}")
            return
        if args.new or current is None or args.live is None:
            current = panel_module.panel(self.shell, new=args.new, registration=self.registration)
            display(current)
        if seconds is not None:
            print(f"gpu_panel: {self._go_live(current, seconds)}")
        elif args.live is not None:  # --new --live off: a new panel is not live
            print(f"gpu_panel: {LIVE_OFF}")

    def _go_live(self, panel: GpuPanel, seconds: float) -> str:
        """Start (or retime) the panel's live GPU lines; what was done, in one line."""
        from colab_gpu_guard.status.compact import why_no_gpu

        from ..panel import live
        from ..panel.refresh import running_cell

        why = live.why_not_live(self.shell)
        status = panel.last_status
        if why is None and status is not None and not status.has_gpu:
            why = f"{why_no_gpu(status)}: no GPU lines to keep live (no live updates started)"
        if why is not None:
            return why
        panel.live_every(seconds, this_cell=running_cell(self.shell))
        return (
            f"the GPU lines update every {seconds:g} s while a cell runs "
            "(%gpu_panel --live off stops that)"
        )
