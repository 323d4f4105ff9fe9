"""What seed_all did, as a report: the RNGs seeded and skipped, the flags and env vars it
changed, the precision in force, its notes and warnings. `summary()` is the one line
%seed_all prints (warnings on lines of their own); `str()` is the full report."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Optional

from ..units import escape_html, escape_lines
from .precision import PrecisionReport

# Seeded RNGs' names, shortened for the one-line summary; PyTorch's devices group as torch (...).
_SHORT = {"Python random": "random", "NumPy": "numpy", "TensorFlow": "tensorflow", "CuPy": "cupy"}
# Skips the summary leaves out: "torch (cpu)" already says there is no CUDA to seed.
_IMPLIED_SKIPS = {"this torch build has no CUDA", "no CUDA device visible"}


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
    warn_only: bool = False
    strict: bool = False
    modes_kept: bool = False  # no mode named: those in force were kept
    every_cell: Optional[bool] = None  # True: reseeding every cell from this seed
    rank: Optional[int] = None  # per_rank: this process's rank, added to base_seed
    base_seed: Optional[int] = None  # per_rank: the seed given, before the rank was added
    precision: Optional[PrecisionReport] = None  # under deterministic mode, with torch

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def command(self) -> str:
        """The magic that does again what this call did: the seed with the modes in force
        (written out: in a fresh runtime no mode is on to keep)."""
        parts = [f"%seed_all {self.seed}"]
        if self.deterministic and not (self.warn_only or self.strict):
            parts.append("--deterministic")
        if self.warn_only:
            parts.append("--warn-only")
        if self.strict:
            parts.append("--strict")
        if self.every_cell:
            parts.append("--every-cell")
        return " ".join(parts)

    def seeded_words(self) -> str:
        names, torch_parts = [], []
        for rng in self.seeded:
            if rng.name.startswith("PyTorch "):
                part = rng.name[len("PyTorch ") :].lower()
                if torch_parts == []:
                    names.append("torch")
                torch_parts.append(part.replace(" devices)", ")").replace(" device)", ")"))
            else:
                names.append(_SHORT.get(rng.name, rng.name))
        if torch_parts:
            names[names.index("torch")] = f"torch ({', '.join(torch_parts)})"
        return ", ".join(names)

    def skipped_words(self) -> str:
        return ", ".join(
            f"{rng.name} ({rng.reason.split(':')[0]})"
            for rng in self.skipped
            if rng.reason not in _IMPLIED_SKIPS
        )

    def mode_words(self) -> str:
        if not self.deterministic:
            return "deterministic off"
        if self.precision is None:  # set only where torch was there to switch
            kept = " (kept)" if self.modes_kept else ""
            return f"deterministic requested{kept}: no torch, so no torch flags were set"
        how = [
            word for word, on in (("warn-only", self.warn_only), ("kept", self.modes_kept)) if on
        ]
        words = "deterministic on" + (f" ({', '.join(how)})" if how else "")
        clause = self.precision.clause()
        return f"{words}, {clause}" if clause else words

    def summary(self) -> str:
        """One line (warnings that need action on lines of their own), escaped."""
        return escape_lines([self.summary_line()] + [f"  WARNING  {w}" for w in self.warnings])

    def summary_line(self) -> str:
        """The summary's one line, as written (a view escapes it)."""
        line = f"seed {self.seed}"
        if self.rank is not None:
            line += f" ({self.base_seed} + rank {self.rank})"
        if self.seed_source != "given":
            line += f" (drawn from the OS: {self.command()} reproduces this run)"
        line += f": {self.seeded_words()} seeded"
        skipped = self.skipped_words()
        if skipped:
            line += f"; not seeded: {skipped}"
        line += f"; {self.mode_words()}"
        if self.every_cell is not None:
            line += (
                f"; every cell reseeded from {self.seed}"
                if self.every_cell
                else "; per-cell reseeding off"
            )
        return line

    def __str__(self) -> str:
        lines = [f"seed_all: seed {self.seed} ({self.seed_source})"]
        if self.rank is not None:
            lines[0] += f": {self.base_seed} + this process's rank {self.rank}"
        if self.seed_source != "given":
            lines[0] += f" - rerun with {self.command()} to reproduce this run"
        for rng in self.seeded:
            lines.append(f"  seeded   {rng.name} {rng.version}: {rng.how}")
        for rng in self.skipped:
            lines.append(f"  skipped  {rng.name}: {rng.reason}")
        for change in self.changes:
            lines.append(f"  set      {change.name}: {_show(change.old)} -> {_show(change.new)}")
        lines.append(f"  modes    {self.mode_words()}")
        if self.every_cell is not None:
            every = f"reseeded from (seed {self.seed}, the cell's source)"
            lines.append(f"  every cell: {every if self.every_cell else 'off'}")
        lines += [f"  precision {line}" for line in self.precision_lines()]
        for note in self.notes:
            lines.append(f"  note     {note}")
        for warning in self.warnings:
            lines.append(f"  WARNING  {warning}")
        return escape_lines(lines)  # a framework's error, an environment variable: escaped

    def precision_lines(self) -> list[str]:
        """The float32 precision in force under deterministic mode: torch's three settings
        a user sets (the fp32_precision settings they resolve to are left out: the "set"
        lines name those this call changed), then what they mean on this machine."""
        if self.precision is None:
            return []
        flags = self.precision.flags.items()
        settings = [f"{name} = {value}" for name, value in flags if "fp32_precision" not in name]
        return settings + [self.precision.meaning()]

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # the report as text, not the dataclass repr

    def _repr_html_(self) -> str:
        esc = escape_html
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
        rows += [
            f"<tr><td>precision</td><td colspan=2>{esc(line)}</td></tr>"
            for line in self.precision_lines()
        ]
        rows += [f"<tr><td>note</td><td colspan=2>{esc(n)}</td></tr>" for n in self.notes]
        shown = "".join(f"<div><b>warning</b>: {esc(w)}</div>" for w in self.warnings)
        return (
            f"<div><b>seed_all</b>: {esc(self.summary_line())}{shown}"
            '<details><summary style="cursor:pointer">full report</summary>'
            f"<table>{''.join(rows)}</table></details></div>"
        )


def _show(value: Optional[str]) -> str:
    return "(unset)" if value is None else repr(value)
