"""What the open %gpu_panel adds to a cell that changes nothing, in a real kernel
(ipykernel over ZMQ, the panel's widget messages really sent), as a difference against
the same kernel without the panel in the same run.

Run: python bench/bench_panel_cell.py [--quick] [--real-nvml] (bench_panel.py runs it too)

The kernel holds a few CPU tensors and an output, NVML answers from the fake 2-GPU machine
(or this machine's NVML with --real-nvml) and ``--live`` is off. Round after round, a
trivial cell (``pass``) runs once with the panel following the cells and once without it
(``panel.detach()`` / ``panel.attach()`` in cells between, not timed), each timed by the
client from its request to the kernel's idle status; the target is on the median of the
differences within a round (each cell with the panel against the one without it run just
before it: load that comes and goes on a shared machine hits both alike; the difference
of the two medians is printed beside it). After such a cell the panel writes no widget
value (nothing it shows changed) and, within `refresh.QUIET_S` of its last snapshot,
takes none; the second figure is a cell later than that, which takes the cheap snapshot
(NVML, torch, host RAM, the history; the last leftovers scan is kept:
`refresh.UNCHANGED_S`): the same target. With the real NVML the figures include NVML's
own reads (what the GPU run reports; the second has no verdict there); with the fake one
they are the panel's own work. The last lines give
the same differences as the kernel timed the cells (the dates on its busy and idle status
messages), which leaves out how soon the client is scheduled, and the panel's refresh
timed where it runs (its post_run_cell, wall and CPU time): no verdict.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench._common import p90, print_verdicts  # noqa: E402
from bench.bench_panel_live import FAKE_NVML, _Kernel  # noqa: E402

ADDED_TARGET_MS = 1.0  # the panel adds at most this to a cell that changed nothing
REAL_NVML = "real NVML"

SETUP = """
%load_ext colab_gpu_guard
from colab_gpu_guard import nvml
{fake}
import torch
weights = {{f'layer{{i}}': torch.ones(64, 64) for i in range(40)}}
torch.ones(32, 32) * 2
"""
OPEN = "import colab_gpu_guard\npanel = colab_gpu_guard.panel()\ndisplay(panel)"
# the panel's post-cell refresh timed where it runs (wall and CPU ns), kept in a closure:
# a list in the namespace would grow every cell, and the panel would see a change
TIME_REFRESH = """
def _time_refresh():
    import time
    samples = []
    real = panel.refresher.cell_ended

    def timed(result=None):
        wall, cpu = time.perf_counter_ns(), time.thread_time_ns()
        try:
            real(result)
        finally:
            samples.append((time.perf_counter_ns() - wall, time.thread_time_ns() - cpu))

    panel.refresher.cell_ended = timed
    return lambda: print(*samples[-1]) or samples.clear()
