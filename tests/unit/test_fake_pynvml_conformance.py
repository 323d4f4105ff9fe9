"""The fake pynvml cannot drift from the real one, and our code calls nothing it lacks.

- every NVML name the fake defines exists in the real nvidia-ml-py, functions with a
  compatible signature, constants with the same value, errors with the same code, structures
  with the same fields;
- every NVML name the package uses (``pynvml.X`` attributes and ``"nvmlX"`` strings, found
  by parsing every source file) exists in the fake and in the real module; only
  ``colab_gpu_guard/nvml/`` uses any, and only its ``lib.py`` imports ``pynvml``.
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from pathlib import Path

import pytest

from tests import fake_pynvml

real = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed")

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "colab_gpu_guard"
NVML_PACKAGE = PACKAGE / "nvml"


def package_source() -> str:
    return "\n".join(path.read_text() for path in sorted(PACKAGE.rglob("*.py")))


NVML_NAME = re.compile(r"^(nvml[A-Z]\w*|NVML\w*|c_nvml\w*)$")


def fake_module():
    return fake_pynvml.install(fake_pynvml.one_gpu())


@functools.cache  # the package's source is read whole by several tests
def nvml_names_used(source: str) -> frozenset[str]:
    """NVML names a source uses: attributes of a name `pynvml`/`module` (the module object
    in nvml.py) and string constants that look like NVML names (calls made by name); each
    node is judged alone, so a source's names are its parts' names together."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in ("pynvml", "module")
        ):
            names.add(node.attr)
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "module"
            and NVML_NAME.match(node.attr)
        ):
            names.add(node.attr)  # query.module.NVML_X / state.module.nvmlShutdown
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and NVML_NAME.match(node.value)
        ):
            names.add(node.value)
    return frozenset(name for name in names if NVML_NAME.match(name))


# ---------------------------------------------------------------- fake -> real


def test_fake_defines_a_real_api_surface():
    names = fake_pynvml.api_names()
    assert len([n for n in names if n.startswith("nvml") and callable(getattr(fake_pynvml, n))])
    assert "nvmlInit" in names and "NVMLError_NotSupported" in names


@pytest.mark.parametrize("name", fake_pynvml.api_names())
def test_every_fake_name_exists_in_real_pynvml(name):
    assert hasattr(real, name), f"fake_pynvml defines {name}, which nvidia-ml-py lacks"


def _functions():
    return [
        n
        for n in fake_pynvml.api_names()
        if n.startswith("nvml") and inspect.isfunction(getattr(fake_pynvml, n))
    ]


@pytest.mark.parametrize("name", _functions())
def test_fake_function_signatures_match_real(name):
    fake_sig = inspect.signature(getattr(fake_pynvml, name))
    real_sig = inspect.signature(getattr(real, name))
    fake_params = list(fake_sig.parameters.values())
    real_params = list(real_sig.parameters.values())
    assert [(p.name, p.kind) for p in fake_params] == [(p.name, p.kind) for p in real_params], (
        f"{name}{fake_sig} (fake) != {name}{real_sig} (nvidia-ml-py)"
    )
    for fake_param, real_param in zip(fake_params, real_params):
        assert (fake_param.default is inspect.Parameter.empty) == (
            real_param.default is inspect.Parameter.empty
        ), f"{name}: default of {fake_param.name} differs"
        if fake_param.default is not inspect.Parameter.empty:
            assert fake_param.default == real_param.default, f"{name}: {fake_param.name}"


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in fake_pynvml.api_names()
        if isinstance(getattr(fake_pynvml, n), int)
        and not isinstance(getattr(fake_pynvml, n), bool)
    ],
)
def test_fake_constants_equal_real(name):
    assert getattr(fake_pynvml, name) == getattr(real, name)


@pytest.mark.parametrize("name", [n for n in fake_pynvml.api_names() if n.startswith("NVMLError_")])
def test_fake_error_classes_carry_the_real_codes(name):
    fake_error, real_error = getattr(fake_pynvml, name)(), getattr(real, name)()
    assert fake_error.value == real_error.value
    assert isinstance(fake_error, fake_pynvml.NVMLError)
    # NVMLError(code) picks the subclass, as in the real module
    assert type(fake_pynvml.NVMLError(fake_error.value)).__name__ == name
    assert type(real.NVMLError(real_error.value)).__name__ == name


@pytest.mark.parametrize(
    "name",
    [
        n
        for n in fake_pynvml.api_names()
        if isinstance(getattr(fake_pynvml, n), type) and hasattr(getattr(fake_pynvml, n), "FIELDS")
    ],
)
def test_fake_structures_have_the_real_fields(name):
    real_fields = tuple(field[0] for field in getattr(real, name)._fields_)
    fake_fields = getattr(fake_pynvml, name).FIELDS
    assert fake_fields == real_fields


def test_fake_process_objects_have_the_real_process_fields():
    world = fake_pynvml.one_gpu()
    module = fake_pynvml.install(world)
    module.nvmlInit()
    entries = module.nvmlDeviceGetComputeRunningProcesses_v3(module.nvmlDeviceGetHandleByIndex(0))
    real_fields = {field[0] for field in real.c_nvmlProcessInfo_v3_t._fields_}
    assert entries and all(set(vars(entry)) == real_fields for entry in entries)


def test_fake_unversioned_process_calls_wrap_v3_like_real():
    # In nvidia-ml-py the unversioned calls are the _v3 ones behind @throwOnVersionMismatch.
    for kind in ("Compute", "Graphics"):
        real_fn = getattr(real, f"nvmlDeviceGet{kind}RunningProcesses")
        assert f"nvmlDeviceGet{kind}RunningProcesses_v3" in inspect.getsource(real_fn)


# ---------------------------------------------------------------- our code -> fake


def test_every_nvml_name_our_code_uses_is_in_the_fake_and_the_real_module():
    used = nvml_names_used(package_source())
    # non-vacuous: the scan sees the calls that matter
    for expected in (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetGraphicsRunningProcesses_v2",
        "nvmlSystemGetCudaDriverVersion",
        "NVML_TEMPERATURE_GPU",
        "NVML_DEVICE_MIG_ENABLE",
        "nvmlMemory_v2",
        "NVMLError_GpuIsLost",
    ):
        assert expected in used, f"scan missed {expected}"
    module = fake_module()
    missing_in_fake = sorted(name for name in used if not hasattr(module, name))
    missing_in_real = sorted(name for name in used if not hasattr(real, name))
    assert not missing_in_fake, f"the package uses NVML names the fake lacks: {missing_in_fake}"
    assert not missing_in_real, f"the package uses names nvidia-ml-py lacks: {missing_in_real}"


def test_the_scan_catches_a_new_unfaked_call():
    source = package_source()
    for addition in (
        "\n\ndef _extra(pynvml, handle):\n    return pynvml.nvmlDeviceGetFanSpeed(handle)\n",
        '\n\ndef _extra(query, handle):\n    return query.call("fan", "nvmlDeviceGetFanSpeed")\n',
        "\n\ndef _extra(query):\n    return query.module.NVML_FAN_NORMAL\n",
    ):
        # as the package with the addition appended would be scanned, without parsing the
        # whole package again for each
        used = nvml_names_used(source) | nvml_names_used(addition)
        module = fake_module()
        assert any(not hasattr(module, name) for name in used), addition


def test_other_modules_do_not_touch_pynvml_directly():
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        if path != NVML_PACKAGE / "lib.py":
            assert "import pynvml" not in source, path
        if path.parent != NVML_PACKAGE:
            assert not nvml_names_used(source), path
