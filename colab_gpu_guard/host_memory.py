"""This process's and the host's memory, read cheaply: one reader for each figure
(`RssReader`, `MallocInUse`, `host_ram`), and which of its addresses are files on disk
mapped into memory (`file_mappings`).
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
import stat
import sys
import threading
import weakref
from typing import Any, Callable, NamedTuple, Optional


class RssReader:
    """Resident set size from /proc/self/statm with one pread on a kept-open descriptor
    (Linux only), read by the tracker after every cell.

    /proc/self is resolved when the file is opened: a forked child reopens it (through
    `os.register_at_fork`, so the per-cell read makes no getpid call)."""

    def __init__(self) -> None:
        self._fd: Optional[int] = None
        self._page = 4096
        self._pread: Optional[Callable[[int], bytes]] = None  # made on the first read
        self._open()
        _READERS.add(self)

    def _open(self) -> None:
        if sys.platform.startswith("linux") and hasattr(os, "pread"):
            try:
                self._page = os.sysconf("SC_PAGE_SIZE")
                self._fd = os.open("/proc/self/statm", os.O_RDONLY)
            except (OSError, ValueError):
                self._fd = None

    def read(self) -> Optional[int]:
        fd = self._fd
        if fd is None:
            return None
        pread = self._pread
        if pread is None:
            pread = self._pread = _pread_keeping_the_gil()
        try:
            return int(pread(fd).split(None, 2)[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


_READERS: weakref.WeakSet = weakref.WeakSet()


def _os_pread(fd: int) -> bytes:
    return os.pread(fd, 128, 0)


def _pread_keeping_the_gil() -> Callable[[int], bytes]:
    """A reader of a /proc file's first 128 bytes that keeps the GIL for its system call
    (libc's pread through ctypes' PyDLL), else ``os.pread``. ``os.pread`` releases the
    GIL, and after a stored cell IPython's history thread, woken by the cell, takes it:
    getting it back cost ~10 us after each cell, ten times the read. A read of /proc never
    blocks. One buffer per reader: a reader is read from one thread (the tracker's, in the
    cell's) or under a lock (`_MemInfo`)."""
    try:
        import ctypes

        function = ctypes.PyDLL(None).pread
        function.restype = ctypes.c_ssize_t
        buffer = ctypes.create_string_buffer(128)
        # the arguments but the descriptor made once, as C types (no conversion per call)
        address = ctypes.c_void_p(ctypes.addressof(buffer))
        size, offset = ctypes.c_size_t(128), ctypes.c_long(0)
    except (ImportError, OSError, AttributeError):  # no ctypes, no libc pread
        return _os_pread

    def read(fd: int) -> bytes:
        count = function(fd, address, size, offset)
        if count < 0:
            raise OSError("pread of a /proc file failed")
        return buffer.raw[:count]

    return read


def _reopen_in_child() -> None:
    """In a forked child: each reader's descriptor still reads the parent's /proc/self,
    and `host_ram`'s lock may have been held by a thread the child does not have."""
    global _meminfo
    for reader in list(_READERS):
        if reader._fd is not None:
            with contextlib.suppress(OSError):
                os.close(reader._fd)
            reader._fd = None
            reader._open()
    if _meminfo is not None:
        _meminfo.close()
        _meminfo = None  # a new one on the child's first read


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reopen_in_child)


class MallocInUse:
    """Bytes in use by malloc (glibc ``mallinfo2``: ``uordblks + hblkhd``), or None.

    Exact where RSS is not (a freed block in the middle of the heap stays resident), but it
    walks the allocator's free lists, so it can take milliseconds on a fragmented heap: the
    tracker times its reads and takes them only where that is cheap or a rerun needs it
    (``cell_reruns``). pymalloc's small objects live in arenas outside malloc and are not
    counted.
    """

    def __init__(self) -> None:
        self._function: Any = None
        self._tried = False

    def read(self) -> Optional[int]:
        if not self._tried:
            self._tried = True
            self._function = _load_mallinfo2()
        if self._function is None:
            return None
        try:
            info = self._function()
            return int(info.uordblks) + int(info.hblkhd)
        except Exception:  # glibc's mallinfo2 through ctypes
            return None


