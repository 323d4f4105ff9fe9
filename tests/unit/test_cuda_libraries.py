"""Which cuBLAS or cuDNN this process loaded and whether it is torch's own: read from the
real /proc/self/maps and the real importlib.metadata machinery (a torch wheel's
`nvidia-*==` pins and the installed packages, as dist-info directories on sys.path)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from colab_gpu_guard import advisor, nvml
from colab_gpu_guard.advisor import cuda_libraries
from tests import fake_pynvml
from tests.advisor_corpus import CORPUS, make

MAPS = "/proc/self/maps"


@pytest.mark.skipif(not os.path.exists(MAPS), reason="needs /proc/self/maps (Linux)")
def test_the_loaded_files_are_the_ones_this_process_mapped():
    torch = pytest.importorskip("torch")
    found = cuda_libraries.loaded_files("libtorch_cpu")
    assert found and all(Path(path).is_file() for path in found)
    assert Path(found[0]).resolve().parent == (Path(torch.__file__).parent / "lib").resolve()
    assert cuda_libraries.loaded_files("libno_such_library.so") == ()
    assert cuda_libraries.loaded_files("libtorch_cpu", maps="/no/such/maps") == ()


def dist_info(site: Path, name: str, version: str, requires: tuple[str, ...] = ()) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {requirement}" for requirement in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


@pytest.fixture
def pip_site(tmp_path, monkeypatch):
    """A site directory first on sys.path with a torch wheel that pins its cuBLAS and
    cuDNN, and the nvidia packages installed beside it (a cuBLAS older than torch's)."""
    site = tmp_path / "site-packages"
    dist_info(
        site,
        "torch",
        "2.4.0",
        (
            'nvidia-cublas-cu12==12.4.5.8; platform_system == "Linux"',
            'nvidia-cudnn-cu12==9.1.0.70; platform_system == "Linux"',
            "filelock",
            'optree>=0.11.0; extra == "optree"',
        ),
    )
    dist_info(site, "nvidia-cublas-cu12", "12.1.3.1")
    dist_info(site, "nvidia-cudnn-cu12", "9.1.0.70")
    monkeypatch.syspath_prepend(str(site))
    return site


def maps_file(tmp_path: Path, *paths: str) -> str:
    lines = [
        f"7f{n:010x}000-7f{n:010x}fff r-xp 00000000 08:01 {1000 + n}    {path}\n"
        for n, path in enumerate(paths)
    ]
    lines.append("7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]\n")
    target = tmp_path / "maps"
    target.write_text("".join(lines))
    return str(target)


def test_a_pip_cublas_older_than_torch_pins_is_named(pip_site, tmp_path):
    own = pip_site / "nvidia" / "cublas" / "lib" / "libcublas.so.12"
    found = cuda_libraries.check("cuBLAS", maps=maps_file(tmp_path, str(own)))
    assert found.mismatched == (
        cuda_libraries.Mismatch("nvidia-cublas-cu12", "12.1.3.1", "12.4.5.8"),
    )
    assert found.loaded == (str(own),) and found.outside == ()
    assert cuda_libraries.torch_pins() == {
        "nvidia-cublas-cu12": "12.4.5.8",
        "nvidia-cudnn-cu12": "9.1.0.70",
    }
    cudnn = cuda_libraries.check("cuDNN", maps=maps_file(tmp_path))
    assert cudnn.mismatched == () and ("nvidia-cudnn-cu12", "9.1.0.70") in cudnn.installed
    assert cuda_libraries.first_fix(cudnn) is None


def test_a_cublas_loaded_from_outside_torchs_packages_is_named(pip_site, tmp_path):
    toolkit = "/usr/local/cuda-11.3/lib64/libcublas.so.11"
    own = str(pip_site / "nvidia" / "cublas" / "lib" / "libcublas.so.12")
    found = cuda_libraries.check("cuBLAS", maps=maps_file(tmp_path, toolkit, own))
    assert found.loaded == (toolkit, own) and found.outside == (toolkit,)
    fix = cuda_libraries.first_fix(found._replace(mismatched=()))
    assert fix.startswith(f"Here cuBLAS was loaded from {toolkit}, outside the packages")


def test_a_torch_that_brings_no_cuda_libraries_is_never_said_to_load_a_foreign_one(tmp_path):
    """A conda or CPU torch pins no nvidia package: the library of its environment is its
    own, wherever it lies."""
    pytest.importorskip("torch")
    found = cuda_libraries.check(
        "cuBLAS", maps=maps_file(tmp_path, "/opt/conda/lib/libcublas.so.12")
    )
    assert found.outside == () and cuda_libraries.first_fix(found) is None


def test_the_advice_puts_the_found_copy_first(pip_site, monkeypatch):
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    try:
        item = next(
            i for i in CORPUS if i["kind"] == advisor.LIBRARY_SETUP and "CUBLAS" in i["message"]
        )
        diagnosis = advisor.advise(make(item))
    finally:
        nvml.set_pynvml(None)
    assert diagnosis.facts["cuBLAS from pip"] == (
        "nvidia-cublas-cu12 12.1.3.1 (this torch was built with 12.4.5.8)"
    )
    assert diagnosis.fixes[0] == (
        "Here pip installed nvidia-cublas-cu12 12.1.3.1, but this torch was built with "
        "12.4.5.8: `pip install nvidia-cublas-cu12==12.4.5.8` puts torch's own back (then "
        "restart the runtime)."
    )
    assert len(diagnosis.fixes) == 3


@pytest.mark.parametrize(
    ("installed", "pinned", "breaks"),
    [
        ("12.1.3.1", "12.4.5.8", True),  # older than torch was built with
        ("8.9.2.26", "9.1.0.70", True),  # another major version
        ("13.0.0.19", "12.4.5.8", True),
        ("12.6.4.1", "12.4.5.8", False),  # newer, same major: what JAX or TF bring
        ("12.4.5.8.post1", "12.4.5.8", False),
        ("dev", "12.4.5.8", False),  # unreadable: no verdict
    ],
)
def test_only_an_older_or_other_major_version_is_called_the_cause(installed, pinned, breaks):
    mismatch = cuda_libraries.Mismatch("nvidia-cublas-cu12", installed, pinned)
    assert mismatch.breaks() is breaks
    found = cuda_libraries.LibraryCheck(
        "cuBLAS", (), (("nvidia-cublas-cu12", installed),), (mismatch,), ()
    )
    assert (cuda_libraries.first_fix(found) is not None) is breaks
    assert cuda_libraries.facts(found)["cuBLAS from pip"] == (
        f"nvidia-cublas-cu12 {installed} (this torch was built with {pinned})"
    )


def test_a_cudnn_memory_error_says_the_copy_only_where_it_is_not_torchs(pip_site):
    """`CUDNN_STATUS_NOT_INITIALIZED` is most often a full GPU: its answer stays short where
    the cuDNN is torch's own, and leads with the copy where pip's is older than torch's."""
    item = next(i for i in CORPUS if "CUDNN_STATUS_NOT_INITIALIZED" in i["message"])
    nvml.set_pynvml(fake_pynvml.install(fake_pynvml.no_library()))
    try:
        own = advisor.advise(make(item))
        dist_info(pip_site / "older", "nvidia-cudnn-cu12", "9.0.0.312")
        with pytest.MonkeyPatch.context() as patch:
            patch.syspath_prepend(str(pip_site / "older"))
            older = advisor.advise(make(item))
    finally:
        nvml.set_pynvml(None)
    assert "cuDNN from pip" not in own.facts and own.fixes[0].startswith("Run `%gpu_reset`")
    assert older.facts["cuDNN from pip"] == (
        "nvidia-cudnn-cu12 9.0.0.312 (this torch was built with 9.1.0.70)"
    )
    assert older.fixes[0].startswith("Here pip installed nvidia-cudnn-cu12 9.0.0.312, but")
    assert len(older.fixes) <= 4
