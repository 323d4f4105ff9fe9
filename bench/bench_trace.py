"""What %%gpu_trace costs: a training step traced against the same step untraced (CUDA),
the analysis of a history against torch's own reader of it, the scan that names what a
cell kept, and the measurement behind "no CPU view" (torch's profiler on a CPU step).

Run: python bench/bench_trace.py [--quick] [--smoke] [--json PATH]

Rows, each a ratio measured in this run, interleaved so drift hits both sides alike:
- CUDA: a training step (an MLP, forward, backward, Adam) with torch's allocation history
  recording on (as %%gpu_trace records it: Python stacks, bounded) / the same step with it
  off; and one whole `trace_cell()` around the step (switching on, the step, the snapshot,
  the replay, the report) / the step. Without CUDA these rows say "not run" and why.
- CPU: replaying a constructed history of N allocator events into the report / torch's
  `_memory_viz.trace` text over the same snapshot (the peer that reads the same format).
- CPU: the `find_leftovers` scan that names what a cell kept, with 10,000 user objects;
  the default quick scan stops at 0.1 s.
- CPU: a training step under `torch.profiler.profile(profile_memory=True, with_stack=True)`
  / the step: the cost of the source %%gpu_trace does not use for a CPU view.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._common import (  # noqa: E402
    NOT_RUN,
    bench_parser,
    interleaved_ms,
    print_rows,
    row,
    write_json,
)

BENCH = "trace"
CUDA_ROWS = (
    "training step, history recording on (CUDA)",
    "trace_cell() around one training step (CUDA)",
    "recording switched on and off around the step (CUDA)",
)


def training_step(torch, device: str, width: int):
    model = torch.nn.Sequential(
        torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10)
    ).to(device)
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(256, width, device=device)
    y = torch.randint(0, 10, (256,), device=device)

    def step() -> None:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        if device == "cuda":
            torch.cuda.synchronize()

    return step


def cuda_rows(torch, runs: int, width: int) -> list[dict]:
    from colab_gpu_guard.trace import trace_cell
    from colab_gpu_guard.trace.recording import DEFAULT_MAX_ENTRIES

    if not torch.cuda.is_available():
        why = "no CUDA device (torch.cuda.is_available() is False)"
        return [row(BENCH, name, None, result=NOT_RUN, note=why) for name in CUDA_ROWS]
    step = training_step(torch, "cuda", width)
    memory = torch.cuda.memory

    def recorded() -> None:
        memory._record_memory_history(
            "all", context="alloc", stacks="python", max_entries=DEFAULT_MAX_ENTRIES
        )
        step()
        memory._record_memory_history(None)

    def traced() -> None:
        with trace_cell(names=False) as tracing:
            step()
        assert tracing.report is not None and tracing.report.unavailable is None

    samples = interleaved_ms({"untraced": step, "recorded": recorded, "traced": traced}, runs)
    # the recording's own cost without switching: on for a run of steps
    memory._record_memory_history(
        "all", context="alloc", stacks="python", max_entries=DEFAULT_MAX_ENTRIES
    )
    on = interleaved_ms({"on": step}, runs)["on"]
    memory._record_memory_history(None)
    off = interleaved_ms({"off": step}, runs)["off"]
    base = statistics.median(samples["untraced"])
    return [
        row(
            BENCH,
            CUDA_ROWS[0],
            statistics.median(on),
            statistics.median(off),
            baseline="the step, recording off",
            note=f"MLP {width} wide, batch 256, Adam; {torch.cuda.get_device_name(0)}",
        ),
        row(
            BENCH,
            CUDA_ROWS[1],
            statistics.median(samples["traced"]),
            base,
            baseline="the step untraced",
            note="switch on, step, snapshot, replay, report (names not linked)",
        ),
        row(
            BENCH,
            CUDA_ROWS[2],
            statistics.median(samples["recorded"]),
            base,
            baseline="the step untraced",
        ),
    ]


def replay_row(events: int, runs: int) -> dict:
    from torch.cuda import _memory_viz

    from colab_gpu_guard.trace.kinds import OWN
    from colab_gpu_guard.trace.recording import Recorder
    from tests.trace_allocator import Allocator, frames

    allocator = Allocator()
    here = frames(("<ipython-input-3-0123456789ab>", 2, "<module>"), ("/tmp/model.py", 7, "f"))
    held: list[int] = []
    while sum(len(trace) for trace in allocator.traces) < events:
        held.append(allocator.alloc(1 << 20, here))
        if len(held) > 8:
            allocator.free(held.pop(0), here)
    snapshot = allocator.snapshot()
    recorder = Recorder(torch=None, max_entries=10 * events)
    recorder.mode = OWN
    samples = interleaved_ms(
        {
            "ours": lambda: str(recorder.analyse(snapshot)),
            "torch": lambda: _memory_viz.trace(snapshot),
        },
        runs,
        warmup=1,
    )
    return row(
        BENCH,
        f"replay {events:,} events into the report (CPU)",
        statistics.median(samples["ours"]),
        statistics.median(samples["torch"]),
        baseline="torch's _memory_viz.trace over the same snapshot",
    )


def names_row(runs: int) -> dict:
    from colab_gpu_guard.leftovers.scan import find_leftovers
    from colab_gpu_guard.trace.recording import NAMES_BUDGET_S

    namespace = {f"v{n}": [n, str(n)] for n in range(10_000)}
    samples = interleaved_ms(
        {
            "scan": lambda: find_leftovers(
                device="cuda", namespace=namespace, budget_s=NAMES_BUDGET_S
            )
        },
        runs,
        warmup=1,
    )
    return row(
        BENCH,
        "naming what a cell kept: find_leftovers, 10,000 names (CPU)",
        statistics.median(samples["scan"]),
        target=f"<= {NAMES_BUDGET_S * 1000:.0f} ms (its budget)",
        ok=statistics.median(samples["scan"]) <= NAMES_BUDGET_S * 1000 * 1.5,
        note="run after each traced cell by default; --names for a full scan",
    )


def profiler_row(torch, runs: int, width: int) -> dict:
    import contextlib
    import os

    step = training_step(torch, "cpu", width)

    def profiled() -> None:
        profiler = torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU],
            profile_memory=True,
            with_stack=True,
            record_shapes=True,
        )
        with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), profiler:
            step()

    samples = interleaved_ms({"step": step, "profiled": profiled}, runs, warmup=1)
    return row(
        BENCH,
        "CPU step under torch.profiler memory + stacks (CPU)",
        statistics.median(samples["profiled"]),
        statistics.median(samples["step"]),
        baseline="the step",
        note="not offered as a CPU view: it names functions, not lines, and misses tensors",
    )


def main(argv=None) -> int:
    parser = bench_parser(__doc__.splitlines()[0], "fewer runs")
    args = parser.parse_args(argv)
    runs = 3 if args.smoke else 10 if args.quick else 30
    width = 256 if args.smoke else 1024
    events = 2_000 if args.smoke else 20_000
    import torch

    rows = cuda_rows(torch, runs, width)
    rows.append(replay_row(events, max(3, runs // 3)))
    rows.append(names_row(max(3, runs // 3)))
    rows.append(profiler_row(torch, max(3, runs // 3), width))
    print_rows(rows)
    write_json(args.json, BENCH, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