def _load_mallinfo2():
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        class MallInfo2(ctypes.Structure):
            _fields_ = [
                (name, ctypes.c_size_t)
                for name in (
                    "arena",
                    "ordblks",
                    "smblks",
                    "hblks",
                    "hblkhd",
                    "usmblks",
                    "fsmblks",
                    "uordblks",
                    "fordblks",
                    "keepcost",
                )
            ]

        # glibc >= 2.33; through PyDLL, which keeps the GIL (as `_pread_keeping_the_gil`
        # says why): malloc never waits for Python, so holding it cannot deadlock
        function = ctypes.PyDLL(None).mallinfo2
        function.restype = MallInfo2
        function.argtypes = []
        return function
    except (ImportError, OSError, AttributeError):  # no ctypes, no libc, glibc < 2.33
        return None


class HostRam(NamedTuple):
    total: int
    available: int
    process_rss: int


class _MemInfo:
    """The host's total and available RAM from /proc/meminfo (MemTotal, MemAvailable: the
    figures psutil.virtual_memory gives on Linux) with one pread on a kept-open
    descriptor, keeping the GIL as `RssReader` does: psutil opens and reads three files,
    letting the GIL go each time, and after a cell the kernel's threads take it (read in
    the panel's refresh after a cell: 0.6 ms through psutil, under 0.05 ms so, on a shared
    2-core machine). None where that cannot be read (not Linux, a kernel before
    MemAvailable, or MemAvailable 0: psutil estimates it then)."""

    def __init__(self) -> None:
        self._fd: Optional[int] = None
        self._pread: Optional[Callable[[int], bytes]] = None  # made on the first read
        self._rss: Optional[RssReader] = None
        self._lock = threading.Lock()  # one buffer: the panel's live thread reads too
        if sys.platform.startswith("linux") and hasattr(os, "pread"):
            with contextlib.suppress(OSError):
                self._fd = os.open("/proc/meminfo", os.O_RDONLY)
                self._rss = RssReader()

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        if self._rss is not None:
            self._rss.close()

    def read(self) -> Optional[HostRam]:
        if self._fd is None or self._rss is None:
            return None
        with self._lock:
            if self._pread is None:
                self._pread = _pread_keeping_the_gil()
            try:
                text = self._pread(self._fd)
            except OSError:
                return None
            rss = self._rss.read()
        # MemTotal comes first and MemAvailable third (Linux >= 3.14): both in 128 bytes
        fields = dict(line.split(b":", 1) for line in text.split(b"\n")[:3] if b":" in line)
        try:
            total = int(fields[b"MemTotal"].split()[0]) * 1024
            available = int(fields[b"MemAvailable"].split()[0]) * 1024
        except (KeyError, ValueError, IndexError):
            return None
        if not available or rss is None:
            return None
        return HostRam(total=total, available=available, process_rss=rss)


_meminfo: Optional[_MemInfo] = None


def host_ram() -> HostRam:
    """The host's total and available RAM and this process's resident set size, read by
    `gpu_status`: from /proc through kept-open descriptors (`_MemInfo`), else from psutil.
    Raises when psutil is missing (its figures are the reference, and where /proc cannot
    be read the only source) or cannot read them (the caller says why the figures are
    missing)."""
    global _meminfo
    import psutil

    if _meminfo is None:
        _meminfo = _MemInfo()
    ram = _meminfo.read()
    if ram is not None:
        return ram
    memory = psutil.virtual_memory()
    rss = psutil.Process().memory_info().rss
    return HostRam(total=int(memory.total), available=int(memory.available), process_rss=rss)


# Where the kernel says what this process maps and where each file system is mounted.
MAPS = "/proc/self/maps"
SMAPS = "/proc/self/smaps"
_SMAPS_HEADER = re.compile(r"([0-9a-f]+)-[0-9a-f]+ ")  # a mapping's line; its fields follow
MOUNTS = "/proc/self/mountinfo"
# file systems whose files are kept in memory: a mapping of one of their files is RAM
_MEMORY_FILESYSTEMS = frozenset({"tmpfs", "ramfs", "hugetlbfs", "devtmpfs"})
# names in the maps that are no file on disk: devices (the GPU driver's, /dev/shm's shared
# memory), memfd's and System V's shared memory; any other name must be a regular file that
# is still there (`_on_disk`: "/anon_hugepage (deleted)" is anonymous huge pages, a file
# deleted while mapped is counted as RAM: where it was cannot be read any more)
_NOT_FILES = ("/dev/", "/memfd:", "/SYSV", "/proc/", "/sys/")
_DELETED = " (deleted)"


