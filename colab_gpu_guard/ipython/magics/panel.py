"""%gpu_panel: show, replace or close the live GPU panel widget."""

from __future__ import annotations

import sys

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .base import GuardMagics

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

    @magic_arguments()
    @argument("--new", action="store_true", help="close the current panel and show a fresh one")
    @argument("--close", action="store_true", help="close the panel (it stops refreshing)")
    @line_magic
    def gpu_panel(self, line: str = "") -> None:
        """Show the live GPU panel, compact: when its figures were taken (after which cell),
        one line per GPU (this kernel / others / free, used of total, utilisation,
        temperature, power) with its MIG instances, the buttons Refresh and Free memory
        (gpu_reset), and one line of what matters now. Sections that stay open across
        refreshes: Leftovers, Processes, History (what each cell kept) and Details
        (versions, notes, and Seed: seed_all with a seed and deterministic mode).

        It refreshes after every cell while shown. A slow snapshot (looking for leftovers
        among 10^5 arrays takes about 0.5 s) is taken again after a cell only once it costs
        at most a tenth of the time since the last one; until then the leftovers shown say
        how old they are, and Refresh looks again. One panel per kernel: running
        %gpu_panel again shows the same live panel. Core ipywidgets only, so it renders in
        Colab, JupyterLab, Notebook and VS Code. From code: ``colab_gpu_guard.panel()``.

        Examples::

          %gpu_panel           # show the panel
          %gpu_panel --new     # replace it with a fresh one
          %gpu_panel --close   # close it (no more refreshes)
        """
        from IPython.display import display

        from .. import panel as panel_module

        args = parse_argstring(self.gpu_panel, line)
        if args.close:
            current = panel_module.current_panel(self.shell)
            if current is not None:
                current.close()
            print("gpu_panel: closed" if current is not None else "gpu_panel: no panel open")
            return
        widget = panel_module.panel(self.shell, new=args.new, registration=self.registration)
        display(widget)
