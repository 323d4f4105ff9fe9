"""Arrays that are files on disk mapped into memory (a NumPy memmap, an Arrow memory map
such as a Hugging Face dataset's, ``torch.load(..., mmap=True)``), in a real shell: not
counted as memory the notebook holds (the system reads the file in as it is used and can
drop those pages again), named in a note with the file and its size; the same data in RAM
(a file of a file system kept in memory, an anonymous mapping, a plain array) still
counted; `%gpu_reset` says deleting such a variable gives back no memory of the kernel's."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

np = pytest.importorskip("numpy")
torch = pytest.importorskip("torch")

from colab_gpu_guard import host_memory  # noqa: E402
from colab_gpu_guard.leftovers import find_leftovers  # noqa: E402
from colab_gpu_guard.reset import apply as reset  # noqa: E402

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="reads /proc/self/maps (Linux)"
)
ROOT = Path(__file__).resolve().parents[2]
MB4 = 4 * 2**20


@pytest.fixture
def disk(tmp_path):
    """A directory on the checkout's disk (a temporary directory may be a tmpfs: RAM)."""
    place = ROOT / "test-output" / f"mapped-{tmp_path.name}"
    place.mkdir(parents=True, exist_ok=True)
    yield place
    shutil.rmtree(place, ignore_errors=True)


def run(run_cell, source: str) -> None:
    result = run_cell(source)
    assert result.error_in_exec is None, result.error_in_exec


def listed(shell) -> dict:
    found = find_leftovers(shell=shell)
    return {entry.name: entry for entry in found}, found


