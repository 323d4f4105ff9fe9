"""The panel's widgets and layout: one core ipywidgets tree (``VBox``, ``HBox``, ``HTML``,
``Button``, ``IntText``, ``Checkbox``), and the writes that send only what changed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import ipywidgets as widgets

from colab_gpu_guard.status.panel_html import render_device, render_no_gpu

if TYPE_CHECKING:
    from colab_gpu_guard.status import GpuStatus

DEFAULT_SEED = 42


def _html_part(name: str) -> widgets.HTML:
    part = widgets.HTML(value="", layout=widgets.Layout(width="100%"))
    part.add_class(f"cgg-{name}")
    return part


class PanelView(widgets.VBox):
    """The panel's parts and layout; ``updates`` counts the widget values written."""

    def __init__(self, **kwargs: Any) -> None:
        self.updates = 0
        self.header = _html_part("header")
        self.notes = _html_part("notes")
        self.devices = widgets.VBox([], layout=widgets.Layout(width="100%"))
        self.devices.add_class("cgg-devices")
        self.leftovers = _html_part("leftovers")
        self.history = _html_part("history")
        self.refresh_button = widgets.Button(
            description="Refresh", icon="refresh", tooltip="take a new snapshot now"
        )
        self.free_button = widgets.Button(
            description="Free memory",
            button_style="warning",
            icon="trash",
            tooltip="gpu_reset(): release output history, tracebacks and cached blocks "
            "(never your variables)",
        )
        self.seed_value = widgets.IntText(
            value=DEFAULT_SEED, description="seed", layout=widgets.Layout(width="170px")
        )
        self.deterministic = widgets.Checkbox(
            value=False,
            description="deterministic",
            indent=False,
            layout=widgets.Layout(width="120px"),
        )
        self.seed_button = widgets.Button(
            description="Seed", icon="random", tooltip="seed_all(seed, deterministic=...)"
        )
        for button in self.buttons:
            button.layout = widgets.Layout(width="auto")
        self.actions = widgets.HBox(
            [
                self.refresh_button,
                self.free_button,
                self.seed_value,
                self.deterministic,
                self.seed_button,
            ],
            layout=widgets.Layout(flex_flow="row wrap", align_items="center"),
        )
        self.actions.add_class("cgg-actions")
        self.message = _html_part("message")
        self.footer = _html_part("footer")
        self._device_parts: list[widgets.HTML] = []
        super().__init__(
            [
                self.header,
                self.notes,
                self.devices,
                self.leftovers,
                self.history,
                self.actions,
                self.message,
                self.footer,
            ],
            layout=widgets.Layout(
                border="1px solid #bbb", padding="6px", width="100%", max_width="760px"
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

    def _set(self, part: widgets.HTML, value: str) -> bool:
        if part.value == value:
            return False
        part.value = value
        self.updates += 1
        return True

    def _render_devices(self, status: GpuStatus) -> None:
        if status.has_gpu:
            pages = [render_device(status, device) for device in status.nvml.devices]
        else:
            pages = [render_no_gpu(status)]
        if len(pages) != len(self._device_parts):
            parts = []
            for index in range(len(pages)):
                if index < len(self._device_parts):
                    parts.append(self._device_parts[index])
                else:
                    part = widgets.HTML(value="", layout=widgets.Layout(width="100%"))
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
            self.notes,
            self.devices,
            self.leftovers,
            self.history,
            self.refresh_button,
            self.free_button,
            self.seed_value,
            self.deterministic,
            self.seed_button,
            self.actions,
            self.message,
            self.footer,
        ]