last_refresh = _time_refresh()
"""


class CellCost(NamedTuple):
    with_panel: list[float]  # ms per trivial cell, the panel following the cells
    without: list[float]  # the same kernel, the panel detached
    later: list[float]  # the panel following, its last snapshot over QUIET_S old
    later_without: list[float]  # the cells without the panel in the same rounds
    scans: int  # leftovers scans run in 20 unchanged cells back to back (0 or 1)
    nvml: str
    # the same cells timed by the kernel (its busy to idle status): the four lists above
    in_kernel: tuple[list[float], list[float], list[float], list[float]] = ([], [], [], [])
    # the panel's refresh after the cells with it (back to back, later): (wall, CPU) ms
    refresh: tuple[list[tuple[float, float]], list[tuple[float, float]]] = ([], [])

    @property
    def real_nvml(self) -> bool:
        return self.nvml == REAL_NVML

    @property
    def added_ms(self) -> float:
        return _paired(self.with_panel, self.without)

    @property
    def later_ms(self) -> float:
        return _paired(self.later, self.later_without)

    def in_kernel_ms(self) -> tuple[float, float]:
        """(back to back, over a second later): what was added, as the kernel timed it."""
        with_panel, without, later, later_without = self.in_kernel
        return _paired(with_panel, without), _paired(later, later_without)

    def unpaired(self) -> tuple[float, float]:
        """(back to back, over a second later): the difference of the two medians."""
        median = statistics.median
        return (
            median(self.with_panel) - median(self.without),
            median(self.later) - median(self.later_without),
        )

    def lines(self) -> list[tuple[str, bool | None]]:
        base = statistics.median(self.without)
        back_medians, later_medians = self.unpaired()
        kernel = ""
        if all(self.in_kernel):
            back, late = self.in_kernel_ms()
            kernel = (
                "the same cells timed by the kernel (its busy to its idle status: the client's "
                f"own scheduling left out): added back to back {back:.3f} ms, over a second "
                f"after the last snapshot {late:.3f} ms"
            )
        rows = [
            (
                f"[baseline] a trivial cell without the panel: median {base:.3f} ms, p90 "
                f"{p90(self.without):.3f} ms ({len(self.without)} cells, real kernel)",
                None,
            ),
            (
                "the same cell with the panel open: median "
                f"{statistics.median(self.with_panel):.3f} ms, p90 "
                f"{p90(self.with_panel):.3f} ms; leftovers scans in 20 more such cells: "
                f"{self.scans}",
                None,
            ),
            (
                f"added per unchanged cell by the open panel ({self.nvml}), cells back to back: "
                f"{self.added_ms:.3f} ms, the median of {len(self.without)} rounds' differences "
                f"(of the medians: {back_medians:.3f} ms; target <= {ADDED_TARGET_MS:g} ms)",
                self.added_ms <= ADDED_TARGET_MS,
            ),
            (
                "added per unchanged cell over a second after the panel's last snapshot (the "
                f"cheap snapshot - NVML, torch, host RAM, history - nothing written; {self.nvml}): "
                f"{self.later_ms:.3f} ms (of the medians: {later_medians:.3f} ms; target <= "
                f"{ADDED_TARGET_MS:g} ms"
                + (
                    "; no verdict with the real NVML: its own reads are in it, measured in "
                    "the GPU run)"
                    if self.real_nvml
                    else ")"
                ),
                None if self.real_nvml else self.later_ms <= ADDED_TARGET_MS,
            ),
        ]
        if kernel:
            rows.append((kernel, None))
        if all(self.refresh):
            back, late = (
                (statistics.median(w for w, _ in pairs), statistics.median(c for _, c in pairs))
                for pairs in self.refresh
            )
            rows.append(
                (
                    "the panel's own refresh after such a cell, timed where it runs (its "
                    f"post_run_cell): back to back {back[0]:.3f} ms ({back[1]:.3f} ms CPU), over "
                    f"a second after the last snapshot {late[0]:.3f} ms ({late[1]:.3f} ms CPU)",
                    None,
                )
            )
        return rows


def _paired(with_panel: list[float], without: list[float]) -> float:
    """The median of the differences between the cells of a round, with and without."""
    return statistics.median(a - b for a, b in zip(with_panel, without))


def _timed(kernel: _Kernel, code: str) -> tuple[float, float]:
    """The cell's time in ms as the client saw it (request to idle status) and as the
    kernel did (the dates on its busy and idle status messages)."""
    dates = {}

    def hook(message: dict) -> None:
        if message["header"]["msg_type"] == "status":
            dates[message["content"]["execution_state"]] = message["header"]["date"]

    start = time.perf_counter()
    reply = kernel.client.execute_interactive(code, timeout=300, output_hook=hook)
    client = (time.perf_counter() - start) * 1e3
    if reply["content"]["status"] != "ok":
        raise RuntimeError(f"kernel: {reply['content'].get('evalue')}")
    return client, (dates["idle"] - dates["busy"]).total_seconds() * 1e3


def measure(quick: bool = False, real_nvml: bool = False, smoke: bool = False) -> CellCost:
    rounds = 3 if smoke else 40 if quick else 200
    kernel = _Kernel()
    try:
        kernel.run(SETUP.format(fake="" if real_nvml else FAKE_NVML))
        kernel.run(OPEN)
        # with the panel, without; later with, later without: (client, kernel) each
        cells: tuple[list, list, list, list] = ([], [], [], [])
        refresh: tuple[list, list] = ([], [])  # the panel's refresh: back to back, later
        kernel.run("from colab_gpu_guard.ipython.panel import refresh\nQUIET = refresh.QUIET_S")
        kernel.run(TIME_REFRESH)

        def refresh_time() -> tuple[float, float]:
            wall, cpu = kernel.run("last_refresh()").split()
            return int(wall) / 1e6, int(cpu) / 1e6

        for index in range(rounds + 5):
            kernel.run("panel.detach()\nrefresh.QUIET_S = QUIET")
            alone = _timed(kernel, "pass")
            kernel.run("panel.attach()")
            followed = _timed(kernel, "pass")
            followed_refresh = refresh_time()
            kernel.run("panel.detach()\nrefresh.QUIET_S = -1.0")  # every snapshot too old
            alone_again = _timed(kernel, "pass")
            kernel.run("panel.attach()")
            late = _timed(kernel, "pass")
            late_refresh = refresh_time()
            if index >= 5:  # warm-up rounds
                for sink, timed in zip(cells, (followed, alone, late, alone_again)):
                    sink.append(timed)
                refresh[0].append(followed_refresh)
                refresh[1].append(late_refresh)
        # how many full scans a refresh after such cells ran (`_scan` is the last one)
        kernel.run("done_at = panel.refresher._scan.done_at")
        for _ in range(20):
            kernel.run("pass")
        scans = int(kernel.run("print(int(panel.refresher._scan.done_at != done_at))").strip())
    finally:
        kernel.close()
    nvml = REAL_NVML if real_nvml else "fake NVML, 2 GPUs"
    client = [[pair[0] for pair in sink] for sink in cells]
    in_kernel = tuple([pair[1] for pair in sink] for sink in cells)
    return CellCost(*client, scans, nvml, in_kernel, refresh)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--real-nvml", action="store_true", help="this machine's NVML")
    args = parser.parse_args(argv)
    cost = measure(args.quick, args.real_nvml)
    return print_verdicts(cost.lines())


if __name__ == "__main__":
    sys.exit(main())
