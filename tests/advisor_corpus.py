"""The advisor's test corpus: real CUDA error messages (tests/fixtures/cuda_error_messages.json
and cuda_error_corpus.json), and the exceptions to raise them with."""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIRST = json.loads((FIXTURES / "cuda_error_messages.json").read_text())["messages"]
CORPUS = json.loads((FIXTURES / "cuda_error_corpus.json").read_text())["messages"]
ALL = FIRST + CORPUS


class ProcessException(Exception):
    """torch.multiprocessing.spawn.ProcessException as torch defines it."""

    def __init__(self, msg: str, error_index: int, error_pid: int) -> None:
        super().__init__(msg)
        self.msg, self.error_index, self.error_pid = msg, error_index, error_pid


# Base classes of the real exception types, for types whose framework is not installed here.
BASES = {
    "cupy.cuda.memory.OutOfMemoryError": MemoryError,
    "cupy_backends.cuda.api.runtime.CUDARuntimeError": RuntimeError,
    "cupy_backends.cuda.api.driver.CUDADriverError": RuntimeError,
    "jaxlib.xla_extension.XlaRuntimeError": RuntimeError,
    "tensorflow.python.framework.errors_impl.ResourceExhaustedError": Exception,
    "tensorflow.python.framework.errors_impl.UnknownError": Exception,
    "tensorflow.python.framework.errors_impl.UnimplementedError": Exception,
    "numpy.core._exceptions._ArrayMemoryError": MemoryError,
    "torch.OutOfMemoryError": RuntimeError,
    "torch.cuda.OutOfMemoryError": RuntimeError,
    "torch.AcceleratorError": RuntimeError,
    "torch.multiprocessing.spawn.ProcessRaisedException": ProcessException,
}
HAVE_TORCH = importlib.util.find_spec("torch") is not None


def exception_type(path: str) -> type:
    """The real class where it can be imported (builtins, torch), else one with the same
    module, name and base class."""
    if "." not in path:
        return getattr(__import__("builtins"), path)
    module, _, name = path.rpartition(".")
    if module.split(".")[0] == "torch" and HAVE_TORCH:
        return getattr(importlib.import_module(module), name)
    return type(name, (BASES[path],), {"__module__": module})


def make(item: dict) -> BaseException:
    return exception_type(item["type"])(item["message"], *item.get("args", ()))


def label(item: dict) -> str:
    words = item["message"].split()
    return f"{item['kind']}-{'-'.join(words[:4])}"[:60]
