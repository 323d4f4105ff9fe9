"""Cost of ``%gpu_panel --live``, in a real kernel (ipykernel, over ZMQ), against baselines
measured in the same kernel in the same run.

Run: python bench/bench_panel_live.py [--quick] [--real-nvml] (bench_panel.py runs it too)

- per tick: the live thread's CPU time per update (cheap snapshot, render, comm messages
  serialised and queued on IOPub), against one ``panel.refresh()`` (the refresh after a
  cell) timed in the same kernel; with the fake NVML a GPU's utilisation changes all the
  time, as a busy GPU's does, so both rewrite its line;
- per second: that thread's CPU seconds per second of a running cell at ``--live 0.5``
  (the most frequent allowed);
- slowdown: a busy pure-Python loop (it holds the GIL, the worst case for a Python
  thread beside it) run for the same time with live off, ``--live 0.5``, and off again,
  round after round: iterations per second with live / the mean of the two without; the
  off/off ratio of the same rounds says how noisy the machine is.

Prints the figures, the targets and PASS/FAIL; `measure()` returns them for bench_panel.py.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import NamedTuple, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from bench._common import path_first, print_verdicts  # noqa: E402

SECONDS = 0.5  # the shortest interval --live allows: the dearest
TICK_TARGET = 1.0  # a tick costs at most one refresh after a cell (same thread)
SHARE_TARGET = 0.02  # at most 2% of one core while a cell runs
SLOWDOWN_TARGET = 0.97  # a busy loop keeps at least 97% of its speed

SETUP = """
%load_ext colab_gpu_guard
import json, time
from colab_gpu_guard import nvml
machine = None
{fake}
def vary(n):  # a busy GPU's utilisation changes all the time: its line is rewritten
    if machine is not None:
        machine.gpus[1].utilization = (n % 100, 12)
import torch
weights = {{f'layer{{i}}': torch.ones(64, 64) for i in range(40)}}
import colab_gpu_guard
panel = colab_gpu_guard.panel()
"""
FAKE_NVML = (
    "from tests import fake_pynvml\n"
    "machine = fake_pynvml.two_gpus()\n"
    "nvml.set_pynvml(fake_pynvml.install(machine))"
)
REFRESH = """
cpu, wall = [], []
for n in range({runs}):
    vary(n)
    c, w = time.thread_time(), time.perf_counter()
    {call}
    cpu.append(time.thread_time() - c)
    wall.append(time.perf_counter() - w)
print(json.dumps({{"cpu": cpu, "wall": wall}}))
"""
BUSY = """
stats = panel.live_stats()
before = (stats.ticks, stats.cpu_seconds) if stats else (0, 0.0)
x, n, start = 1.0, 0, time.perf_counter()
while time.perf_counter() - start < {seconds}:
    for step in range(2000):
        x = x * 1.0000001 + 1e-9
    n += 1
    vary(n)
wall = time.perf_counter() - start
stats = panel.live_stats()
after = (stats.ticks, stats.cpu_seconds) if stats else (0, 0.0)
print(json.dumps({{"rate": n / wall, "wall": wall, "ticks": after[0] - before[0],
                  "cpu": after[1] - before[1]}}))
