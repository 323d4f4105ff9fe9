"""What the open %gpu_panel adds to a cell that changes nothing, in a real kernel
(ipykernel over ZMQ, the panel's widget messages really sent), as a difference against
the same kernel without the panel in the same run.

Run: python bench/bench_panel_cell.py [--quick] [--real-nvml] (bench_panel.py runs it too)

The kernel holds a few CPU tensors and an output, NVML answers from the fake 2-GPU machine
(or this machine's NVML with --real-nvml) and ``--live`` is off. Round after round, a
trivial cell (``pass``) runs once with the panel following the cells and once without it
(``panel.detach()`` / ``panel.attach()`` in cells between, not timed), each timed by the
client from its request to the kernel's idle status; the target is on the difference of
the medians. After such a cell the panel writes no widget value (nothing it shows
changed) and, within `refresh.QUIET_S` of its last snapshot, takes none; the second figure
is a cell later than that, which takes the cheap snapshot (NVML, torch, host RAM, the
history; the last leftovers scan is kept: `refresh.UNCHANGED_S`). With the real NVML the
figures include NVML's own reads (what the GPU run reports); with the fake one they are
the panel's own work.
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

SETUP = """
%load_ext colab_gpu_guard
from colab_gpu_guard import nvml
{fake}
import torch
weights = {{f'layer{{i}}': torch.ones(64, 64) for i in range(40)}}
torch.ones(32, 32) * 2
"""
OPEN = "import colab_gpu_guard\npanel = colab_gpu_guard.panel()\ndisplay(panel)"


class CellCost(NamedTuple):
    with_panel: list[float]  # ms per trivial cell, the panel following the cells
    without: list[float]  # the same kernel, the panel detached
    later: list[float]  # the panel following, its last snapshot over QUIET_S old
    later_without: list[float]  # the cells without the panel in the same rounds
    scans: int  # leftovers scans run in 20 unchanged cells back to back (0 or 1)
    nvml: str

    @property
    def added_ms(self) -> float:
        return statistics.median(self.with_panel) - statistics.median(self.without)

    @property
    def later_ms(self) -> float:
        return statistics.median(self.later) - statistics.median(self.later_without)

    def lines(self) -> list[tuple[str, bool | None]]:
        base = statistics.median(self.without)
        return [
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
                f"{self.added_ms:.3f} ms (target <= {ADDED_TARGET_MS:g} ms)",
                self.added_ms <= ADDED_TARGET_MS,
            ),
            (
                "added per unchanged cell over a second after the panel's last snapshot (the "
                f"cheap snapshot - NVML, torch, host RAM, history - nothing written): "
                f"{self.later_ms:.3f} ms (no verdict: most of it is gpu_status's own reads, "
                "measured in bench_status.py)",
                None,
            ),
        ]


def _timed(kernel: _Kernel, code: str) -> float:
    start = time.perf_counter()
    kernel.run(code)
    return (time.perf_counter() - start) * 1e3


def measure(quick: bool = False, real_nvml: bool = False) -> CellCost:
    rounds = 40 if quick else 200
    kernel = _Kernel()
    try:
        kernel.run(SETUP.format(fake="" if real_nvml else FAKE_NVML))
        kernel.run(OPEN)
        with_panel, without, later, later_without = [], [], [], []
        kernel.run("from colab_gpu_guard.ipython.panel import refresh\nQUIET = refresh.QUIET_S")
        for index in range(rounds + 5):
            kernel.run("panel.detach()\nrefresh.QUIET_S = QUIET")
            alone = _timed(kernel, "pass")
            kernel.run("panel.attach()")
            followed = _timed(kernel, "pass")
            kernel.run("panel.detach()\nrefresh.QUIET_S = -1.0")  # every snapshot too old
            alone_again = _timed(kernel, "pass")
            kernel.run("panel.attach()")
            late = _timed(kernel, "pass")
            if index >= 5:  # warm-up rounds
                later_without.append(alone_again)
                later.append(late)
                without.append(alone)
                with_panel.append(followed)
        # how many full scans a refresh after such cells ran (`_scan` is the last one)
        kernel.run("done_at = panel.refresher._scan.done_at")
        for _ in range(20):
            kernel.run("pass")
        scans = int(kernel.run("print(int(panel.refresher._scan.done_at != done_at))").strip())
    finally:
        kernel.close()
    nvml = "real NVML" if real_nvml else "fake NVML, 2 GPUs"
    return CellCost(with_panel, without, later, later_without, scans, nvml)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--real-nvml", action="store_true", help="this machine's NVML")
    args = parser.parse_args(argv)
    cost = measure(args.quick, args.real_nvml)
    return print_verdicts(cost.lines())


if __name__ == "__main__":
    sys.exit(main())
