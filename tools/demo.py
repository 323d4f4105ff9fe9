"""The main job (`make demo`): run the quickstart notebook headless in a real kernel on
whatever hardware is here, and write an HTML copy of it (offline: no widget JavaScript; the
`%gpu_panel` output shows the static copy the panel displays beside its widget).

  python tools/demo.py [--notebook PATH] [--output HTML] [--timeout SECONDS]

Exit codes: 0 when every cell ran, 1 when a cell failed or the notebook is missing, 2 on
bad arguments.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

REPO_NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
DEFAULT_NOTEBOOK = REPO_NOTEBOOKS / "quickstart.ipynb"


@dataclass
class DemoResult:
    notebook: Path
    html_path: Path
    cells_run: int
    seconds: float
    errors: list[str]

    @property
    def ok(self) -> bool:
        return not self.errors

    def __str__(self) -> str:
        state = "ok" if self.ok else f"FAILED ({len(self.errors)} error(s))"
        lines = [
            f"demo {state}: ran {self.cells_run} cells of {self.notebook} in {self.seconds:.1f} s",
            f"HTML copy: {self.html_path}",
        ]
        lines += [f"  error: {error}" for error in self.errors]
        return "\n".join(lines)


def run_demo(
    notebook: Optional[Path] = None,
    html_path: Optional[Path] = None,
    timeout: int = 600,
    kernel_name: str = "python3",
) -> DemoResult:
    """Execute `notebook` top to bottom in a fresh kernel; save outputs as HTML."""
    import nbformat
    from nbclient import NotebookClient
    from nbclient.exceptions import CellExecutionError

    notebook = Path(notebook or DEFAULT_NOTEBOOK).resolve()
    if not notebook.is_file():
        raise FileNotFoundError(f"no notebook at {notebook}")
    html_path = Path(html_path) if html_path else notebook.with_suffix(".html")
    nb = nbformat.read(str(notebook), as_version=4)
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    errors: list[str] = []
    started = time.perf_counter()
    try:
        client.execute()
    except CellExecutionError as error:
        errors.append(str(error).strip().splitlines()[-1] if str(error).strip() else repr(error))
    seconds = time.perf_counter() - started
    html_path.write_text(notebook_html(nb, title=notebook.name), encoding="utf-8")
    cells_run = sum(
        1 for cell in nb.cells if cell.cell_type == "code" and cell.get("execution_count")
    )
    return DemoResult(notebook, html_path, cells_run, seconds, errors)


def notebook_html(nb, title: str) -> str:
    """A self-contained HTML page of an executed notebook (sources escaped)."""
    esc = html.escape
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "pre{background:#f6f6f6;padding:.5em;overflow-x:auto}"
        ".out{border-left:3px solid #8a8;padding-left:.5em}.err{border-left-color:#c44}</style>",
        f"<h1>{esc(title)}</h1>",
    ]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(f"<div class='md'><pre>{esc(cell.source)}</pre></div>")
            continue
        if cell.cell_type != "code":
            continue
        count = cell.get("execution_count") or " "
        parts.append(f"<pre>In [{count}]: {esc(cell.source)}</pre>")
        for output in cell.get("outputs", []):
            parts.append(_output_html(output))
    return "\n".join(parts)


def _output_html(output) -> str:
    esc = html.escape
    kind = output.get("output_type")
    if kind == "stream":
        return f"<pre class='out'>{esc(output.get('text', ''))}</pre>"
    if kind == "error":
        trace = "\n".join(output.get("traceback", []))
        return f"<pre class='out err'>{esc(_strip_ansi(trace))}</pre>"
    data = output.get("data", {})
    if "text/html" in data:
        # HTML our own objects rendered (they escape every name themselves); the panel
        # widget brings a static copy of itself, so the page shows it, not a widget repr.
        return f"<div class='out'>{_joined(data['text/html'])}</div>"
    if "image/png" in data:
        return f"<img class='out' src='data:image/png;base64,{_joined(data['image/png'])}'>"
    if "application/json" in data:
        return f"<pre class='out'>{esc(json.dumps(data['application/json'], indent=1))}</pre>"
    return f"<pre class='out'>{esc(_joined(data.get('text/plain', '')))}</pre>"


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def _strip_ansi(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _positive_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a whole number of seconds > 0, got {text!r}")
    return value


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/demo.py",
        description="Execute notebooks/quickstart.ipynb top to bottom in a fresh kernel "
        "(every magic, on whatever hardware is here) and save the outputs as HTML.",
    )
    parser.add_argument("--notebook", metavar="PATH", help="another notebook to run")
    parser.add_argument(
        "--output", metavar="HTML", help="where to write the HTML (default: beside the notebook)"
    )
    parser.add_argument("--timeout", type=_positive_seconds, default=600, help="per cell")
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        result = run_demo(args.notebook, args.output, timeout=args.timeout)
    except (FileNotFoundError, ModuleNotFoundError) as error:
        sys.stderr.write(f"demo: {error}\n")
        return 1
    print(result)
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
