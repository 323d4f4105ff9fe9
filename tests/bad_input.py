"""A line each magic refuses, shared by the help and the conflicting-flags tests."""

from __future__ import annotations

# A line each magic refuses (besides an unknown option), and what its error says.
BAD_INPUT = {
    "seed_all": ("-7", "seed must be an integer"),
    "repro": ("--diff a.json --json", "--diff and --json contradict each other: give one"),
    "gpu_status": ("extra", "unrecognized arguments: extra"),
    "gpu_advice": ("maybe", "expected 'on' or 'off', got 'maybe'"),
    "gpu_panel": ("--live fast", "--live takes seconds or off"),
    "gpu_history": ("--limit -1", "--limit must be 0 or more"),
    "gpu_reset": ("1x", "not a variable name: '1x'"),
    "gpu_trace": ("--max-entries 0", "--max-entries must be 1 or more"),
}
