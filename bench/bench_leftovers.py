"""Cost of `find_leftovers()` on a big namespace: 10^5 tensors in nested containers beside
10^6 other objects.

Run: python bench/bench_leftovers.py [--quick]

Prints medians and ratios against baselines measured in this same run:
- the baseline: the obvious named walk (recursive, an f-string name at every level,
  isinstance checks, no storage deduplication, no optimizer/attribute naming);
- for context: the usual snippet `[o for o in gc.get_objects() if torch.is_tensor(o)]`
  plus summing storage bytes (finds tensors, names none), and one `gc.collect()`.
Targets: at most 2x the naive named walk, while also deduplicating storages, naming module
parameters, optimizer state, gradients and attributes, and recording holders; and under 2 s
in all at full size (10^5 tensors, 10^6 objects).
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402

RATIO_TARGET = 2.0
ABSOLUTE_TARGET_S = 2.0


def timed(function: Callable[[], object], runs: int) -> list[float]:
    function()
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return samples


def build(tensors: int, others: int) -> dict:
    """A notebook-like namespace: batches of tensors in lists/dicts, and plain data."""
    per_batch = 10
    batches = [
        {
            "inputs": [torch.zeros(4) for _ in range(per_batch // 2)],
            "labels": tuple(torch.zeros(2) for _ in range(per_batch // 2)),
        }
        for _ in range(tensors // per_batch)
    ]
    quarter = others // 4
    plain = {
        "numbers": list(range(quarter)),
        "words": [f"w{n}" for n in range(quarter)],
        "pairs": [(n, n + 1) for n in range(quarter // 2)],
        "rows": [{"id": n} for n in range(quarter // 2)],
    }
    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(20)])
    return {"batches": batches, "plain": plain, "model": model}


def naive(torch_module=torch) -> int:
    total = 0
    seen = set()
    for obj in gc.get_objects():
        if torch_module.is_tensor(obj):
            storage = obj.untyped_storage()
            key = storage.data_ptr()
            if key not in seen:
                seen.add(key)
                total += storage.nbytes()
    return total


def naive_named(namespace: dict) -> list:
    """The obvious named walk: recursive, f-string names at every level, no storage dedupe."""
    found: list = []
    seen: set = set()
    tensor, module = torch.Tensor, torch.nn.Module

    def walk(obj, name: str, depth: int) -> None:
        if depth > 10:
            return
        if isinstance(obj, tensor):
            storage = obj.untyped_storage()
            found.append(
                (
                    name,
                    storage.data_ptr(),
                    storage.nbytes(),
                    tuple(obj.shape),
                    str(obj.dtype),
                    str(obj.device),
                )
            )
            return
        if id(obj) in seen:
            return
        if isinstance(obj, (list, tuple)):
            seen.add(id(obj))
            for index, item in enumerate(obj):
                walk(item, f"{name}[{index}]", depth + 1)
        elif isinstance(obj, dict):
            seen.add(id(obj))
            for key, value in obj.items():
                walk(value, f"{name}[{key!r}]", depth + 1)
        elif isinstance(obj, module):
            seen.add(id(obj))
            for key, value in obj.named_parameters():
                walk(value, f"{name}.{key}", depth + 1)

    for key, value in list(namespace.items()):
        walk(value, key, 0)
    return found


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10x smaller, fewer runs")
    args = parser.parse_args()
    tensors, others, runs = (10_000, 100_000, 3) if args.quick else (100_000, 1_000_000, 5)
    namespace = build(tensors, others)
    live = len(gc.get_objects())
    found = find_leftovers(namespace=namespace)
    named = sum(1 for item in found) + sum(len(item.shared_with) for item in found)

    rows = []
    ours = statistics.median(timed(lambda: find_leftovers(namespace=namespace), runs))
    baseline = statistics.median(timed(lambda: naive_named(namespace), runs))
    anonymous = statistics.median(timed(naive, runs))
    collect = statistics.median(timed(gc.collect, runs))
    deep = statistics.median(timed(lambda: find_leftovers(namespace=namespace, deep=True), runs))
    rows.append(("find_leftovers(namespace)", ours, ours / baseline))
    rows.append(("find_leftovers(deep=True)", deep, deep / baseline))
    rows.append(("baseline: naive recursive named walk", baseline, 1.0))
    rows.append(("context: gc.get_objects() tensor scan", anonymous, anonymous / baseline))
    rows.append(("context: gc.collect()", collect, collect / baseline))

    print(
        f"find_leftovers: {tensors} tensors (+{len(list(namespace['model'].parameters()))} "
        f"parameters) in nested containers, {others} other objects, {live} gc objects alive; "
        f"{len(found)} storages named ({named} names)"
    )
    print(f"{'what':42} {'median':>10} {'vs baseline':>12}")
    for name, seconds, ratio in rows:
        print(f"{name:42} {seconds * 1e3:8.1f} ms {ratio:11.2f}x")
    ok_ratio = ours / baseline <= RATIO_TARGET
    ok_absolute = args.quick or ours <= ABSOLUTE_TARGET_S
    print(
        f"target: <= {RATIO_TARGET:g}x the naive named walk: {ours / baseline:.2f}x "
        f"{'PASS' if ok_ratio else 'FAIL'}; <= {ABSOLUTE_TARGET_S:g} s at full size: "
        f"{ours:.2f} s {'PASS' if ok_absolute else 'FAIL'}"
        + (" (not checked with --quick)" if args.quick else "")
    )
    return 0 if ok_ratio and ok_absolute else 1


if __name__ == "__main__":
    sys.exit(main())
