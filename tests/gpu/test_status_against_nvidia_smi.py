"""`gpu_status()` and `python -m colab_gpu_guard status --json` against nvidia-smi on a real
GPU, field by field: names, UUIDs, bus ids, memory, driver and CUDA versions, compute
capability and mode, MIG and ECC modes, and the processes (PIDs, names, memory) that
`nvidia-smi --query-compute-apps` lists. Skipped without a CUDA device."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from colab_gpu_guard import nvml
from colab_gpu_guard.status import gpu_status

pytestmark = pytest.mark.gpu
ROOT = str(Path(__file__).resolve().parents[2])
MiB = 2**20
GPU_FIELDS = (
    "index,name,uuid,pci.bus_id,memory.total,driver_version,compute_cap,compute_mode,"
    "mig.mode.current,ecc.mode.current,power.limit"
)


def smi(*args: str) -> str:
    path = shutil.which("nvidia-smi")
    if path is None:
        pytest.skip("nvidia-smi not found")
    return subprocess.run([path, *args], capture_output=True, text=True, check=True).stdout


def smi_rows(query: str, fields: str) -> list[dict[str, str]]:
    names = fields.split(",")
    out = smi(f"--query-{query}={fields}", "--format=csv,noheader,nounits")
    rows = []
    for line in out.splitlines():
        if line.strip():
            rows.append(dict(zip(names, (cell.strip() for cell in line.split(",")))))
    return rows


def missing(value: str) -> bool:
    return value in ("[N/A]", "N/A", "[Not Supported]", "")


@pytest.fixture
def cuda_torch():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    nvml.set_pynvml(None)
    nvml.reset()
    return torch


def status_json() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run(
        [sys.executable, "-m", "colab_gpu_guard", "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    ).stdout
    return json.loads(out)


def check_device(ours: dict, theirs: dict) -> list[str]:
    """The fields where ours and nvidia-smi's differ, as 'field: ours != theirs'."""
    wrong = []

    def differs(field: str, mine, smis) -> None:
        if mine != smis:
            wrong.append(f"{field}: {mine!r} != {smis!r}")

    differs("name", ours["name"], theirs["name"])
    differs("uuid", ours["uuid"], theirs["uuid"])
    differs("pci_bus_id", (ours["pci_bus_id"] or "").upper(), theirs["pci.bus_id"].upper())
    if abs(ours["memory_total"] // MiB - int(theirs["memory.total"])) > 1:
        differs("memory_total MiB", ours["memory_total"] // MiB, int(theirs["memory.total"]))
    if not missing(theirs["compute_cap"]):
        differs("compute_capability", ours["compute_capability"], theirs["compute_cap"])
    if not missing(theirs["compute_mode"]):
        mode = (ours["compute_mode"] or "").replace("_", "").replace(" ", "").lower()
        differs("compute_mode", mode, theirs["compute_mode"].replace("_", "").lower())
    if not missing(theirs["mig.mode.current"]):
        differs("mig_enabled", ours["mig_enabled"], theirs["mig.mode.current"] == "Enabled")
    if not missing(theirs["ecc.mode.current"]):
        differs("ecc_enabled", ours["ecc_enabled"], theirs["ecc.mode.current"] == "Enabled")
    limit = ours["power_limit_w"]
    if not missing(theirs["power.limit"]) and limit is not None:  # noqa: SIM102
        if abs(limit - float(theirs["power.limit"])) > 1:
            differs("power_limit_w", ours["power_limit_w"], float(theirs["power.limit"]))
    return wrong


def test_gpu_status_json_is_nvidia_smis_field_by_field(cuda_torch):
    document = status_json()
    theirs = smi_rows("gpu", GPU_FIELDS)
    header = smi()
    assert document["nvml"]["available"], document["nvml"]
    devices = document["nvml"]["devices"]
    print(f"\nnvidia-smi: {theirs}\nours: {devices}")
    assert len(devices) == len(theirs)
    wrong = [
        f"GPU {row['index']}: {problem}"
        for device, row in zip(devices, theirs)
        for problem in check_device(device, row)
    ]
    assert wrong == []
    assert document["nvml"]["driver_version"] == theirs[0]["driver_version"]
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    if cuda:
        assert document["nvml"]["cuda_driver_version"] == cuda.group(1)


def test_gpu_processes_are_the_ones_nvidia_smi_lists(cuda_torch):
    """This process holds CUDA memory while both look: every PID nvidia-smi lists is ours
    with its name and (within what moved between the two reads) its memory. In a container
    NVML lists host PIDs: then this process is the one found by memory."""
    torch = cuda_torch
    held = torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    theirs = smi_rows("compute-apps", "gpu_uuid,pid,process_name,used_memory")
    snap = gpu_status(leftovers=False)
    ours = {
        (device.uuid, process.pid): process
        for device in snap.nvml.devices
        for process in device.processes or ()
    }
    print(f"\nnvidia-smi: {theirs}\nours: {list(ours.values())}")
    listed = {(row["gpu_uuid"], int(row["pid"])) for row in theirs}
    assert listed <= set(ours), (listed, set(ours))
    for row in theirs:
        process = ours[(row["gpu_uuid"], int(row["pid"]))]
        if not missing(row["process_name"]):
            assert process.name is not None
            assert os.path.basename(process.name) == os.path.basename(row["process_name"]), (
                process,
                row,
            )
        if not missing(row["used_memory"]) and process.used_memory is not None:
            assert abs(process.used_memory // MiB - int(row["used_memory"])) <= 64, (process, row)
    memory = snap.memory[0]
    assert memory.nvml_identified_by in ("pid", "memory"), memory
    mine = [p for p in ours.values() if p.this_process]
    assert len(mine) == 1, ours
    if memory.nvml_identified_by == "pid":
        assert mine[0].pid == os.getpid()
    del held
