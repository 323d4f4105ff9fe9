"""The panel's widgets and layout: one core ipywidgets tree (``VBox``, ``HBox``, ``HTML``,
``Button``, ``ToggleButton``, ``IntText``, ``Checkbox``), and the writes that send only what
changed.

Collapsed it is a header, one line per GPU, a row of buttons and section toggles, and one
line of what matters now (or of the last action). A section opens under them when its
toggle is pressed; the toggle's value lives in the kernel, so a refresh never closes it.
The Leftovers section's holder groups open and close the same way (groups.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from colab_gpu_guard.status.panel_html import render_device, render_no_gpu

from .groups import SHUT, LeftoversView

if TYPE_CHECKING:
    from colab_gpu_guard.status import GpuStatus

DEFAULT_SEED = 42
SECTIONS = ("Leftovers", "Processes", "History", "Details")
PANEL_BORDER = "1px solid var(--jp-border-color2,rgba(128,128,128,.45))"


def _full_width(hidden: bool = False) -> widgets.Layout:
    # no margin: a widget's default 2 px margins beside width 100% overflow the panel
    return widgets.Layout(width="100%", margin="0", display="none" if hidden else None)


def _button_layout() -> widgets.Layout:
    return widgets.Layout(width="auto", height="26px", padding="0 8px")


def _html_part(name: str, hidden: bool = False) -> widgets.HTML:
    part = widgets.HTML(value="", layout=_full_width(hidden))
    part.add_class(f"cgg-{name}")
    return part


class PanelView(widgets.VBox):
    """The panel's parts and layout; ``updates`` counts the widget values written."""

    def __init__(self, **kwargs: Any) -> None:
        self.updates = 0
        self.header = _html_part("header")
        self.devices = widgets.VBox([], layout=_full_width())
        self.devices.add_class("cgg-devices")
        self.refresh_button = widgets.Button(
            description="Refresh", icon="refresh", tooltip="take a new snapshot now"
        )
        self.free_button = widgets.Button(
            description="Free memory",
            icon="trash",
            tooltip="gpu_reset(): release output history, tracebacks and cached blocks "
            "(never your variables)",
        )
        self.seed_button = widgets.Button(
            description="Seed", icon="random", tooltip="seed_all(seed, deterministic=...)"
        )
        for button in self.buttons:
            button.layout = _button_layout()
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
                layout=_button_layout(),
            )
            for name in SECTIONS
        }
        for name, toggle in self.toggles.items():
            toggle.add_class(f"cgg-toggle-{name.lower()}")
        self.actions = widgets.HBox(
            [self.refresh_button, self.free_button, *self.toggles.values()],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center", width="100%"),
        )
        self.actions.add_class("cgg-actions")
        self.seed_row = widgets.HBox(
            [self.seed_value, self.deterministic, self.seed_button],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center", width="100%"),
        )
        self.seed_row.add_class("cgg-seed-row")
        self.now = _html_part("now")
        self.message = _html_part("message", hidden=True)
        self.leftovers = LeftoversView(self._set, self._show, layout=_full_width(hidden=True))
        self.processes = _html_part("processes", hidden=True)
        self.history = _html_part("history", hidden=True)
        self.details = _html_part("details")
        self.details_box = widgets.VBox(
            [self.seed_row, self.details], layout=_full_width(hidden=True)
        )
        self.details_box.add_class("cgg-details-box")
        self.sections = dict(
            zip(SECTIONS, (self.leftovers, self.processes, self.history, self.details_box))
        )
        self._device_parts: list[widgets.HTML] = []
        super().__init__(
            [
                self.header,
                self.devices,
                self.actions,
                self.now,
                self.message,
                *self.sections.values(),
            ],
            layout=widgets.Layout(
                border=PANEL_BORDER,
                padding="4px 6px",
                width="100%",
                max_width="980px",
                overflow="hidden",
            ),
            **kwargs,
        )
        self.add_class("cgg-panel")

    @property
    def buttons(self) -> tuple[widgets.Button, widgets.Button, widgets.Button]:
        return (self.refresh_button, self.free_button, self.seed_button)

    @property
    def closed(self) -> bool:
        return self.comm is None

    def is_open(self, name: str) -> bool:
        return bool(self.toggles[name].value)

    def _set(self, part: widgets.Widget, value: str, trait: str = "value") -> bool:
        if getattr(part, trait) == value:
            return False
        setattr(part, trait, value)
        self.updates += 1
        return True

    def _show(self, part: widgets.Widget, shown: bool) -> None:
        display = None if shown else "none"
        if part.layout.display != display:
            part.layout.display = display
            self.updates += 1

    def _render_devices(self, status: GpuStatus) -> None:
        if status.has_gpu:
            pages = [render_device(status, device) for device in status.nvml.devices]
        else:
            pages = [render_no_gpu(status)]
        if len(pages) != len(self._device_parts):
            parts = self._device_parts[: len(pages)]
            for _ in range(len(parts), len(pages)):
                part = widgets.HTML(value="", layout=_full_width())
                part.add_class("cgg-device-part")
                parts.append(part)
            for extra in self._device_parts[len(pages) :]:
                extra.close()
            self._device_parts = parts
            self.devices.children = tuple(parts)
            self.updates += 1
        for part, page in zip(self._device_parts, pages):
            self._set(part, page)

    def _parts(self) -> list[widgets.Widget]:
        return [
            *self._device_parts,
            self.header,
            self.devices,
            self.refresh_button,
            self.free_button,
            self.seed_button,
            self.seed_value,
            self.deterministic,
            *self.toggles.values(),
            self.actions,
            self.seed_row,
            self.details,
            self.now,
            self.message,
            *self.leftovers.parts(),
            *self.sections.values(),
        ]
