"""Run the README's examples and write what they print into it, so the outputs cannot drift.

Each session below runs in a fresh interpreter: a plain IPython shell (text output), the
real package and the real CPU torch, nothing faked. The outputs are a machine without a GPU:
NVML is absent there and the reports say so. Each README block between
``<!-- output: NAME -->`` and ``<!-- /output -->`` holds an example's cells and what they
printed.

  python tools/readme_outputs.py           # rewrite the blocks
  python tools/readme_outputs.py --check   # exit 1 where the README differs (CI)
  python tools/readme_outputs.py --gpu docs/gpu-outputs.md   # on a machine with a GPU

`--gpu FILE` runs the same stories with the tensors on the GPU (and a traced cell that runs
out of memory) and writes them, labelled with the GPU, driver, torch and date, as a page of
their own: CI has no GPU to check them against, so they are a capture, not part of the README.

What differs from run to run (times, durations, PIDs, the host's memory figures) is masked
when two outputs are compared; a block whose masked text is unchanged is left as it was.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple, Optional

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MESSAGES = ROOT / "tests" / "fixtures" / "cuda_error_messages.json"
BLOCK = re.compile(r"(<!-- output: ([\w-]+) -->\n)(.*?)(<!-- /output -->)", re.DOTALL)


class Cell(NamedTuple):
    """One cell of a session; `block` names the README block it is shown in (None: run
    only, as a cell shown in an earlier block of the same story); `shown` False: run in
    that block, but its source and output are not shown (a rerun its comment announces);
    `fails` True: the cell is meant to raise (its traceback and the advice are shown)."""

    source: str
    block: Optional[str]
    shown: bool = True
    fails: bool = False

    @property
    def is_line_magic(self) -> bool:
        """Shown as `In [N]: %magic` and its output; other cells as code, then output."""
        return "\n" not in self.source and self.source.startswith("%")


def _cells(block: Optional[str], *sources: str) -> list[Cell]:
    return [Cell(source, block) for source in sources]


_ON_GPU = ', device="cuda"'


def _train(on_gpu: bool) -> str:
    return (
        "import torch\n\n"
        "model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.Linear(2048, 10))"
        + (".cuda()" if on_gpu else "")
        + f"\nx = torch.randn(256, 512{_ON_GPU if on_gpu else ''})\n"
        "model(x).pow(2).mean()  # shown, and kept in Out with its autograd graph"
    )


def _validate(on_gpu: bool) -> str:
    return (
        "# run this cell twice\n"
        "for batch in range(8):\n"
        f"    loss = model(torch.randn(1024, 512{_ON_GPU if on_gpu else ''})).pow(2).mean()\n"
        "    val_losses.append(loss)  # without torch.no_grad(), each loss keeps its graph"
    )


def _oom_message() -> str:
    """The first torch OutOfMemoryError text in the advisor's fixtures (a real message)."""
    messages = json.loads(MESSAGES.read_text(encoding="utf-8"))["messages"]
    return next(m["message"] for m in messages if m["type"] == "torch.OutOfMemoryError")


# The classic out-of-memory cell, on any GPU: a batch that fits (40% of what is free) whose
# first activation fits too, and whose second does not; then the same step in eighths.
TRACE_MODEL = (
    "import torch\n\n"
    "model = torch.nn.Sequential(\n"
    "    torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)\n"
    ").cuda()\n"
    "free, total = torch.cuda.mem_get_info()\n"
    "rows = free * 2 // 5 // (4096 * 4)  # a batch of 40% of the free memory"
)
TRACE_TOO_LARGE = (
    '%%gpu_trace\nbatch = torch.randn(rows, 4096, device="cuda")\nloss = model(batch).pow(2).mean()'
)
TRACE_FIXED = (
    "%%gpu_trace\n"
    'batch = torch.randn(rows // 8, 4096, device="cuda")  # an eighth of it\n'
    "loss = model(batch).pow(2).mean()"
)


def _sessions(on_gpu: bool) -> dict[str, list[Cell]]:
    """name -> the cells of one story, in the order a reader runs them; on a GPU the same
    stories with the tensors there, and the classic out-of-memory cell, traced by line."""
    validate = _validate(on_gpu)
    sessions = {
        "everyday": [
            Cell("%load_ext colab_gpu_guard", None),
            *_cells("seed_all", "%seed_all 42"),
            *_cells("gpu_status", _train(on_gpu), "%gpu_status"),
            *_cells("gpu_reset", "%gpu_reset"),
            *_cells("gpu_panel", "%gpu_panel"),
        ],
        "leak": [
            Cell("%load_ext colab_gpu_guard", None),
            *_cells(
                "leak",
                "import torch\n\nmodel = torch.nn.Linear(512, 512)"
                + (".cuda()" if on_gpu else "")
                + "\nval_losses = []",
                validate,
            ),
            Cell(validate, "leak", shown=False),
            *_cells("leak", "%gpu_history"),
        ],
    }
    if on_gpu:
        sessions["trace"] = [
            Cell("%load_ext colab_gpu_guard", None),
            Cell(TRACE_MODEL, "trace"),
            Cell(TRACE_TOO_LARGE, "trace", fails=True),
            Cell(TRACE_FIXED, "trace"),
        ]
    return sessions


