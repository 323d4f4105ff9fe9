"""The one door to NVML: the only module that imports ``pynvml`` (nvidia-ml-py).

NVML is initialised once per process, on first use, and shut down at interpreter exit; a
failed initialisation is cached, and each failed call keeps why it failed (`Query`).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional

from ..units import error_text
from .records import MissingField, MissingFields, NvmlSnapshot

# NVML marks "no value" in unsigned fields with all bits set.
_UINT_NOT_AVAILABLE = 0xFFFFFFFF
_ULONGLONG_NOT_AVAILABLE = 0xFFFFFFFFFFFFFFFF

# Why a call failed, by the NVMLError subclass it raised.
_REASONS = {
    "NVMLError_NotSupported": "not supported",
    "NVMLError_NoPermission": "no permission",
    "NVMLError_GpuIsLost": "GPU is lost",
    "NVMLError_FunctionNotFound": "not in this driver",
    "NVMLLibraryMismatchError": "not in this driver",
    "NVMLError_ArgumentVersionMismatch": "this version of the call is not in this driver",
    "NVMLError_Uninitialized": "NVML not initialised",
    "NVMLError_NotFound": "not found",
    "NVMLError_NoData": "no data",
    "NVMLError_Timeout": "timed out",
    "NVMLError_ResetRequired": "GPU needs a reset",
    "NVMLError_InvalidArgument": "invalid argument",
    "NVMLError_Unknown": "unknown error",
}
# Errors meaning "this call does not exist here": try an older version of it. A versioned
# call (nvmlDeviceGetTemperatureV, the v2 memory call) that the driver has in another
# structure version fails with NVML_ERROR_ARGUMENT_VERSION_MISMATCH (25), which nvidia-ml-py
# raises as NVMLError_ArgumentVersionMismatch: for us that version of the call is missing.
MISSING = (
    "NVMLError_FunctionNotFound",
    "NVMLLibraryMismatchError",
    "NVMLError_ArgumentVersionMismatch",
)
LOST = ("NVMLError_GpuIsLost",)

# Process calls, newest first. Each may be missing from an older nvidia-ml-py (AttributeError)
# or from an older driver (NVMLError_FunctionNotFound); the unversioned one maps to whichever
# version the installed binding was written for.
COMPUTE_PROCESS_CALLS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
GRAPHICS_PROCESS_CALLS = (
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses",
)

PROCESS_CALLS = (("compute", COMPUTE_PROCESS_CALLS), ("graphics", GRAPHICS_PROCESS_CALLS))

# Why NVML could not be initialised at all, by exception class name.
_INIT_FAILURES = {
    "ImportError": "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    "ModuleNotFoundError": "nvidia-ml-py is not installed (pip install nvidia-ml-py)",
    "NVMLError_LibraryNotFound": (
        "no NVIDIA driver on this machine (the NVML library libnvidia-ml was not found)"
    ),
    "NVMLError_DriverNotLoaded": (
        "the NVIDIA driver is not loaded (no GPU attached, or the driver failed to start)"
    ),
    "NVMLError_NoPermission": "no permission to use NVML",
    "NVMLError_LibRmVersionMismatch": (
        "the NVML library and the loaded kernel driver differ in version "
        "(driver updated without a reboot?)"
    ),
    "NVMLError_GpuIsLost": "a GPU has fallen off the bus (GPU is lost)",
    "NVMLError_Unknown": "NVML failed to initialise (unknown error)",
}


# ---------------------------------------------------------------- initialisation


@dataclass
class _State:
    module: Optional[ModuleType]
    ok: bool
    pid: int
    failure: Optional[NvmlSnapshot] = None


_lock = threading.RLock()
_state: Optional[_State] = None
_override: Optional[ModuleType] = None
_atexit_registered = False


def set_pynvml(module: Optional[ModuleType]) -> None:
    """Use `module` as pynvml from now on (a fake one in tests); None: the real one
    (nvidia-ml-py)."""
    global _override
    with _lock:
        reset()
        _override = module


def reset() -> None:
    """Forget the cached initialisation (shutting NVML down if this process started it):
    for tests, or after attaching a driver."""
    global _state
    with _lock:
        state, _state = _state, None
        if state is not None and state.ok:
            _shutdown(state)


def _shutdown(state: _State) -> None:
    if state.module is None or state.pid != os.getpid():
        return  # a forked child: its parent owns that initialisation
    with contextlib.suppress(Exception):  # NVML: shut down already, or the library unloading
        state.module.nvmlShutdown()


def _shutdown_at_exit() -> None:
    state = _state
    if state is not None and state.ok:
        _shutdown(state)


def _import_pynvml() -> ModuleType:
    if _override is not None:
        return _override
    import pynvml

    return pynvml


def initialised() -> tuple[Optional[ModuleType], Optional[NvmlSnapshot]]:
    """(pynvml module, None) once NVML is initialised in this process, or (None, the
    cached "not available" snapshot) when it cannot be. A failed initialisation (no
    driver: ``NVMLError_LibraryNotFound``; driver not loaded...) is cached, so asking on a
    machine without a GPU costs microseconds."""
    global _state, _atexit_registered
    state = _state
    if state is not None and (state.pid == os.getpid() or not state.ok):
        return (state.module, None) if state.ok else (None, state.failure)
    with _lock:
        state = _state
        if state is not None and (state.pid == os.getpid() or not state.ok):
            return (state.module, None) if state.ok else (None, state.failure)
        # Not tried yet, or a forked child of a process that initialised NVML: start it
        # here (nvmlInit is reference counted, so this never shuts the parent's down).
        pid = os.getpid()
        try:
            module = _import_pynvml()
        except ImportError as error:
            # Without a driver, installing the binding would change nothing: say that
            # instead of "pip install nvidia-ml-py" (noise on a CPU-only machine).
            failure = _failure(error) if _driver_may_be_present() else _no_driver(error)
            _state = _State(None, False, pid, failure)
            return None, _state.failure
        try:
            module.nvmlInit()
        except Exception as error:  # NVML: any NVMLError (no driver, no permission...) is cached
            _state = _State(module, False, pid, _failure(error))
            return None, _state.failure
        _state = _State(module, True, pid)
        if not _atexit_registered:
            atexit.register(_shutdown_at_exit)
            _atexit_registered = True
        return module, None


def forget() -> None:
    """Forget the initialisation without shutting NVML down (someone else already did)."""
    global _state
    with _lock:
        _state = None


def token() -> object:
    """An object that is replaced whenever NVML is initialised again (after `reset`,
    `forget`, a fork, another pynvml): what caches NVML handles check they belong to."""
    return _state


def known_unavailable() -> bool:
    """True once NVML failed to initialise in this process (cached; no NVML call made)."""
    state = _state
    return state is not None and not state.ok


def _driver_may_be_present() -> bool:
    """False only where it is sure: on Linux, the driver makes /proc/driver/nvidia and
    /dev/nvidiactl (a container with GPUs gets them from the NVIDIA container runtime)."""
    if not sys.platform.startswith("linux"):
        return True
    return os.path.exists("/proc/driver/nvidia") or os.path.exists("/dev/nvidiactl")


def _no_driver(error: BaseException) -> NvmlSnapshot:
    message = "no NVIDIA driver on this machine (no /proc/driver/nvidia, no /dev/nvidiactl)"
    kind = type(error).__name__
    return NvmlSnapshot(
        available=False, error=message, error_kind=kind, pid=os.getpid(), no_driver=True
    )


def _failure(error: BaseException) -> NvmlSnapshot:
    kind = type(error).__name__
    message = _INIT_FAILURES.get(kind)
    if message is None:
        message = f"NVML failed to initialise: {kind}: {error_text(error)}"
    # every NVIDIA driver installs libnvidia-ml: without it, there is none
    no_driver = kind == "NVMLError_LibraryNotFound"
    return NvmlSnapshot(
        available=False, error=message, error_kind=kind, pid=os.getpid(), no_driver=no_driver
    )


def reason_for(error: BaseException) -> str:
    """A short human reason for a failed NVML call."""
    if isinstance(error, AttributeError):
        return "not in this nvidia-ml-py"
    kind = type(error).__name__
    return _REASONS.get(kind) or f"{kind}: {error_text(error)}"


# ---------------------------------------------------------------- queries


class Query:
    """Calls NVML functions by name for one record, keeping the reasons for failures; tries
    older versions of a call while the driver or binding lacks the newer one (`first`).

    Once a call says the GPU is lost, every later call on this query is skipped.
    """

    def __init__(self, module: ModuleType) -> None:
        self.module = module
        self.reasons: dict[str, str] = {}
        self.lost = False
        self.last_error: Optional[BaseException] = None

    def attempt(self, function: str, *args: Any, **kwargs: Any) -> tuple[bool, Any, str]:
        """(succeeded, value, error kind) without recording anything."""
        if self.lost:
            return False, None, LOST[0]
        try:
            return True, getattr(self.module, function)(*args, **kwargs), ""
        except Exception as error:  # NVML: its NVMLError, AttributeError: not in this binding
            kind = "AttributeError" if isinstance(error, AttributeError) else type(error).__name__
            if kind in LOST:
                self.lost = True
            self.last_error = error
            return False, None, kind

    def call(self, field: str, function: str, *args: Any, **kwargs: Any) -> Any:
        """The call's value, or None with the reason recorded under `field`."""
        ok, value, _ = self.attempt(function, *args, **kwargs)
        if not ok:
            self.fail(field)
        return value

    def fail(self, field: str, reason: Optional[str] = None) -> None:
        if reason is None:
            if self.lost:
                reason = "GPU is lost"
            elif self.last_error is not None:
                reason = reason_for(self.last_error)
            else:
                reason = "not available"
        self.reasons.setdefault(field, reason)

    def first(self, field: str, functions: tuple[str, ...], *args: Any) -> tuple[bool, Any]:
        """Try `functions` in order while each is missing (binding or driver)."""
        for function in functions:
            ok, value, kind = self.attempt(function, *args)
            if ok:
                return True, value
            if kind not in MISSING and kind != "AttributeError":
                self.fail(field)
                return False, None
        self.fail(field, "not in this driver or nvidia-ml-py")
        return False, None

    def unavailable(self) -> MissingFields:
        return tuple(MissingField(field, why) for field, why in sorted(self.reasons.items()))


# ---------------------------------------------------------------- value helpers


def text(value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace").rstrip("\x00")
    return str(value)


def uint(value: Any) -> Optional[int]:
    if value is None:
        return None
    value = int(value)
    return None if value == _UINT_NOT_AVAILABLE else value


def ulonglong(value: Any) -> Optional[int]:
    if value is None:
        return None
    value = int(value)
    return None if value == _ULONGLONG_NOT_AVAILABLE else value


def watts(milliwatts: Optional[int]) -> Optional[float]:
    return None if milliwatts is None else int(milliwatts) / 1000.0


def process_entries(query: Query, handle: Any) -> Optional[list[tuple[str, Any]]]:
    """("compute" or "graphics", NVML's entry) for each process NVML lists on `handle`;
    None when neither list could be read (the reasons under "processes.compute" and
    "processes.graphics" in `query`)."""
    listed: Optional[list[tuple[str, Any]]] = None
    for kind, calls in PROCESS_CALLS:
        ok, value = query.first(f"processes.{kind}", calls, handle)
        if ok:
            listed = listed or []
            listed.extend((kind, entry) for entry in value or ())
    return listed
