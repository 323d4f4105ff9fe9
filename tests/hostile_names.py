"""Names another user on a shared GPU host may give a process, or a notebook a variable:
control characters that would retitle and clear a terminal, forge a table row, or reverse
text; how `units.escape_text` must show each; and a fake NVML world full of them."""

from __future__ import annotations

import os

from tests import fake_pynvml

# What another user on a shared GPU host may name a process, or a notebook a variable.
TITLE_AND_CLEAR = "\x1b]0;pwned\x07\x1b[2J"
FAKE_ROW = "a\nb_fake_row"
HOSTILE = (TITLE_AND_CLEAR, FAKE_ROW, "x\ry", "r\u202etxt.exe", "del\x7f", "csi\x9bm")
ESCAPED = {
    TITLE_AND_CLEAR: r"\x1b]0;pwned\x07\x1b[2J",
    FAKE_ROW: r"a\nb_fake_row",
    "x\ry": r"x\ry",
    "r\u202etxt.exe": r"r\u202etxt.exe",
    "del\x7f": r"del\x7f",
    "csi\x9bm": r"csi\x9bm",
}
READABLE = ("модель", "重み")  # ordinary non-ASCII names stay as they are


def hostile_world() -> fake_pynvml.FakeWorld:
    world = fake_pynvml.one_gpu()
    gpu = world.gpus[0]
    gpu.name = "Tesla T4" + TITLE_AND_CLEAR
    gpu.processes = [
        fake_pynvml.FakeProcess(pid=1000 + n, used=(n + 1) * fake_pynvml.MiB, name=name)
        for n, name in enumerate(HOSTILE + READABLE)
    ] + [fake_pynvml.FakeProcess(pid=os.getpid(), used=fake_pynvml.MiB, name="python3")]
    return world