SESSIONS = _sessions(on_gpu=False)
GPU_SESSIONS = _sessions(on_gpu=True)


# ---------------------------------------------------------------- running (in the child)


def _run_session(cells: list[Cell]) -> dict[str, str]:
    """Run one session in this (fresh) interpreter: {block: the cells and their output}."""
    sys.path.insert(0, str(ROOT))
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="NoColor")
    shown: dict[str, list[str]] = {}
    for cell in cells:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            result = shell.run_cell(cell.source, store_history=True)
        failed = bool(result.error_before_exec or result.error_in_exec)
        if failed != cell.fails:
            said = "failed" if failed else "ran without the error it is there to show"
            raise SystemExit(f"a cell {said}:\n{cell.source}\n{out.getvalue()}")
        if cell.block is None or not cell.shown:
            continue
        parts = shown.setdefault(cell.block, [])
        text = out.getvalue().rstrip()
        if cell.is_line_magic:  # as IPython shows it
            parts.append(f"```text\nIn [{result.execution_count}]: {cell.source}\n{text}\n```\n")
            continue
        parts.append(f"```python\n{cell.source}\n```\n")
        if text:
            parts.append(f"```text\n{text}\n```\n")
    return {block: "".join(parts) for block, parts in shown.items()}


def _advice() -> dict[str, str]:
    """The advisor on a real torch OOM message (no GPU needed: `advise` reads the text)."""
    sys.path.insert(0, str(ROOT))
    import torch

    import colab_gpu_guard

    message = _oom_message()
    advice = str(colab_gpu_guard.advise(torch.OutOfMemoryError(message))).rstrip()
    return {"oom_advice": f"```text\ntorch.OutOfMemoryError: {message}\n\n{advice}\n```\n"}


def _label() -> dict[str, str]:
    """What a GPU capture ran on, as its page says it; {} where torch sees no CUDA GPU."""
    sys.path.insert(0, str(ROOT))
    import datetime
    import platform

    import torch

    from colab_gpu_guard.status import gpu_status

    if not torch.cuda.is_available():
        return {}
    nvml = gpu_status(leftovers=False, processes=False).to_dict()["nvml"]
    return {
        "label": f"an {torch.cuda.get_device_name(0)} (driver {nvml['driver_version']}, "
        f"CUDA {nvml['cuda_driver_version']}), torch {torch.__version__}, IPython "
        f"{__import__('IPython').__version__}, Python {platform.python_version()}, "
        f"on {datetime.date.today().isoformat()}"
    }


def _child(name: str) -> None:
    if name == "advice":
        blocks = _advice()
    elif name == "label":
        blocks = _label()
    elif name.startswith("gpu-"):
        blocks = _run_session(GPU_SESSIONS[name[len("gpu-") :]])
    else:
        blocks = _run_session(SESSIONS[name])
    print(json.dumps(blocks))


# ---------------------------------------------------------------- the parent


