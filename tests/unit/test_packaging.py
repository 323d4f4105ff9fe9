"""Installing colab_gpu_guard must never install, upgrade or reinstall torch."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, requires

import pytest
from packaging.requirements import Requirement


def _requirements() -> list:
    try:
        return requires("colab_gpu_guard") or []
    except PackageNotFoundError:  # run from a checkout on PYTHONPATH, not installed
        pytest.skip("colab_gpu_guard is not installed here: no metadata to read")


def test_torch_and_numpy_are_only_optional_extras():
    requirements = [Requirement(text) for text in _requirements()]
    always = {r.name.lower() for r in requirements if r.marker is None}
    assert always == {"ipython", "ipywidgets", "nvidia-ml-py", "psutil"}
    torch_reqs = [r for r in requirements if r.name.lower() == "torch"]
    assert torch_reqs and all("extra" in str(r.marker) for r in torch_reqs)
    # no version bound: whatever torch the user has satisfies the extra
    assert all(not r.specifier for r in torch_reqs)


def test_the_deprecated_pynvml_package_is_not_a_dependency():
    names = {Requirement(text).name.lower() for text in _requirements()}
    assert "pynvml" not in names and "nvidia-ml-py" in names