def test_a_memmap_on_disk_is_noted_with_its_file_not_counted(shell, run_cell, disk):
    path = disk / "weights.bin"
    np.zeros(MB4 // 8).tofile(path)
    run(
        run_cell,
        f"import numpy as np\n"
        f"mm = np.memmap({str(path)!r}, dtype='float64', mode='r')\n"
        "view = mm[:1000]\n"
        f"writable = np.memmap({str(path)!r}, dtype='float64', mode='r+')\n"
        "part = torch.from_numpy(writable[:10])\n"  # 80 bytes at the same memory
        "plain = np.ones(MB4_ITEMS)".replace("MB4_ITEMS", str(MB4 // 8)),
    )
    names, found = listed(shell)
    assert "plain" in names and names["plain"].nbytes == MB4  # RAM: counted
    assert not any(name.startswith(("mm", "view", "writable", "part")) for name in names)
    note = next(note for note in found.notes if "mapped into memory" in note)
    assert f"`mm` (4 MiB of {path})" in note, note
    assert os.path.getsize(path) == shell.user_ns["mm"].nbytes == MB4  # what the note says
    dry = reset.gpu_reset("mm", "view", shell=shell, dry_run=True)
    assert dry.estimated_bytes == 0
    assert any(
        "hold only files on disk mapped into memory" in line and str(path) in line
        for line in dry.notes
    )
    done = reset.gpu_reset("mm", "view", shell=shell)
    assert done.released_bytes == 0 and "mm" not in shell.user_ns  # deleted as asked
    assert any("held only files on disk mapped into memory" in line for line in done.notes)


def test_an_arrow_memory_map_is_noted_and_a_table_in_ram_counted(shell, run_cell, disk):
    pytest.importorskip("pyarrow")
    path = disk / "train.arrow"
    run(
        run_cell,
        "import numpy as np, pyarrow as pa\n"
        "made = pa.table({'x': np.arange(500_000, dtype='float64')})\n"
        f"with pa.OSFile({str(path)!r}, 'wb') as sink:\n"
        "    with pa.ipc.new_file(sink, made.schema) as writer:\n"
        "        writer.write_table(made)\n"
        f"dataset = pa.ipc.open_file(pa.memory_map({str(path)!r})).read_all()",
    )
    names, found = listed(shell)
    assert names["made.columns[0].chunks[0].buffers()[1]"].nbytes == 500_000 * 8
    assert not any(name.startswith("dataset") for name in names)
    note = next(note for note in found.notes if "mapped into memory" in note)
    buffers = shell.user_ns["dataset"].column(0).chunks[0].buffers()
    size = sum(buffer.size for buffer in buffers if buffer is not None)
    assert size == 500_000 * 8
    assert "`dataset` (3.81 MiB of " in note and str(path) in note, note


def test_a_checkpoint_loaded_with_mmap_is_noted_until_written_to(shell, run_cell, disk):
    path = disk / "model.pt"
    torch.save({"weight": torch.ones(MB4 // 4)}, path)
    # what no name reached before (arrays earlier tests left alive, in whatever order)
    deep = find_leftovers(shell=shell, deep=True)
    unnamed = [note for note in deep.notes if "reached by no name" in note]
    run(run_cell, f"state = torch.load({str(path)!r}, mmap=True)\nfresh = torch.ones(1000)")
    names, found = listed(shell)
    assert "fresh" in names and not any(name.startswith("state") for name in names)
    note = next(note for note in found.notes if "mapped into memory" in note)
    assert f"`state` (4 MiB of {path})" in note, note
    assert shell.user_ns["state"]["weight"].untyped_storage().nbytes() == MB4
    deep = find_leftovers(shell=shell, deep=True)  # alive, and reached by `state`
    assert [note for note in deep.notes if "reached by no name" in note] == unnamed, deep.notes
    assert any(f"`state` (4 MiB of {path})" in note for note in deep.notes), deep.notes
    # written to: the pages written are copies in the kernel's own RAM (a private mapping)
    run(run_cell, "state['weight'][:1].add_(1)")
    names, found = listed(shell)
    assert names["state['weight']"].nbytes == MB4
    assert not any("mapped into memory" in note for note in found.notes)


def test_memory_mapped_from_ram_is_counted(shell, run_cell):
    """A file of a file system kept in memory (/dev/shm) and an anonymous mapping are RAM."""
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK):
        pytest.skip("needs a writable /dev/shm")
    path = shm / f"cgg-test-{os.getpid()}.bin"
    np.zeros(MB4 // 8).tofile(path)
    try:
        run(
            run_cell,
            "import mmap, numpy as np\n"
            f"shared = np.memmap({str(path)!r}, dtype='float64', mode='r')\n"
            f"anonymous = np.frombuffer(mmap.mmap(-1, {MB4}), dtype=np.uint8)",
        )
        names, found = listed(shell)
        assert names["shared"].nbytes == MB4 and names["anonymous"].nbytes == MB4
        assert not any("mapped into memory" in note for note in found.notes)
    finally:
        run(run_cell, "del shared, anonymous")
        path.unlink()


def test_a_file_deleted_while_mapped_is_counted(shell, run_cell, disk):
    """Where a mapped file was deleted, the scan cannot tell where it was: counted."""
    path = disk / "gone.bin"
    np.zeros(MB4 // 8).tofile(path)
    run(run_cell, f"import numpy as np\nkept = np.memmap({str(path)!r}, dtype='float64', mode='r')")
    path.unlink()
    names, found = listed(shell)
    assert names["kept"].nbytes == MB4
    assert not any("mapped into memory" in note for note in found.notes)


def test_without_the_process_maps_every_array_is_counted(shell, run_cell, disk, monkeypatch):
    """Where /proc/self/maps cannot be read (not Linux), arrays are counted as before."""
    path = disk / "weights.bin"
    np.zeros(MB4 // 8).tofile(path)
    run(run_cell, f"import numpy as np\nmm = np.memmap({str(path)!r}, dtype='float64', mode='r')")
    monkeypatch.setattr(host_memory, "MAPS", str(disk / "no-such-file"))
    names, found = listed(shell)
    assert names["mm"].nbytes == MB4
    assert not any("mapped into memory" in note for note in found.notes)
