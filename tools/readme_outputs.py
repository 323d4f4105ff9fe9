"""Run the README's examples and write what they print into it, so the outputs cannot drift.

Each session below runs in a fresh interpreter: a plain IPython shell (text output), the
real package and the real CPU torch, nothing faked. The outputs are a machine without a GPU:
NVML is absent there and the reports say so. Each README block between
``<!-- output: NAME -->`` and ``<!-- /output -->`` holds an example's cells and what they
printed.

  python tools/readme_outputs.py           # rewrite the blocks
  python tools/readme_outputs.py --check   # exit 1 where the README differs (CI)

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
    that block, but its source and output are not shown (a rerun its comment announces)."""

    source: str
    block: Optional[str]
    shown: bool = True


def _cells(block: Optional[str], *sources: str) -> list[Cell]:
    return [Cell(source, block) for source in sources]


TRAIN = (
    "import torch\n\n"
    "model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.Linear(2048, 10))\n"
    "x = torch.randn(256, 512)\n"
    "model(x).pow(2).mean()  # shown, and kept in Out with its autograd graph"
)

VALIDATE = (
    "# run this cell twice\n"
    "for batch in range(8):\n"
    "    loss = model(torch.randn(1024, 512)).pow(2).mean()\n"
    "    val_losses.append(loss)  # without torch.no_grad(), each loss keeps its graph"
)


def _oom_message() -> str:
    """The first torch OutOfMemoryError text in the advisor's fixtures (a real message)."""
    messages = json.loads(MESSAGES.read_text(encoding="utf-8"))["messages"]
    return next(m["message"] for m in messages if m["type"] == "torch.OutOfMemoryError")


# name -> the cells of one story, in the order a reader runs them
SESSIONS: dict[str, list[Cell]] = {
    "everyday": [
        Cell("%load_ext colab_gpu_guard", None),
        *_cells("seed_all", "%seed_all 42"),
        *_cells("gpu_status", TRAIN, "%gpu_status"),
        *_cells("gpu_reset", "%gpu_reset"),
        *_cells("gpu_panel", "%gpu_panel"),
    ],
    "leak": [
        Cell("%load_ext colab_gpu_guard", None),
        *_cells(
            "leak",
            "import torch\n\nmodel = torch.nn.Linear(512, 512)\nval_losses = []",
            VALIDATE,
        ),
        Cell(VALIDATE, "leak", shown=False),
        *_cells("leak", "%gpu_history"),
    ],
}


# ---------------------------------------------------------------- running (in the child)


def _run_session(name: str) -> dict[str, str]:
    """Run one session in this (fresh) interpreter: {block: the cells and their output}."""
    sys.path.insert(0, str(ROOT))
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance(colors="NoColor")
    shown: dict[str, list[str]] = {}
    for cell in SESSIONS[name]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            result = shell.run_cell(cell.source, store_history=True)
        if result.error_before_exec or result.error_in_exec:
            raise SystemExit(f"session {name}: cell failed:\n{cell.source}\n{out.getvalue()}")
        if cell.block is None or not cell.shown:
            continue
        parts = shown.setdefault(cell.block, [])
        text = out.getvalue().rstrip()
        if "\n" not in cell.source and cell.source.startswith("%"):  # a magic: as IPython shows it
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


def _child(name: str) -> None:
    blocks = _advice() if name == "advice" else _run_session(name)
    print(json.dumps(blocks))


# ---------------------------------------------------------------- the parent


def generate() -> dict[str, dict[str, str]]:
    """{session: {block: text}}, each session run in a fresh interpreter."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLAB_")}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["PYTHONHASHSEED"] = "0"
    sessions: dict[str, dict[str, str]] = {}
    for name in [*SESSIONS, "advice"]:
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


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if README.md differs")
    parser.add_argument("--session", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.session:
        _child(args.session)
        return 0
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
