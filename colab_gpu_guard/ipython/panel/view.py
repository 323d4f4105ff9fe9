"""The panel's view: its core ipywidgets tree (`PanelParts`) and how a snapshot is drawn
into it (`PanelView`), writing only the values that changed.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional

import ipywidgets as widgets

from colab_gpu_guard.status.chart import render_history
from colab_gpu_guard.status.compact import compact_text
from colab_gpu_guard.status.panel_html import (
    WIDEST_LABEL,
    render_details,
    render_device,
    render_header,
    render_no_gpu,
    render_now,
    render_processes,
    render_report,
    section_label,
)
from colab_gpu_guard.status.panel_static import render_static_panel

from .groups import OPEN, SHUT, LeftoversView, Show, Write

if TYPE_CHECKING:
    from colab_gpu_guard.nvml import NvmlDevice
    from colab_gpu_guard.status import GpuStatus

DEFAULT_SEED = 42
SECTIONS = ("Leftovers", "Processes", "History", "Details")
HISTORY_CELLS = 30  # the cells the history chart shows
PANEL_BORDER = "1px solid var(--jp-border-color2,rgba(128,128,128,.45))"


def close_widget(widget: widgets.Widget) -> None:
    """Close `widget` and the Layout and Style models it was made with."""
    widget.close()
    close_its_models(widget)


def close_its_models(widget: widgets.Widget) -> None:
    """Close the Layout and Style models `widget` was made with: ipywidgets' ``close()``
    leaves those open, alive in the kernel's registry of widgets and in the front end's
    (50 of them for each panel closed on a machine without a GPU)."""
    for name in ("layout", "style"):
        model = getattr(widget, name, None)
        if isinstance(model, widgets.Widget):
            model.close()


def _full_width(hidden: bool = False) -> widgets.Layout:
    # no margin: a widget's default 2 px margins beside width 100% overflow the panel
    return widgets.Layout(width="100%", margin="0", display="none" if hidden else None)


def _button_layout(min_width: str = "") -> widgets.Layout:
    return widgets.Layout(width="auto", height="26px", padding="0 8px", min_width=min_width or None)


def _label_width(words: str) -> str:
    """A toggle's width for its widest words (13 px type: ~6.6 px a character, and the
    triangle and padding), so that a count appearing does not push the next buttons."""
    return f"{round(len(words) * 6.6) + 30}px"


def _html_part(name: str, hidden: bool = False) -> widgets.HTML:
    part = widgets.HTML(value="", layout=_full_width(hidden))
    part.add_class(f"cgg-{name}")
    return part


def _row(children: list[widgets.Widget], name: str) -> widgets.HBox:
    layout = widgets.Layout(flex_flow="row wrap", align_items="center", width="100%")
    row = widgets.HBox(children, layout=layout)
    row.add_class(name)
    return row


def panel_layout() -> widgets.Layout:
    """The layout of the panel's own box."""
    return widgets.Layout(
        border=PANEL_BORDER, padding="4px 6px", width="100%", max_width="980px", overflow="hidden"
    )