class FileMappings:
    """This process's mappings of data files on disk, by address: a NumPy memmap, an
    Arrow memory map (a Hugging Face dataset), a ``torch.load(..., mmap=True)``. The system
    reads such a file into RAM as it is used and can drop those pages again, so an array
    there holds no memory of the process's own. Code (a file mapped executable anywhere: a
    library) and files of a file system kept in memory (tmpfs: /dev/shm, often /tmp) are
    left out: those are RAM."""

    def __init__(self, spans: list[tuple[int, int, str]]) -> None:
        self._spans = sorted(spans)
        self._starts = [start for start, _end, _path in self._spans]

    def file_at(self, address: int) -> Optional[str]:
        """The file mapped at `address`, or None."""
        at = bisect.bisect_right(self._starts, address) - 1
        if at < 0:
            return None
        _start, end, path = self._spans[at]
        return path if address < end else None


def file_mappings() -> Optional[FileMappings]:
    """The data files on disk this process maps (`FileMappings`), read from /proc (Linux);
    None where it cannot be read."""
    try:
        with open(MAPS, encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return None
    spans = []
    code = set()
    copied = set()  # the starts of private writable mappings (`_written`)
    for line in lines:
        fields = line.split(None, 5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue  # anonymous memory, the heap, the stack
        path = fields[5]
        perms = fields[1]
        if "x" in perms:
            code.add(path)
        if path.startswith(_NOT_FILES) or path.endswith(_DELETED):
            continue
        start, _, end = fields[0].partition("-")
        try:
            spans.append((int(start, 16), int(end, 16), path))
        except ValueError:
            continue
        if perms[1:2] == "w" and perms[3:4] == "p":
            copied.add(spans[-1][0])
    spans = [span for span in spans if span[2] not in code]
    if spans:
        mounts = _mounts()
        paths = {path for _start, _end, path in spans}
        disk = {path for path in paths if _on_disk(path, mounts)}
        spans = [span for span in spans if span[2] in disk]
    copied.intersection_update(span[0] for span in spans)
    if copied:
        written = _written(copied)
        spans = [span for span in spans if span[0] not in written]
    return FileMappings(spans)


def _written(starts: set[int]) -> set[int]:
    """Of the private writable mappings starting at `starts` (``torch.load(mmap=True)``'s),
    those with pages written since: a copy of such a page is the process's own RAM
    ("Anonymous" in /proc/self/smaps), so the mapping is not left out. All of them where
    smaps cannot be read."""
    try:
        with open(SMAPS, encoding="utf-8", errors="replace") as smaps:
            lines = smaps.read().splitlines()
    except OSError:
        return set(starts)
    written = set()
    current: Optional[int] = None
    for line in lines:
        mapping = _SMAPS_HEADER.match(line)
        if mapping is not None:
            current = int(mapping.group(1), 16)
            continue
        if current in starts and line.startswith("Anonymous:"):
            fields = line.split()
            if len(fields) < 2 or fields[1] != "0":
                written.add(current)
    return written


def _mounts() -> list[tuple[str, str]]:
    """(mount point, file system type) of each mount, longest mount point first."""
    try:
        with open(MOUNTS, encoding="utf-8", errors="replace") as mounts:
            lines = mounts.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        mount, _, after = line.partition(" - ")
        fields = mount.split()
        if len(fields) < 5 or not after:
            continue
        point = _unescape(fields[4])
        found.append((point, after.split()[0]))
    found.sort(key=lambda mount: -len(mount[0]))
    return found


def _unescape(text: str) -> str:
    """A mount point as the kernel writes it (``\\040`` for a space), as a path."""
    if "\\" not in text:
        return text
    return re.sub(r"\\([0-7]{3})", lambda code: chr(int(code.group(1), 8)), text)


def _on_disk(path: str, mounts: list[tuple[str, str]]) -> bool:
    """Whether `path` is a regular file on a file system not kept in memory."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
    return regular and _filesystem(path, mounts) not in _MEMORY_FILESYSTEMS


def _filesystem(path: str, mounts: list[tuple[str, str]]) -> Optional[str]:
    """The type of the file system `path` is on: its longest mount point's."""
    for point, kind in mounts:
        if path == point or path.startswith(point.rstrip("/") + "/"):
            return kind
    return None
