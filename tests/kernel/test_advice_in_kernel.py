"""The advice under a traceback in a real kernel (nbclient), for every family of CUDA error
the advisor answers: each failing cell shows its traceback first, then the diagnosis as
text and HTML; an error that is not a GPU error (host memory) gets no advice."""

from __future__ import annotations

import pytest

from colab_gpu_guard.advisor import TITLES
from tests.advisor_corpus import CORPUS
from tests.kernel.cells import run_cells

# One real message per family (tests/fixtures/cuda_error_corpus.json), raised by its type.
FAMILIES = [
    "device_mismatch",
    "generator_device",
    "memory_in_disguise",
    "late_kernel_error",
    "invalid_device",
    "device_busy",
    "nccl_error",
    "stream_capture",
    "launch_out_of_resources",
    "no_attention_kernel",
    "gpu_too_old",
    "library_setup",
    "cuda_driver_oom",
    "driver_versions_differ",
    "out_of_memory",
    "no_gpu",
]


def _first(kind: str) -> dict:
    return next(item for item in CORPUS if item["kind"] == kind)


def _raise_cell(item: dict) -> str:
    module, _, name = item["type"].rpartition(".")
    # a framework's type is made with its module and name (none is installed here)
    make = f"type({name!r}, (Exception,), {{'__module__': {module!r}}})" if module else name
    return f"raise {make}({item['message']!r})"


@pytest.mark.slow
def test_each_family_is_advised_under_its_traceback_in_a_real_kernel(tmp_path):
    items = [_first(kind) for kind in FAMILIES]
    host = next(item for item in CORPUS if item["kind"] is None and "DefaultCPU" in item["message"])
    cells = ["%load_ext colab_gpu_guard"] + [_raise_cell(item) for item in items + [host]]
    outputs = run_cells(cells, tmp_path)[1:]
    for item, cell_outputs in zip(items, outputs):
        types = [output.output_type for output in cell_outputs]
        assert "error" in types, (item["kind"], types)
        shown = [o for o in cell_outputs if o.output_type == "display_data"]
        assert len(shown) == 1, (item["kind"], types)
        assert types.index("error") < cell_outputs.index(shown[0])  # the traceback first
        title = TITLES[item["kind"]]
        assert shown[0].data["text/plain"].startswith(f"CUDA advisor: {title}")
        assert "What to do" in shown[0].data["text/html"]
    host_outputs = outputs[-1]
    assert [o.output_type for o in host_outputs] == ["error"]  # no GPU advice for host memory