class PanelParts:
    """The panel's widgets: ``children`` are the panel box's, in order. The Leftovers
    section writes through `write` and `show` (the view's).

    Collapsed, the panel is a header, one line per GPU, a row of buttons and section
    toggles, and one line of what matters now (or of the last action); a section opens
    under them when its toggle is pressed, and stays open across refreshes (the toggle's
    value lives in the kernel)."""

    def __init__(self, write: Write, show: Show) -> None:
        self.header = _html_part("header")
        self.devices = widgets.VBox([], layout=_full_width())
        self.devices.add_class("cgg-devices")
        # each widget is given its Layout when made: one assigned after would leave the
        # default Layout it was made with open
        self.refresh_button = widgets.Button(
            description="Refresh",
            icon="refresh",
            tooltip="take a new snapshot now",
            layout=_button_layout(),
        )
        self.free_button = widgets.Button(
            description="Free memory",
            icon="trash",
            tooltip="gpu_reset(): release output history, tracebacks and cached blocks "
            "(never your variables)",
            layout=_button_layout(),
        )
        self.seed_button = widgets.Button(
            description="Seed",
            icon="random",
            tooltip="seed_all(seed, deterministic=...)",
            layout=_button_layout(),
        )
        self.seed_value = widgets.IntText(
            value=DEFAULT_SEED, description="seed", layout=widgets.Layout(width="150px")
        )
        self.seed_value.style.description_width = "32px"
        self.deterministic = widgets.Checkbox(
            value=False,
            description="deterministic",
            indent=False,
            layout=widgets.Layout(width="auto"),
        )
        self.toggles = {
            name: widgets.ToggleButton(
                value=False,
                description=SHUT + name,
                tooltip=f"show or hide {name.lower()}",
                layout=_button_layout(_label_width(WIDEST_LABEL[name])),
            )
            for name in SECTIONS
        }
        for name, toggle in self.toggles.items():
            toggle.add_class(f"cgg-toggle-{name.lower()}")
        self.actions = _row(
            [self.refresh_button, self.free_button, *self.toggles.values()], "cgg-actions"
        )
        self.seed_row = _row(
            [self.seed_value, self.deterministic, self.seed_button], "cgg-seed-row"
        )
        self.now = _html_part("now")
        self.message = _html_part("message", hidden=True)
        self.leftovers = LeftoversView(write, show, layout=_full_width(hidden=True))
        self.processes = _html_part("processes", hidden=True)
        self.history = _html_part("history", hidden=True)
        self.details = _html_part("details")
        self.report_toggle = widgets.ToggleButton(
            value=False,
            description=SHUT + "full report",
            tooltip="show or hide the last action's full report",
            layout=_button_layout(),
        )
        self.report_toggle.layout.display = "none"  # until an action has a report
        self.report_toggle.add_class("cgg-report-toggle")
        self.report = _html_part("report", hidden=True)
        self.details_box = widgets.VBox(
            [self.details, self.seed_row, self.report_toggle, self.report],
            layout=_full_width(hidden=True),
        )
        self.details_box.add_class("cgg-details-box")
        self.sections: dict[str, widgets.Widget] = dict(
            zip(SECTIONS, (self.leftovers, self.processes, self.history, self.details_box))
        )
        self.children: list[widgets.Widget] = [
            self.header,
            self.devices,
            self.actions,
            self.now,
            self.message,
        ]
        self.children += self.sections.values()

    @property
    def buttons(self) -> tuple[widgets.Button, widgets.Button, widgets.Button]:
        return (self.refresh_button, self.free_button, self.seed_button)

    def all(self) -> list[widgets.Widget]:
        """Every widget made here (the leftovers' rows kept aside too), for closing."""
        return [
            self.header,
            self.devices,
            *self.buttons,
            self.seed_value,
            self.deterministic,
            *self.toggles.values(),
            self.actions,
            self.seed_row,
            self.details,
            self.report_toggle,
            self.report,
            self.now,
            self.message,
            *self.leftovers.parts(),
            *self.sections.values(),
        ]


