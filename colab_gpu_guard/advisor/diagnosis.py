"""The diagnosis of a CUDA error, and `classify`: a Diagnosis from the exception alone.

``classify(exc)`` reads an exception (its type and message, walking ``__cause__`` and
``__context__``) and returns a :class:`Diagnosis` built from the message alone, or ``None``
for anything that is not a recognised CUDA error. It makes no CUDA or NVML call.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Optional

from .. import notebook_refs
from ..units import escape_html, escape_lines
from .fixes import BUILDERS
from .kinds import STICKY_ERROR, TITLES
from .recognise import child_process, first_line, recognise


@dataclass(frozen=True)
class Section:
    """An extra part of an answer, shown after the facts under its own title: what another
    room learns about the failure: the memory trace adds one to an out-of-memory answer,
    one line per source line whose memory was alive when CUDA ran out."""

    title: str
    lines: list[str]


@dataclass
class Diagnosis:
    """What went wrong, the facts that show it, and what to do. `sections` holds optional
    extra parts (`Section`) an enricher adds; none by default."""

    kind: str
    summary: str
    facts: dict[str, str] = field(default_factory=dict)
    fixes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str = ""  # "ExceptionType: first line of the message"
    restart_required: bool = False
    frames_released: int = 0  # function frames of the traceback cleared (advise)
    frames_released_bytes: int = 0  # bytes of arrays that clearing them freed (weakrefs)
    details: dict[str, Any] = field(default_factory=dict)  # parsed values (bytes, pids, ...)
    sections: list[Section] = field(default_factory=list)  # extra parts, after the facts

    @property
    def title(self) -> str:
        return TITLES.get(self.kind, self.kind)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["title"] = self.title
        return data

    def __str__(self) -> str:
        lines = [f"CUDA advisor: {self.title}", f"  {self.summary}"]
        if self.facts:
            width = min(max(len(label) for label in self.facts), 28)
            for label, value in self.facts.items():
                lines.append(f"  {label:<{width}}  {value}")
        for section in self.sections:
            lines.append(f"{section.title}:")
            lines.extend(f"  {line}" for line in section.lines)
        if self.fixes:
            lines.append("What to do:")
            for number, fix in enumerate(self.fixes, 1):
                lines.append(f"  {number}. {fix}")
        for note in self.notes:
            lines.append(f"Note: {note}")
        lines.append("(%gpu_advice off turns these notes off)")
        return escape_lines(lines)  # process names, a child's message: escaped

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td style='padding:0 8px 0 0;color:#555'>{escape_html(label)}</td>"
            f"<td style='padding:0'>{_inline_code(value)}</td></tr>"
            for label, value in self.facts.items()
        )
        sections = "".join(
            f"<b>{escape_html(section.title)}</b><div style='margin:2px 0 4px 12px'>"
            + "<br>".join(_inline_code(line) for line in section.lines)
            + "</div>"
            for section in self.sections
        )
        fixes = "".join(f"<li>{_inline_code(fix)}</li>" for fix in self.fixes)
        notes = "".join(
            f"<div style='color:#555;margin-top:4px'>{_inline_code(note)}</div>"
            for note in self.notes
        )
        colour = "#d9534f" if self.restart_required else "#f0ad4e"
        return (
            f"<div class='colab-gpu-guard-advice' style='border-left:4px solid {colour};"
            "padding:4px 10px;margin:6px 0;font-size:13px;line-height:1.4'>"
            f"<b>CUDA advisor: {escape_html(self.title)}</b>"
            f"<div>{_inline_code(self.summary)}</div>"
            + (f"<table style='margin:4px 0;font-size:12px'>{rows}</table>" if rows else "")
            + sections
            + (f"<b>What to do</b><ol style='margin:2px 0'>{fixes}</ol>" if fixes else "")
            + notes
            + "<div style='color:#888;font-size:11px'>%gpu_advice off turns these notes off"
            "</div></div>"
        )


def _inline_code(text: str) -> str:
    """Escape `text` for HTML, then show `backticked` spans as code."""
    escaped = escape_html(text)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


# ---------------------------------------------------------------- classify (pure)


def classify(exc: BaseException) -> Optional[Diagnosis]:
    """A Diagnosis from the exception's type and message alone (walking its __cause__ and
    __context__ chain), or None if it is not a recognised CUDA error. Never raises, makes
    no CUDA or NVML call."""
    try:
        links = list(notebook_refs.exception_chain(exc))
        for link in links:
            found = recognise(link.exception)
            if found is not None:
                found.details["found_in"] = link.via
                child = next(filter(None, (child_process(item.exception) for item in links)), None)
                if child is not None:  # another process's error, raised again here
                    found.details["child"] = child
                    if found.kind == STICKY_ERROR:
                        found.details["origin"] = "child"
                return _build(found.kind, found.details, link.exception)
    except Exception:  # a user's exception and its chain: classify never raises
        return None
    return None


def rebuild(diagnosis: Diagnosis, **details: Any) -> Diagnosis:
    """The same error diagnosed again with `details` only this process knows (advise uses
    it when a sticky error turns out not to be this process's)."""
    merged = {**diagnosis.details, **details}
    advice = BUILDERS[diagnosis.kind](merged)
    return replace(
        diagnosis,
        **advice._asdict(),
        notes=list(diagnosis.notes),
        details=merged,
        sections=list(diagnosis.sections),
    )


def _build(kind: str, details: dict[str, Any], exc: BaseException) -> Diagnosis:
    advice = BUILDERS[kind](details)
    error = first_line(exc)
    details.pop("message", None)
    return Diagnosis(**advice._asdict(), error=error, details=dict(details))
