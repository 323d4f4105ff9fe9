"""Record real CUDA allocator snapshots in real notebook shells, as test fixtures for the
memory trace: `python tools/record_cuda_snapshots.py OUTDIR` on a machine with a GPU.

Each scenario runs as notebook cells: in a Jupyter kernel through nbclient (cell files named
as ipykernel names them, /tmp/ipykernel_PID/HASH.py) and, for one scenario, in a plain
IPython shell in this process (<ipython-input-N-...> names). Recording is on from the cell
before the scenario's first to the one after its last (torch's `_record_memory_history`,
Python stacks, bounded); the snapshot (`torch.cuda.memory._snapshot()`, the dict torch's
viewer reads) is pickled to OUTDIR/<scenario>.pickle, and OUTDIR/manifest.json says, per
scenario, each cell's source, execution count and file name, its wall-clock window, and the
facts measured beside it (bytes each named tensor holds, memory_allocated at each cell's
end, the out-of-memory observer's calls). Nothing here uses colab_gpu_guard.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import textwrap
from pathlib import Path

MAX_ENTRIES = 20_000

SETUP = textwrap.dedent(
    """\
    import gc, json, os, pickle, sys, time
    import torch

    torch.cuda.init()
    _facts = {"cells": {}, "oom_calls": []}
    _oom_snapshot = []

    def _on_oom(device, alloc, device_allocated, device_free):
        # keep the last one only: the observer can fire more than once for one error
        _facts["oom_calls"].append(dict(device=device, alloc=alloc,
            device_allocated=device_allocated, device_free=device_free))
        _oom_snapshot[:] = [torch.cuda.memory._snapshot()]

    torch._C._cuda_attach_out_of_memory_observer(_on_oom)

    _started = []

    def _pre(info=None):
        # the cell's number is only sure in post_run_cell (its result carries it)
        _started[:] = [time.time() * 1e6]

    def _post(result=None):
        torch.cuda.synchronize()
        entry = _facts["cells"].setdefault(str(result.execution_count), {})
        if _started:
            entry["start_us"] = _started[0]
        entry["end_us"] = time.time() * 1e6
        entry["allocated_after"] = torch.cuda.memory_allocated()
        entry["reserved_after"] = torch.cuda.memory_reserved()

    get_ipython().events.register("pre_run_cell", _pre)
    get_ipython().events.register("post_run_cell", _post)

    def _nbytes(*tensors):
        seen = {}
        for t in tensors:
            s = t.untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
        return sum(seen.values())
    """
)

START = (
    "torch.cuda.reset_peak_memory_stats()\n"
    "torch.cuda.memory._record_memory_history("
    f"'all', context='all', stacks='python', max_entries={MAX_ENTRIES})"
)


def stop(name: str, outdir: str, facts: str, oom: bool = False) -> str:
    """The cell that ends a scenario: snapshot, facts, recording off, names dropped."""
    return textwrap.dedent(
        f"""\
        _snap = _oom_snapshot[-1] if {oom!r} and _oom_snapshot else torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(None)
        with open({os.path.join(outdir, name + ".pickle")!r}, "wb") as _f:
            pickle.dump(_snap, _f)
        _facts["measured"] = {facts}
        _facts["peak_allocated"] = torch.cuda.max_memory_allocated()
        _facts["file_names"] = dict(get_ipython().compile._filename_map)
        _facts["torch"] = torch.__version__
        _facts["gpu"] = torch.cuda.get_device_name(0)
        print("FACTS:" + json.dumps(_facts))
        """
    )


CLEAN = "for _n in {names}:\n    globals().pop(_n, None)\ngc.collect(); torch.cuda.empty_cache()"

# Each scenario: its cells and the facts measured after them (an expression over the
# kernel's names, evaluated before they are dropped).
SCENARIOS = {
    "forward_peak": dict(
        cells=[
            "model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),\n"
            "                            torch.nn.Linear(4096, 1024)).cuda()",
            "x = torch.randn(2048, 4096, device='cuda')\n"
            "out = model(x)\n"
            "loss = out.float().pow(2).mean()",
        ],
        facts="dict(params=_nbytes(*model.parameters()), x=_nbytes(x), out=_nbytes(out))",
        names=["model", "x", "out", "loss"],
    ),
    "training_leak": dict(
        cells=[
            "model = torch.nn.Linear(2048, 2048).cuda()\n"
            "opt = torch.optim.Adam(model.parameters())\n"
            "losses = []",
            "for step in range(3):\n"
            "    x = torch.randn(512, 2048, device='cuda')\n"
            "    loss = model(x).pow(2).mean()\n"
            "    opt.zero_grad()\n"
            "    loss.backward()\n"
            "    opt.step()\n"
            "    losses.append(loss)",
        ],
        facts="dict(params=_nbytes(*model.parameters()), "
        "optimizer_state=_nbytes(*[t for s in opt.state.values() for t in s.values() "
        "if torch.is_tensor(t) and t.is_cuda]), losses=len(losses))",
        names=["model", "opt", "losses", "x", "loss", "step"],
    ),
    "user_module": dict(
        cells=[
            "import sys\n"
            "sys.path.insert(0, {moddir!r})\n"
            "import nbutils\n"
            "big = nbutils.make_buffer(64 * 2**20)\n"
            "small = nbutils.make_buffer(2**20)",
        ],
        facts="dict(big=_nbytes(big), small=_nbytes(small))",
        names=["big", "small"],
    ),
    "oom": dict(
        cells=[
            "model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),\n"
            "                            torch.nn.Linear(1024, 1024)).cuda()\n"
            "free, total = torch.cuda.mem_get_info()\n"
            "rows = int(free * 0.4) // (1024 * 4)  # batch, ReLU output, logits: 1.2x free",
            "batch = torch.empty(rows, 1024, device='cuda')\nlogits = model(batch)",
        ],
        facts="dict(params=_nbytes(*model.parameters()), batch=_nbytes(batch), "
        "rows=rows, free=free, total=total)",
        names=["model", "batch", "logits", "rows", "free", "total"],
        oom=True,
    ),
}

USER_MODULE = textwrap.dedent(
    """\
    import torch


    def make_buffer(nbytes):
        return torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    """
)


def scenario_cells(name: str, spec: dict, outdir: str, moddir: str) -> list[str]:
    cells = [START] + [cell.format(moddir=moddir) for cell in spec["cells"]]
    cells.append(stop(name, outdir, spec["facts"], spec.get("oom", False)))
    cells.append(CLEAN.format(names=spec["names"] + ["_snap", "_f"]))
    return cells


def run_in_kernel(outdir: str, moddir: str, names: list[str]) -> dict:
    import nbformat
    from nbclient import NotebookClient

    manifest = {}
    for name in names:
        spec = SCENARIOS[name]
        cells = [SETUP] + scenario_cells(name, spec, outdir, moddir)
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
        NotebookClient(nb, timeout=600, kernel_name="python3", allow_errors=True).execute()
        facts = None
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                text = output.get("text", "")
                if "FACTS:" in text:
                    facts = json.loads(text.split("FACTS:", 1)[1].splitlines()[0])
        errors = [
            dict(cell=cell.execution_count, ename=o.get("ename"), evalue=o.get("evalue"))
            for cell in nb.cells
            for o in cell.get("outputs", [])
            if o.get("output_type") == "error"
        ]
        manifest[name] = dict(
            shell="ipykernel",
            pickle=name + ".pickle",
            cells=[
                dict(execution_count=cell.execution_count, source=cell.source) for cell in nb.cells
            ],
            errors=errors,
            facts=facts,
        )
        print(f"{name}: {len(errors)} errors {errors}; facts: {facts is not None}")
    return manifest


def run_in_plain_shell(outdir: str, moddir: str) -> dict:
    """forward_peak again in an IPython shell in this process (<ipython-input-N-...>)."""
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    name, spec = "forward_peak_plain_shell", SCENARIOS["forward_peak"]
    cells = [SETUP] + scenario_cells(name, spec, outdir, moddir)
    captured = []
    import contextlib
    import io

    for source in cells:
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            result = shell.run_cell(source, store_history=True)
        captured.append((result.execution_count, source, buffer.getvalue(), result.success))
    facts = None
    for _, _, out, _ in captured:
        if "FACTS:" in out:
            facts = json.loads(out.split("FACTS:", 1)[1].splitlines()[0])
    return {
        name: dict(
            shell=f"IPython {__import__('IPython').__version__} InteractiveShell",
            pickle=name + ".pickle",
            cells=[dict(execution_count=n, source=s) for n, s, _, _ in captured],
            errors=[n for n, _, _, ok in captured if not ok],
            facts=facts,
        )
    }


def check_with_torch_viewer(outdir: str, manifest: dict) -> None:
    """torch's own tools read every pickle (the format cannot have drifted)."""
    from torch.cuda import _memory_viz

    for name, entry in manifest.items():
        with open(os.path.join(outdir, entry["pickle"]), "rb") as f:
            snap = pickle.load(f)
        html = _memory_viz.trace_plot(snap)
        entry["pickle_bytes"] = os.path.getsize(os.path.join(outdir, entry["pickle"]))
        entry["trace_events"] = sum(len(t) for t in snap.get("device_traces", []))
        entry["segments"] = len(snap.get("segments", []))
        print(
            f"{name}: {entry['pickle_bytes']} bytes, {entry['trace_events']} events, "
            f"trace_plot {len(html)} chars"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir")
    parser.add_argument(
        "--only", nargs="*", choices=sorted(SCENARIOS), help="record only these scenarios"
    )
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: nothing recorded")
        return 1
    outdir = os.path.abspath(args.outdir)
    os.makedirs(outdir, exist_ok=True)
    moddir = tempfile.mkdtemp(prefix="cgg_user_module_")
    Path(moddir, "nbutils.py").write_text(USER_MODULE)
    manifest = run_in_kernel(outdir, moddir, args.only or list(SCENARIOS))
    if not args.only or "forward_peak" in args.only:
        try:
            manifest.update(run_in_plain_shell(outdir, moddir))
        except Exception as error:  # the kernel recordings still count
            print(f"plain shell scenario failed: {type(error).__name__}: {error}", file=sys.stderr)
    check_with_torch_viewer(outdir, manifest)
    info = dict(
        torch=torch.__version__,
        cuda=torch.version.cuda,
        gpu=torch.cuda.get_device_name(0),
        user_module_dir=moddir,
        max_entries=MAX_ENTRIES,
        scenarios=manifest,
    )
    Path(outdir, "manifest.json").write_text(json.dumps(info, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
