"""Benchmarks against the tools users would pick instead (issue 8).

``python -m bench [--quick] [--smoke] [--json PATH]`` runs every benchmark script in its own
fresh interpreter and prints one table of medians and same-run ratios; see ``bench/run.py``.
"""
