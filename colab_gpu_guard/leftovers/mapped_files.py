"""Arrays whose memory is a file on disk mapped into the process (a NumPy memmap, an Arrow
memory map such as a Hugging Face dataset's, ``torch.load(..., mmap=True)``): left out of
the arrays a scan counts, and noted with the file. The system reads such a file into RAM
as it is used and can drop those pages again: deleting the array gives back no memory of
the process's own (`host_memory.FileMappings`)."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from itertools import compress
from typing import Optional

from .. import host_memory
from ..frameworks.base import ArrayInfo
from ..units import escape_text, format_bytes
from .rows import ROW_FRAMEWORK

# host memory looked up among the mapped files: Arrow buffers (a dataset's, of any size),
# and any other array at least this big (a mapped file's array spans its pages; the many
# small arrays a notebook holds cost no lookup)
MAPPED_AT_LEAST = 64 * 1024
_KEY, _SIZE, _DEVICE = (
    ArrayInfo._fields.index(name) for name in ("storage_key", "storage_nbytes", "device")
)


class MappedFiles:
    """The arrays of one scan left out as files mapped from disk: ``left_out`` holds
    (row, storage key, bytes, file) of each."""

    def __init__(self) -> None:
        self.left_out: list[tuple[tuple, Hashable, int, str]] = []
        self._mappings: Optional[host_memory.FileMappings] = None  # read once a scan
        self._files: dict[Hashable, str] = {}  # storage key -> file, of those left out

    def on_disk(
        self, columns: list[list], rows: list[tuple], kept: Optional[list[bool]], arrow: bool
    ) -> dict[int, str]:
        """The arrays (positions in `columns`, `ArrayInfo`'s fields of the rows `kept`)
        whose memory is a mapped file on disk, with the file; `arrow`: the rows hold Arrow
        buffers."""
        sizes = columns[_SIZE]
        if not sizes:
            return {}
        keys, devices = columns[_KEY], columns[_DEVICE]
        candidates = [
            position
            for position in compress(range(len(sizes)), map(MAPPED_AT_LEAST.__le__, sizes))
            if devices[position] == "cpu" and type(keys[position]) is int
        ]
        if arrow:
            frameworks = map(ROW_FRAMEWORK, rows if kept is None else compress(rows, kept))
            candidates = sorted(
                set(candidates).union(
                    position
                    for position, framework in enumerate(frameworks)
                    if framework == "arrow" and type(keys[position]) is int
                )
            )
        found = {}
        if candidates:
            if self._mappings is None:
                self._mappings = host_memory.file_mappings() or host_memory.FileMappings([])
            file_at = self._mappings.file_at
            for position in candidates:
                path = file_at(keys[position])
                if path is not None:
                    found[position] = self._files[keys[position]] = path
        if self._files:  # smaller arrays at the same memory (`torch.from_numpy(mm[:10])`)
            files = self._files
            for position in compress(range(len(keys)), map(files.__contains__, keys)):
                found.setdefault(position, files[keys[position]])
        return found

    def leave_out(
        self, on_disk: dict[int, str], columns: list[list], rows: list[tuple], kept: Optional[list]
    ) -> tuple[list[list], list[bool]]:
        """`columns` without the arrays `on_disk` (positions -> file), and which of `rows`
        stay; each left out is kept in ``left_out``."""
        at_row = list(range(len(rows)) if kept is None else compress(range(len(rows)), kept))
        keys, sizes = columns[_KEY], columns[_SIZE]
        for position, path in on_disk.items():
            self.left_out.append((rows[at_row[position]], keys[position], sizes[position], path))
        stays = [position not in on_disk for position in range(len(at_row))]
        rows_kept = [False] * len(rows)
        for row in compress(at_row, stays):
            rows_kept[row] = True
        return [list(compress(column, stays)) for column in columns], rows_kept


def files_by(
    left_out: list[tuple[tuple, Hashable, int, str]],
    holder_of: Callable[[tuple], Hashable],
    once: bool = False,
) -> dict[Hashable, dict[str, int]]:
    """Holder -> file -> bytes of the arrays left out (`holder_of`: a row's holder), each
    memory once per holder; `once`: once in all, under the first holder found (named before
    unnamed)."""
    keys_of: dict[Hashable, dict[str, dict[Hashable, int]]] = {}
    seen: set = set()
    for row, key, size, path in left_out:
        if once:
            if key in seen:
                continue
            seen.add(key)
        keys_of.setdefault(holder_of(row), {}).setdefault(path, {})[key] = size
    return {
        holder: {path: sum(keys.values()) for path, keys in files.items()}
        for holder, files in keys_of.items()
    }


def files_text(files: dict[str, int]) -> str:
    """'38.1 MiB of /data/train.arrow, 2 MiB of /data/test.arrow': the biggest three."""
    sizes = sorted(((nbytes, path) for path, nbytes in files.items()), reverse=True)
    shown = ", ".join(
        f"{format_bytes(nbytes)} of {escape_text(path)}" for nbytes, path in sizes[:3]
    )
    return shown + (f", +{len(sizes) - 3} more" if len(sizes) > 3 else "")


def mapped_note(by_holder: dict[Hashable, dict[str, int]]) -> str:
    """The scan's note on the arrays left out as files mapped from disk (`files_by`, by
    the name of the group reaching them), the biggest three holders."""
    held = sorted(by_holder.items(), key=lambda item: -sum(item[1].values()))
    shown = ", ".join(f"`{holder}` ({files_text(files)})" for holder, files in held[:3])
    more = f" (+{len(held) - 3} more)" if len(held) > 3 else ""
    return (
        f"not counted: files on disk mapped into memory, {shown}{more}: the system reads a "
        "mapped file into RAM as it is used and frees that RAM on its own when it needs it"
    )
