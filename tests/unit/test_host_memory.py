"""The host's RAM and this process's resident size as `gpu_status` reads them
(`host_memory.host_ram`), checked against psutil's own readings."""

from __future__ import annotations

import os
import signal
import sys
import threading
import types

import pytest

from colab_gpu_guard import host_memory

MiB = 1 << 20
linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def _psutil():
    psutil = pytest.importorskip("psutil")
    memory = psutil.virtual_memory()
    return memory.total, memory.available, psutil.Process().memory_info().rss


@linux
def test_host_ram_reads_what_psutil_reads():
    before = _psutil()
    ram = host_memory.host_ram()
    after = _psutil()
    assert ram.total == before[0] == after[0]
    # the host's available memory moves with every other process: within what it moved
    # between psutil's two readings, and 256 MiB of slack
    low, high = sorted((before[1], after[1]))
    assert low - 256 * MiB <= ram.available <= high + 256 * MiB
    low, high = sorted((before[2], after[2]))
    assert low - 16 * MiB <= ram.process_rss <= high + 16 * MiB


@linux
def test_host_ram_sees_this_process_grow():
    before = host_memory.host_ram().process_rss
    block = bytearray(96 * MiB)
    block[::4096] = b"x" * len(block[::4096])  # every page touched: resident
    grown = host_memory.host_ram().process_rss
    del block
    assert grown - before >= 64 * MiB


@linux
def test_host_ram_read_from_two_threads_at_once_stays_whole():
    total = _psutil()[0]
    seen: list[int] = []

    def read() -> None:
        for _ in range(2000):
            ram = host_memory.host_ram()
            seen.append(ram.total if ram.available > 0 and ram.process_rss > 0 else -1)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 6000 and set(seen) == {total}


def test_without_proc_the_figures_are_psutils(monkeypatch):
    psutil = pytest.importorskip("psutil")
    memory = types.SimpleNamespace(total=16 << 30, available=10 << 30)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: memory)
    monkeypatch.setattr(
        psutil.Process, "memory_info", lambda self: types.SimpleNamespace(rss=600 * MiB)
    )
    monkeypatch.setattr(host_memory, "_meminfo", types.SimpleNamespace(read=lambda: None))
    assert host_memory.host_ram() == host_memory.HostRam(16 << 30, 10 << 30, 600 * MiB)


@pytest.mark.parametrize(
    "text",
    [
        b"MemTotal:       24684092 kB\nMemFree:        21199784 kB\nBuffers: 1 kB\n",  # < 3.14
        b"MemTotal:       24684092 kB\nMemFree:        21199784 kB\nMemAvailable:  0 kB\n",
        b"garbage",
    ],
)
@linux
def test_meminfo_without_memavailable_leaves_it_to_psutil(text, monkeypatch):
    reader = host_memory._MemInfo()
    monkeypatch.setattr(reader, "_pread", lambda fd: text)
    assert reader.read() is None


def test_without_psutil_host_ram_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)
    with pytest.raises(ImportError):
        host_memory.host_ram()


@linux
@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_forked_child_reads_its_own_figures_even_forked_mid_read():
    """A child forked while another thread held the reader's lock reads its own resident
    size (not the parent's, through descriptors the parent opened) and does not wait."""
    host_memory.host_ram()
    reader = host_memory._meminfo
    assert reader is not None
    with reader._lock:  # as if the panel's live thread were reading at the fork
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when its figure is its own
            code = 1
            try:
                signal.alarm(10)  # a deadlock ends the child instead of the test
                page = os.sysconf("SC_PAGE_SIZE")
                block = bytearray(b"1") * (48 * MiB)  # the child alone grows by this
                with open("/proc/self/statm", "rb") as statm:
                    own = int(statm.read().split()[1]) * page
                rss = host_memory.host_ram().process_rss
                code = 0 if abs(rss - own) <= 4 * MiB and len(block) else 2
            finally:
                os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