class PanelView:
    """Draws snapshots into the parts. ``status`` is the snapshot shown, ``last_action``
    the last action's one-line result and ``last_report`` its full report (in Details, one
    click away), ``own_cell`` the cell that opened the panel (the chart does not charge it
    the panel's own cost), ``updates`` counts the values written; every writer holds
    ``lock`` (the live thread and a click read in another thread write too)."""

    def __init__(self) -> None:
        self.updates = 0
        self.lock = threading.RLock()
        self.status: Optional[GpuStatus] = None
        self.last_action = ""
        self.last_report = ""
        self.own_cell: Optional[int] = None
        self.line_extras: dict[int, str] = {}  # GPU index -> HTML after its line (live)
        self.parts = PanelParts(self.set, self.show)
        self._device_lines: list[widgets.HTML] = []
        self._pages: dict[int, tuple[tuple, str]] = {}  # GPU index -> (its input, its line)
        for name, toggle in self.parts.toggles.items():
            toggle.observe(lambda _change, name=name: self._on_toggle(name), names="value")
        self.parts.report_toggle.observe(lambda _change: self._on_report(), names="value")

    def set(self, part: widgets.Widget, value: object, trait: str = "value") -> bool:
        """Write `value` unless the part has it already; True when written."""
        if getattr(part, trait) == value:
            return False
        setattr(part, trait, value)
        self.updates += 1
        return True

    def show(self, part: widgets.Widget, shown: bool) -> None:
        display = None if shown else "none"
        if part.layout.display != display:
            part.layout.display = display
            self.updates += 1

    def is_open(self, name: str) -> bool:
        return bool(self.parts.toggles[name].value)

    def draw(self, status: GpuStatus, cell: Optional[int], running: str = "") -> None:
        """Show `status`: the header, GPU lines, what matters now, the toggles' words and
        the open sections (a closed one is drawn when it opens)."""
        self.status = status
        self.draw_lines(status, cell, running)
        self.set(self.parts.now, render_now(status))
        for name, toggle in self.parts.toggles.items():
            shown = self.is_open(name)
            self.set(toggle, (OPEN if shown else SHUT) + section_label(name, status), "description")
            if shown:
                self._draw_section(name, status)

    def draw_lines(self, status: GpuStatus, cell: Optional[int], running: str = "") -> None:
        """The header and one line per GPU (or the no-GPU line): what a live tick draws."""
        self.draw_header(status, cell, running)
        if status.has_gpu:
            extras = self.line_extras
            pages = [
                self._device_page(status, device) + extras.get(device.index, "")
                for device in status.nvml.devices
            ]
        else:
            pages = [render_no_gpu(status)]
        if len(pages) != len(self._device_lines):
            lines = self._device_lines[: len(pages)]
            for _ in range(len(lines), len(pages)):
                line = widgets.HTML(value="", layout=_full_width())
                line.add_class("cgg-device-part")
                lines.append(line)
            for extra in self._device_lines[len(pages) :]:
                close_widget(extra)
            self._device_lines = lines
            self.parts.devices.children = tuple(lines)
            self.updates += 1
        for line, page in zip(self._device_lines, pages):
            self.set(line, page)

    def _device_page(self, status: GpuStatus, device: NvmlDevice) -> str:
        """A GPU's line, drawn again only when what it shows changed: the NVML record, this
        kernel's devices on it and the runtime (a lost GPU's fix) are its whole input."""
        key = (device, status.memory_for(device.index), status.host.runtime)
        cached = self._pages.get(device.index)
        if cached is not None and cached[0] == key:
            return cached[1]
        page = render_device(status, device)
        self._pages[device.index] = (key, page)
        return page

    def draw_header(self, status: GpuStatus, cell: Optional[int], running: str = "") -> None:
        """The versions, and `running` (what runs now) while a cell runs live; no per-cell
        time (`render_header`)."""
        self.set(self.parts.header, render_header(status, cell, running, fresh=False))

    def _draw_section(self, name: str, status: GpuStatus) -> None:
        parts = self.parts
        if name == "Leftovers":
            parts.leftovers.render(status)
        elif name == "Processes":
            self.set(parts.processes, render_processes(status))
        elif name == "History":
            self.set(parts.history, render_history(status, HISTORY_CELLS, self.own_cell))
        else:
            self.set(parts.details, render_details(status, self.last_action))

    def _on_toggle(self, name: str) -> None:
        """Open or close a section; an opened one is drawn from the snapshot shown."""
        with self.lock:
            shown = self.is_open(name)
            words = section_label(name, self.status)
            self.set(self.parts.toggles[name], (OPEN if shown else SHUT) + words, "description")
            if shown and self.status is not None:
                self._draw_section(name, self.status)
            self.show(self.parts.sections[name], shown)

    def show_message(self, html: str) -> None:
        """Show an action's outcome under the line of what matters now (which stays)."""
        with self.lock:
            self.set(self.parts.message, html)
            self.show(self.parts.message, True)

    def hide_message(self) -> None:
        with self.lock:
            self.show(self.parts.message, False)

    def action_done(self, line: str, report: str) -> None:
        """Keep the last action's one-line result in Details (replacing the one before)
        and its full report behind the 'full report' toggle."""
        with self.lock:
            self.last_action, self.last_report = line, report
            parts = self.parts
            self.show(parts.report_toggle, bool(report))
            if self.status is not None and self.is_open("Details"):
                self.set(parts.details, render_details(self.status, line))
            if parts.report_toggle.value:
                self.set(parts.report, render_report(report))

    def _on_report(self) -> None:
        with self.lock:
            shown = bool(self.parts.report_toggle.value)
            words = (OPEN if shown else SHUT) + "full report"
            self.set(self.parts.report_toggle, words, "description")
            if shown:
                self.set(self.parts.report, render_report(self.last_report))
            self.show(self.parts.report, shown)

    def text(self, cell: Optional[int]) -> str:
        """The compact status in plain text."""
        if self.status is None:
            return "GPU guard panel: no snapshot yet"
        return compact_text(self.status, cell)

    def static_html(self, cell: Optional[int]) -> str:
        """A static copy: the header, GPU lines, what is held and what matters now, and
        the last action's line when shown."""
        message = self.parts.message
        shown = message.layout.display != "none"
        return render_static_panel(self.status, cell, message.value if shown else "")

    def close(self) -> None:
        """Close every widget of the view."""
        for part in [*self._device_lines, *self.parts.all()]:
            close_widget(part)
