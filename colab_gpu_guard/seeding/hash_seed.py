"""This interpreter's str hash seed: fixed when it started (CPython reads PYTHONHASHSEED then,
and never again), so setting PYTHONHASHSEED later reaches only processes started after."""

from __future__ import annotations

import sys
from typing import NamedTuple, Optional

RANDOM = "random"


class HashSeedAtStart(NamedTuple):
    """`seed`: "random" (str hashes differ from process to process), the seed's digits
    ("0": hash randomization off), or None where it cannot be known. `why`: what it was
    read from, in words ("PYTHONHASHSEED was unset when it started")."""

    seed: Optional[str]
    why: str


def initial_environ_value(name: str) -> tuple[bool, Optional[str]]:
    """(readable, value): the value `name` had when this process started, read from
    /proc/self/environ (Linux: the environment as the process was started, which later
    `os.environ` changes leave alone); value None where it was unset, and readable False
    where this platform has no such file."""
    try:
        with open("/proc/self/environ", "rb") as handle:
            entries = handle.read().split(b"\0")
    except OSError:
        return False, None
    prefix = name.encode() + b"="
    for entry in entries:
        if entry.startswith(prefix):
            return True, entry[len(prefix) :].decode(errors="replace")
    return True, None


def hash_seed_at_start() -> HashSeedAtStart:
    """This interpreter's str hash seed, as CPython chose it at start (Python/initconfig.c:
    PYTHONHASHSEED unset, empty or "random" gives a random seed; -E and -I ignore it;
    `sys.flags.hash_randomization` is 0 only for PYTHONHASHSEED=0)."""
    if not sys.flags.hash_randomization:
        return HashSeedAtStart("0", "PYTHONHASHSEED=0 when it started")
    if sys.flags.ignore_environment:
        return HashSeedAtStart(RANDOM, "Python started with -E or -I, which ignore PYTHONHASHSEED")
    readable, value = initial_environ_value("PYTHONHASHSEED")
    if not readable:
        return HashSeedAtStart(None, "its starting environment cannot be read on this platform")
    if value is None:
        return HashSeedAtStart(RANDOM, "PYTHONHASHSEED was unset when it started")
    if value == "":
        return HashSeedAtStart(RANDOM, "PYTHONHASHSEED was empty when it started")
    if value == RANDOM:
        return HashSeedAtStart(RANDOM, "PYTHONHASHSEED=random when it started")
    return HashSeedAtStart(value, f"PYTHONHASHSEED={value} when it started")


def kernel_words(at_start: HashSeedAtStart) -> str:
    """'this kernel's str hashes stay random (PYTHONHASHSEED was unset when it started)'."""
    if at_start.seed is None:
        return f"this kernel's str hashes were fixed when it started ({at_start.why})"
    if at_start.seed == RANDOM:
        return f"this kernel's str hashes stay random ({at_start.why})"
    if at_start.seed == "0":
        return f"this kernel's str hashes are not randomized ({at_start.why})"
    return f"this kernel's str hashes stay seeded with {at_start.seed} ({at_start.why})"
