"""The compact panel as static HTML, for renderers that show no widgets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ..units import escape_html as _e
from . import theme
from .panel_html import render_device, render_header, render_no_gpu, render_now

if TYPE_CHECKING:
    from .snapshot import GpuStatus

STATIC_NOTE = (
    "a static copy of the panel as displayed; in a running notebook it is live (buttons, "
    "sections, refreshed after every cell)"
)
_FRAME = (
    f"border:1px solid {theme.BORDER};padding:4px 6px;max-width:980px;overflow:hidden;"
    "box-sizing:border-box"
)


def render_static_panel(
    status: Optional[GpuStatus], cell: Optional[int] = None, message: str = ""
) -> str:
    """The compact panel for `status` after cell `cell`; `message`: the last action's line
    (HTML from `panel_html.render_message`) shown under what matters now.

    A displayed panel carries this beside its widget: front ends with a widget manager
    (JupyterLab, Notebook, VS Code, Colab) show the live widget; nbconvert's HTML (when no
    widget state is saved), GitHub and `make demo` show this copy of it as it was when
    displayed - the three facts (the header with the driver and CUDA versions and the
    figures' age, one line per GPU or the no-GPU line, what is held between cells and a
    rerun leak), what matters now, and the last action's line. Built from `panel_html`'s
    fragments; no query."""
    if status is None:
        body = message or f'<div style="{theme.FONT}">GPU guard panel: no snapshot yet</div>'
    else:
        if status.has_gpu:
            devices = "".join(render_device(status, device) for device in status.nvml.devices)
        else:
            devices = render_no_gpu(status)
        body = render_header(status, cell) + devices + render_now(status) + message
    note = (
        f'<div class="cgg-static-note" style="{theme.FONT};{theme.MUTED};font-size:12px">'
        f"<b>GPU guard</b> · {_e(STATIC_NOTE)}</div>"
    )
    return f'<div class="cgg-panel cgg-static" style="{_FRAME}">{note}{body}</div>'
