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
        state = (
            "ok"
            if self.ok
            else f"FAILED ({len(self.errors)} {'error' if len(self.errors) == 1 else 'errors'})"
        )
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
    """A self-contained HTML page of an executed notebook: markdown cells rendered,
    sources and text outputs escaped."""
    esc = html.escape
    parts = [
        "<!doctype html><meta charset='utf-8'>",
        f"<title>{esc(title)}</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "pre{background:#f6f6f6;padding:.5em;overflow-x:auto}"
        ".out{border-left:3px solid #8a8;padding-left:.5em}.err{border-left-color:#c44}"
        "code{background:#f0f0f0;padding:0 .2em}"
        # The panel's static copy keeps each line to one line, cut with an ellipsis where
        # it is wider than its box (right for the live widget, whose tooltips show the
        # rest); a page has no tooltips, so its lines wrap here and every figure shows.
        ".cgg-static [style*=ellipsis]{white-space:normal!important;overflow:visible!important}"
        "</style>",
        f"<h1>{esc(title)}</h1>",
    ]
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(f"<div class='md'>{markdown_html(cell.source)}</div>")
            continue
        if cell.cell_type != "code":
            continue
        count = cell.get("execution_count") or " "
        parts.append(f"<pre>In [{count}]: {esc(cell.source)}</pre>")
        for output in cell.get("outputs", []):
            parts.append(_output_html(output))
    return "\n".join(parts)


_BLOCK_START = re.compile(r"(#{1,6}) |[-*] |\d+\. |```")
_INLINE = re.compile(
    r"`(?P<code>[^`]+)`"
    r"|\*\*(?P<bold>.+?)\*\*"
    r"|(?<![\w*])\*(?P<em>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])"
    r"|\[(?P<text>[^\]]+)\]\((?P<url>[^)\s]+)\)"
)


def markdown_html(text: str) -> str:
    """The markdown the notebooks use, as HTML: headings, paragraphs, `-`/`*` and
    numbered lists, fenced code, and inline code, bold, italics and links. Every piece of
    text is escaped; anything else shows as plain text."""
    lines = text.splitlines()
    out: list[str] = []
    paragraph: list[str] = []
    items: list[str] = []
    list_tag = ""

    def close() -> None:
        nonlocal list_tag
        if paragraph:
            out.append(f"<p>{_inline_html(' '.join(paragraph))}</p>")
            paragraph.clear()
        if items:
            out.append(f"<{list_tag}>" + "".join(f"<li>{item}</li>" for item in items))
            out.append(f"</{list_tag}>")
            items.clear()

    index = 0
    while index < len(lines):
        line = lines[index].strip()
        index += 1
        start = _BLOCK_START.match(line)
        if not line:
            close()
        elif line.startswith("```"):
            close()
            code = []
            while index < len(lines) and not lines[index].strip().startswith("```"):
                code.append(lines[index])
                index += 1
            index += 1  # the closing fence
            out.append(f"<pre>{html.escape(chr(10).join(code))}</pre>")
        elif start and start.group(1):
            close()
            level = len(start.group(1))
            out.append(f"<h{level}>{_inline_html(line[start.end() :])}</h{level}>")
        elif start:
            tag = "ol" if line[0].isdigit() else "ul"
            if paragraph or (items and tag != list_tag):
                close()
            list_tag = tag
            items.append(_inline_html(line[start.end() :]))
        elif items:  # a list item's continuation line
            items[-1] += " " + _inline_html(line)
        else:
            paragraph.append(line)
    close()
    return "\n".join(out)


def _inline_html(text: str) -> str:
    parts, end = [], 0
    for match in _INLINE.finditer(text):
        parts.append(html.escape(text[end : match.start()]))
        end = match.end()
        if match.group("code") is not None:
            parts.append(f"<code>{html.escape(match.group('code'))}</code>")
        elif match.group("bold") is not None:
            parts.append(f"<b>{_inline_html(match.group('bold'))}</b>")
        elif match.group("em") is not None:
            parts.append(f"<i>{_inline_html(match.group('em'))}</i>")
        else:
            url = match.group("url")
            safe = url if re.match(r"(https?://|[\w./#-]+$)", url) else "#"
            parts.append(f'<a href="{html.escape(safe)}">{_inline_html(match.group("text"))}</a>')
    parts.append(html.escape(text[end:]))
    return "".join(parts)


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
