"""Which cuBLAS or cuDNN this process loaded, and whether it is torch's own: the files the
process has mapped (/proc/self/maps, Linux), and the versions pip installed beside the ones
torch's wheel asks for (its `nvidia-*==` requirements). A library of another version, or
one loaded from outside the packages torch brings, is what the advice for cuBLAS's and
cuDNN's setup failures names. No CUDA call, no import of torch."""

from __future__ import annotations

import os
import re
from importlib import metadata
from typing import TYPE_CHECKING, NamedTuple, Optional

from .kinds import LIBRARY_SETUP

if TYPE_CHECKING:
    from .diagnosis import Diagnosis

# what each library is called: its file's stem, and the pip packages that carry it
LIBRARIES = {
    "cuBLAS": ("libcublas.so", "nvidia-cublas"),
    "cuDNN": ("libcudnn.so", "nvidia-cudnn"),
}
_PIN = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*(?P<version>[\w.+!-]+)")


class Mismatch(NamedTuple):
    """A pip package of the library whose installed version is not the one torch pins."""

    package: str
    installed: str
    pinned: str

    def breaks(self) -> bool:
        """Whether the installed version can be the cause: older than torch was built with,
        or of another major version. A newer one of the same major is what other packages
        (JAX, TensorFlow) often bring, and these libraries run code built for an older one
        of their major version; unreadable versions: False."""
        installed, pinned = _numbers(self.installed), _numbers(self.pinned)
        if not installed or not pinned:
            return False
        return installed[0] != pinned[0] or installed < pinned


def _numbers(version: str) -> tuple[int, ...]:
    """'12.4.5.8' -> (12, 4, 5, 8); () where it does not start with a number."""
    parts = []
    for part in version.split("."):
        digits = re.match(r"\d+", part)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


class LibraryCheck(NamedTuple):
    """What this process shows of one library (`LIBRARIES`' key): the files it loaded,
    the pip packages that carry it with their versions, those torch's wheel pins
    (`mismatched` where the installed version differs), and, where torch's wheel brings its
    own copy, the loaded files outside torch's and the `nvidia` packages' directories
    (`outside`)."""

    library: str
    loaded: tuple[str, ...]
    installed: tuple[tuple[str, str], ...]
    mismatched: tuple[Mismatch, ...]
    outside: tuple[str, ...]


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def loaded_files(stem: str, maps: str = "/proc/self/maps") -> tuple[str, ...]:
    """The files this process has mapped whose name starts with `stem` ("libcublas.so"),
    in the order first mapped; () where /proc/self/maps cannot be read (not Linux)."""
    try:
        with open(maps, encoding="utf-8", errors="replace") as lines:
            paths = [line.split(None, 5)[-1].strip() for line in lines if stem in line]
    except OSError:
        return ()
    return tuple(dict.fromkeys(path for path in paths if os.path.basename(path).startswith(stem)))


def torch_pins(distribution: str = "torch") -> dict[str, str]:
    """The exact versions a wheel's requirements pin (`nvidia-cublas-cu12==12.4.5.8`), by
    normalised package name; {} where it is not installed or pins none (a CPU build)."""
    try:
        requirements = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return {}
    pins = {}
    for requirement in requirements:
        match = _PIN.match(requirement)
        if match and "extra ==" not in requirement:
            pins[_normal(match.group("name"))] = match.group("version")
    return pins


def _installed(names: list[str]) -> dict[str, tuple[str, str]]:
    """Those of `names` installed: normalised name -> (version, the directory they are
    installed in, site-packages). Looked up by name: a scan of every distribution costs a
    read of each one's metadata (hundreds on Colab)."""
    found: dict[str, tuple[str, str]] = {}
    for name in names:
        try:
            distribution = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = (distribution.version, str(distribution.locate_file("")))
    return found


def check(library: str, maps: str = "/proc/self/maps") -> LibraryCheck:
    """What this process shows of `library` ("cuBLAS", "cuDNN"). Never raises: a part that
    cannot be read leaves its fields empty."""
    stem, prefix = LIBRARIES[library]
    loaded = loaded_files(stem, maps)
    try:
        pins = torch_pins()
        # the packages torch pins, and the other CUDA majors' (one left from another install)
        names = [name for name in pins if name.startswith(prefix)]
        names += [f"{prefix}-cu{major}" for major in (11, 12, 13)]
        installed = _installed(list(dict.fromkeys(names)))
        torch_dir = _installed(["torch"]).get("torch", (None, ""))[1]
    except Exception:  # a distribution's broken metadata: nothing to compare
        installed, pins, torch_dir = {}, {}, ""
    mismatched = tuple(
        Mismatch(name, version, pins[name])
        for name, (version, _where) in installed.items()
        if name in pins and pins[name] != version
    )
    # only a wheel that brings its own copy (it pins the package) says where it must come
    # from: a conda or system torch uses the library of its environment
    brings_its_own = any(name.startswith(prefix) for name in pins)
    homes = [os.path.join(where, "nvidia") for _v, where in installed.values()]
    homes += [os.path.join(torch_dir, "torch")] if torch_dir else []
    outside = tuple(
        path
        for path in loaded
        if brings_its_own and not any(path.startswith(home + os.sep) for home in homes)
    )
    versions = tuple((name, version) for name, (version, _where) in installed.items())
    return LibraryCheck(library, loaded, versions, mismatched, outside)


def facts(found: LibraryCheck) -> dict[str, str]:
    """The check as an advice's facts: what was loaded, what pip installed."""
    shown: dict[str, str] = {}
    if found.loaded:
        shown[f"{found.library} loaded"] = ", ".join(found.loaded)
    pinned = {mismatch.package: mismatch.pinned for mismatch in found.mismatched}
    if found.installed:
        shown[f"{found.library} from pip"] = ", ".join(
            f"{name} {version}"
            + (f" (this torch was built with {pinned[name]})" if name in pinned else "")
            for name, version in found.installed
        )
    return shown


def first_fix(found: LibraryCheck) -> Optional[str]:
    """Where the check shows a library other than torch's own: what it shows and how to
    put torch's own back; None where it shows none (or could not tell)."""
    breaking = [mismatch for mismatch in found.mismatched if mismatch.breaks()]
    if breaking:
        first = breaking[0]
        return (
            f"Here pip installed {first.package} {first.installed}, but this torch was built "
            f"with {first.pinned}: `pip install {first.package}=={first.pinned}` puts torch's "
            "own back (then restart the runtime)."
        )
    if found.outside:
        return (
            f"Here {found.library} was loaded from {found.outside[0]}, outside the packages "
            "torch brings (a copy found first: `LD_LIBRARY_PATH`, a CUDA toolkit, conda): take "
            "its directory off `LD_LIBRARY_PATH`, then restart the runtime."
        )
    return None


def enrich_library(diagnosis: Diagnosis, namespace: Optional[dict]) -> None:
    """A cuBLAS or cuDNN failure that a copy other than torch's own can cause: which copy
    this process loaded and what pip installed, as facts, and where that shows another copy,
    the fix for it first; for a memory error, only where it shows one."""
    library = diagnosis.details.get("library")  # named where the message was recognised
    if library not in LIBRARIES or diagnosis.details.get("framework") not in (None, "torch"):
        return
    found = check(library)
    fix = first_fix(found)
    if fix is None and diagnosis.kind != LIBRARY_SETUP:
        return  # a memory error's answer stays short where the copy is torch's own
    diagnosis.facts.update(facts(found))
    if fix is not None:
        diagnosis.fixes.insert(0, fix)
