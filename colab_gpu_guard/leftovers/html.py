"""The one leftovers table renderer (HTML); every name in it is escaped."""

from __future__ import annotations

import html
from collections.abc import Iterable

from ..units import format_bytes


def leftovers_html(items: Iterable, gaps: Iterable = (), notes: Iterable[str] = ()) -> str:
    """An HTML table of leftovers; every name is escaped."""
    esc = html.escape
    rows = []
    for item in items:
        shape = esc("x".join(str(size) for size in item.shape) or "scalar")
        rows.append(
            f"<tr><td>{esc(format_bytes(item.nbytes))}</td><td><code>{esc(item.name)}</code>"
            f"</td><td>{esc(item.holder)}</td><td>{esc(item.dtype)} [{shape}]</td>"
            f"<td>{esc(item.device)}</td><td>{esc(', '.join(item.shared_with))}</td></tr>"
        )
    if not rows:
        rows.append("<tr><td colspan=6>no arrays held</td></tr>")
    extra = "".join(f"<li>{esc(str(gap))}</li>" for gap in gaps)
    extra += "".join(f"<li>{esc(note)}</li>" for note in notes)
    return (
        "<table><tr><th>bytes</th><th>name</th><th>holder</th><th>array</th>"
        f"<th>device</th><th>shared with</th></tr>{''.join(rows)}</table>"
        + (f"<ul>{extra}</ul>" if extra else "")
    )
