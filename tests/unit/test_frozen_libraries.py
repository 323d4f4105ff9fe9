"""The suite freezes the libraries' import-time objects (`tests/conftest.py`, for speed):
what the tests make - the shell, its namespace, a cell's objects - must stay where the
collector, `gc.get_objects()` and `gc.get_referrers()` see them, as in a notebook."""

from __future__ import annotations

import gc


def test_the_shell_and_what_a_cell_makes_are_not_frozen(ip, run_cell):
    assert gc.get_freeze_count() > 0  # the libraries' objects are frozen
    run_cell("held_by_the_namespace = [[1], [2]]")
    held = ip.user_ns["held_by_the_namespace"]
    assert any(referrer is ip.user_ns for referrer in gc.get_referrers(held))
    tracked = {id(item) for item in gc.get_objects()}
    for made in (ip, ip.user_ns, ip.user_ns_hidden, held, held[0]):
        assert id(made) in tracked
    ip.user_ns.pop("held_by_the_namespace")