def generate(names: Optional[list[str]] = None) -> dict[str, dict[str, str]]:
    """{session: {block: text}}, each session run in a fresh interpreter (by default the
    README's; `gpu-NAME` the GPU stories, `label` what a GPU capture runs on)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLAB_")}
    if names is None:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONHASHSEED"] = "0"
    sessions: dict[str, dict[str, str]] = {}
    for name in names or [*SESSIONS, "advice"]:
        done = subprocess.run(
            [sys.executable, __file__, "--session", name],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"session {name} failed:\n{done.stdout}\n{done.stderr}")
        sessions[name] = json.loads(done.stdout.strip().splitlines()[-1])
    return sessions


SIZE = r"\d+(?:\.\d+)? (?:B|KiB|MiB|GiB|TiB)\b"
# lines whose figures are the host's memory (they differ run to run and machine to machine)
HOST_LINE = re.compile(r"host|RAM|this kernel|again|^\[\d+\]")


def normalise(text: str) -> str:
    """Mask what differs between runs, as tests/golden/scenario.py does."""
    text = re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "<date time>", text)
    text = re.sub(r"\b\d\d:\d\d:\d\d\b", "<time>", text)
    text = re.sub(r"\d+(?:\.\d+)? ms\b", "<n> ms", text)
    text = re.sub(r"\b\d+\.\d+ s\b", "<t> s", text)
    text = re.sub(r"\bPID \d+", "PID <pid>", text)
    text = re.sub(r"collector found \d+ unreachable", "collector found <n> unreachable", text)
    lines = []
    for line in text.splitlines():
        if HOST_LINE.search(line):
            line = re.sub(rf"[+-]?{SIZE}", "<size>", line)
        # a table's columns widen with a figure's text: fold the padding
        lines.append(re.sub(r"(?<=\S)  +", "  ", line).rstrip())
    return "\n".join(lines)


def render(readme: str, sessions: dict[str, dict[str, str]]) -> str:
    """The README with each block's text replaced. A session's blocks are kept as they are
    where only masked parts differ, and all rewritten where one differs more (so that the
    blocks of one story always come from one run)."""
    old = {match.group(2): match.group(3) for match in BLOCK.finditer(readme)}
    blocks: dict[str, str] = {}
    for made in sessions.values():
        same = all(normalise(old.get(name, "")) == normalise(text) for name, text in made.items())
        blocks.update({name: old[name] for name in made} if same else made)
    named = [match.group(2) for match in BLOCK.finditer(readme)]
    missing = sorted(set(blocks) - set(named))
    unknown = sorted(set(named) - set(blocks))
    if missing or unknown:
        raise SystemExit(f"README blocks: missing {missing}, not generated here {unknown}")

    def replace(match: re.Match) -> str:
        return f"{match.group(1)}{blocks[match.group(2)]}{match.group(4)}"

    return BLOCK.sub(replace, readme)


# the GPU page: (a heading or None, the block under it), in the order a reader runs them
GPU_PAGE = [
    ("The everyday commands", "seed_all"),
    (None, "gpu_status"),
    (None, "gpu_reset"),
    (None, "gpu_panel"),
    ("Out of memory on the second run", "leak"),
    ("Out of memory, found by line (`%%gpu_trace`)", "trace"),
]
GPU_PAGE_INTRO = """\
# The README's examples on a GPU

The cells of [the README](../README.md), with the tensors on the GPU, as they ran on {label}
(`python tools/readme_outputs.py --gpu`). This page is a capture from that day: CI has no GPU
to run it again, so unlike the README's outputs (a machine without a GPU) nothing checks it
against a later version.
"""
TRACE_INTRO = (
    "A batch of 40% of the free memory fits, and so does its first activation; the second "
    "does not. The trace names the line, and what was alive when it failed; the same step "
    "in eighths of the batch fits.\n\n"
)


def gpu_page(label: str, sessions: dict[str, dict[str, str]]) -> str:
    """The page of GPU captures: each block of GPU_PAGE, with its heading, under the label."""
    blocks = {name: text for made in sessions.values() for name, text in made.items()}
    parts = [GPU_PAGE_INTRO.format(label=label)]
    for heading, name in GPU_PAGE:
        if heading:
            parts.append(f"\n## {heading}\n\n")
        if name == "trace":
            parts.append(TRACE_INTRO)
        parts.append(f"<!-- output: {name} -->\n{blocks[name]}<!-- /output -->\n")
    return "".join(parts)


def capture_on_gpu(path: Path) -> int:
    """Run the GPU stories and write their page to `path`; one line and 2 without a GPU."""
    label = generate(["label"])["label"].get("label")
    if label is None:
        print(
            "--gpu needs a CUDA GPU that torch can use (torch.cuda.is_available() is False "
            "here); without one, run the tool without --gpu for the README's outputs"
        )
        return 2
    sessions = generate([f"gpu-{name}" for name in GPU_SESSIONS])
    path.write_text(gpu_page(label, sessions), encoding="utf-8")
    print(f"wrote the GPU captures ({label}) into {path}")
    return 0


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md differs")
    parser.add_argument(
        "--gpu", metavar="FILE", type=Path, help="on a GPU: write the stories run there to FILE"
    )
    parser.add_argument("--session", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.session:
        _child(args.session)
        return 0
    if args.gpu:
        return capture_on_gpu(args.gpu)
    current = README.read_text(encoding="utf-8")
    wanted = render(current, generate())
    if args.check:
        if current == wanted:
            print("README.md outputs are up to date")
            return 0
        diff = difflib.unified_diff(
            normalise(current).splitlines(), normalise(wanted).splitlines(), lineterm=""
        )
        print("\n".join(diff))
        print(
            "README.md outputs differ from a run (masked above): run python "
            "tools/readme_outputs.py (on a machine without a GPU: the outputs are a CPU's)"
        )
        return 1
    README.write_text(wanted, encoding="utf-8")
    print(f"wrote the example outputs into {README}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
