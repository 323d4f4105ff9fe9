"""What seed_all did, as a report: the RNGs seeded and skipped, the flags and env vars it
changed, its notes and warnings."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional


@dataclass
class SeededRng:
    name: str
    version: str
    how: str


@dataclass
class SkippedRng:
    name: str
    reason: str


@dataclass
class Change:
    """A flag or environment variable this call changed."""

    name: str
    old: Optional[str]
    new: Optional[str]
    kind: str  # "env" or "flag"


@dataclass
class SeedReport:
    seed: int
    seed_source: str  # "given" or "drawn from the OS"
    seeded: list[SeededRng] = field(default_factory=list)
    skipped: list[SkippedRng] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    deterministic: bool = False
    every_cell: Optional[bool] = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def __str__(self) -> str:
        lines = [f"seed_all: seed {self.seed} ({self.seed_source})"]
        if self.seed_source != "given":
            lines[0] += f" - rerun with %seed_all {self.seed} to reproduce this run"
        for rng in self.seeded:
            lines.append(f"  seeded   {rng.name} {rng.version}: {rng.how}")
        for rng in self.skipped:
            lines.append(f"  skipped  {rng.name}: {rng.reason}")
        for change in self.changes:
            lines.append(f"  set      {change.name}: {_show(change.old)} -> {_show(change.new)}")
        if self.every_cell is not None:
            lines.append(f"  every cell: {'reseeded' if self.every_cell else 'off'}")
        for note in self.notes:
            lines.append(f"  note     {note}")
        for warning in self.warnings:
            lines.append(f"  WARNING  {warning}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        import html

        esc = html.escape
        rows = [
            f"<tr><td>seeded</td><td>{esc(r.name)} {esc(r.version)}</td><td>{esc(r.how)}</td></tr>"
            for r in self.seeded
        ]
        rows += [
            f"<tr><td>skipped</td><td>{esc(r.name)}</td><td>{esc(r.reason)}</td></tr>"
            for r in self.skipped
        ]
        rows += [
            f"<tr><td>set</td><td>{esc(c.name)}</td>"
            f"<td>{esc(_show(c.old))} &rarr; {esc(_show(c.new))}</td></tr>"
            for c in self.changes
        ]
        rows += [f"<tr><td>note</td><td colspan=2>{esc(n)}</td></tr>" for n in self.notes]
        rows += [
            f"<tr><td><b>warning</b></td><td colspan=2>{esc(w)}</td></tr>" for w in self.warnings
        ]
        return (
            f"<div><b>seed_all</b>: seed <code>{self.seed}</code> ({esc(self.seed_source)})"
            f"<table>{''.join(rows)}</table></div>"
        )


def _show(value: Optional[str]) -> str:
    return "(unset)" if value is None else repr(value)