"""


class LiveCost(NamedTuple):
    tick_cpu_ms: float  # median over rounds of (thread CPU / ticks)
    refresh_cpu_ms: float  # median panel.refresh() CPU, same kernel
    alone_cpu_ms: float  # median tick CPU when the cell's thread runs it (no contention)
    share: float  # live thread CPU seconds per second of cell
    ticks_per_s: float
    slowdown: float  # median over rounds: busy-loop speed with --live 0.5 / with it off
    same: tuple[float, ...]  # off / off in the same rounds: the machine's noise
    rounds: int
    nvml: str

    def lines(self) -> list[tuple[str, Optional[bool]]]:
        """(text, passed; None: no target) for each figure."""
        alone = self.alone_cpu_ms / self.refresh_cpu_ms
        busy = self.tick_cpu_ms / self.refresh_cpu_ms
        return [
            (
                f"one tick, run by the cell's thread: {self.alone_cpu_ms:.3f} ms CPU = "
                f"{alone:.2f} x a panel.refresh() ({self.refresh_cpu_ms:.3f} ms CPU, same "
                f"kernel; target <= {TICK_TARGET:g} x)",
                alone <= TICK_TARGET,
            ),
            (
                f"one tick, in the live thread beside a busy loop: {self.tick_cpu_ms:.3f} ms "
                f"CPU = {busy:.2f} x that refresh (thread CPU time, taken while the loop runs)",
                None,
            ),
            (
                f"--live {SECONDS:g}: the live thread uses {self.share * 100:.2f}% of one core "
                f"while a cell runs ({self.ticks_per_s:.2f} ticks/s; target <= "
                f"{SHARE_TARGET * 100:g}%)",
                self.share <= SHARE_TARGET,
            ),
            self._slowdown_line(),
        ]

    def _slowdown_line(self) -> tuple[str, Optional[bool]]:
        """The busy loop's speed with live on. Where live-off runs of the same rounds differ
        from each other by more than the target's margin and the figure lies inside that
        spread, the machine cannot tell: the line says so and sets no verdict (the thread's
        share of a core above bounds what it takes from the loop)."""
        low, high = min(self.same), max(self.same)
        text = (
            f"--live {SECONDS:g}: a busy Python loop runs at {self.slowdown:.3f} x its "
            f"speed with live off (median of {self.rounds} off/live/off rounds; off vs off "
            f"in the same rounds: median {statistics.median(self.same):.3f} x, from "
            f"{low:.3f} to {high:.3f}; target >= {SLOWDOWN_TARGET:g} x)"
        )
        if self.slowdown >= SLOWDOWN_TARGET:
            return text, True
        floor = min(low, 1 / high)  # off vs off, either way round
        if floor < SLOWDOWN_TARGET and self.slowdown >= floor:
            return f"{text}: CANNOT TELL (live off varies as much on this machine)", None
        return text, False


class _Kernel:
    def __init__(self) -> None:
        from jupyter_client.manager import start_new_kernel

        env = dict(os.environ, PYTHONPATH=path_first(ROOT))
        self.manager, self.client = start_new_kernel(
            startup_timeout=120, kernel_name="python3", env=env, cwd=ROOT
        )

    def run(self, code: str, timeout: float = 300) -> str:
        reply = self.client.execute_interactive(
            code, timeout=timeout, output_hook=self._hook, stop_on_error=True
        )
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"kernel: {reply['content'].get('evalue')}: {self._out}")
        out, self._out = self._out, ""
        return out

    _out = ""

    def _hook(self, message: dict) -> None:
        if message["msg_type"] == "stream" and message["content"]["name"] == "stdout":
            self._out += message["content"]["text"]

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


def measure(quick: bool = False, real_nvml: bool = False, smoke: bool = False) -> LiveCost:
    rounds = 1 if smoke else 3 if quick else 10
    seconds = 1.2 if smoke else 2.0 if quick else 3.0
    kernel = _Kernel()
    try:
        kernel.run(SETUP.format(fake="" if real_nvml else FAKE_NVML))
        said = kernel.run(f"%gpu_panel --live {SECONDS}")
        if "update every" not in said:
            raise RuntimeError(f"--live did not start: {said.strip()}")
        runs = 5 if smoke else 20 if quick else 100
        refresh = json.loads(kernel.run(REFRESH.format(runs=runs, call="panel.refresh()")))
        # the same tick, run by the cell's own thread: what it costs without a busy thread
        # beside it
        alone = json.loads(kernel.run(REFRESH.format(runs=runs, call="panel.live_lines.tick()")))
        ratios, same, ticks, cpu, wall = [], [], 0, 0.0, 0.0
        per_tick = []
        for _ in range(rounds):  # off, live, off: the live run against the two around it
            kernel.run("%gpu_panel --live off")
            before = json.loads(kernel.run(BUSY.format(seconds=seconds)))
            kernel.run(f"%gpu_panel --live {SECONDS}")
            with_live = json.loads(kernel.run(BUSY.format(seconds=seconds)))
            kernel.run("%gpu_panel --live off")
            after = json.loads(kernel.run(BUSY.format(seconds=seconds)))
            ratios.append(with_live["rate"] / ((before["rate"] + after["rate"]) / 2))
            same.append(after["rate"] / before["rate"])  # the noise floor: off vs off
            ticks += with_live["ticks"]
            cpu += with_live["cpu"]
            wall += with_live["wall"]
            if with_live["ticks"]:
                per_tick.append(with_live["cpu"] / with_live["ticks"] * 1e3)
    finally:
        kernel.close()
    return LiveCost(
        tick_cpu_ms=statistics.median(per_tick) if per_tick else float("nan"),
        refresh_cpu_ms=statistics.median(refresh["cpu"]) * 1e3,
        alone_cpu_ms=statistics.median(alone["cpu"]) * 1e3,
        share=cpu / wall,
        ticks_per_s=ticks / wall,
        slowdown=statistics.median(ratios),
        same=tuple(same),
        rounds=rounds,
        nvml="real NVML" if real_nvml else "fake NVML, 2 GPUs",
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer, shorter rounds")
    parser.add_argument("--real-nvml", action="store_true", help="this machine's NVML")
    args = parser.parse_args(argv)
    cost = measure(args.quick, args.real_nvml)
    print(f"live cost in a real kernel ({cost.nvml})")
    return print_verdicts(cost.lines())


if __name__ == "__main__":
    sys.exit(main())
