"""What gpu_reset did (or, for a dry run, would do): per device allocated/reserved and NVML
used before and after, the bytes freed, what was dropped, the notes and warnings, and the
leftovers still alive."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, NamedTuple, Optional

from ..leftovers import Leftover, LeftoverList
from ..leftovers.groups import ENTRIES_SHOWN, LeftoverGroups, group_leftovers
from ..leftovers.html import groups_html
from ..nvml import INCLUDES_RESERVED, V1
from ..units import counted, escape_html, escape_lines, format_bytes
from .free_hint import free_sets, shown_sets

# what the scan searched: installed packages' module globals (a library's cache) are not
NONE_NAMED = (
    "no arrays held by the notebook's variables, output history, last exception or your "
    "own modules (installed packages are not searched: find_leftovers(deep=True) looks "
    "everywhere)"
)
# a dry run's: the arrays are still there, and nothing would hold them afterwards
NONE_WOULD_STAY = (
    "none would stay held by the notebook's variables, output history, last exception or "
    "your own modules (installed packages are not searched: find_leftovers(deep=True) "
    "looks everywhere)"
)


class Wording(NamedTuple):
    """How a report words what it describes: a reset done, or a plan (a dry run). The
    amount is a ``str.format`` template over ``freed`` and ``expected``."""

    title: str
    dropped: str  # "dropped: 1 output history entry, 2 references to outputs"
    amount_text: str
    held: str  # "still held (3 MiB):"
    none_held: str
    stays: str  # "`model`: 2.00 MiB of its memory stays: still held by `alias`"
    free_it: str  # "to free {amount}it: %gpu_reset x" (amount: "", "3 MiB of ")
    all_none: str  # --all on a runtime where no variable holds GPU memory
    no_array: str  # a template over names, holds, them: named variables holding no array
    only_mapped: str  # a template over names, holds, them: ... holding only mapped files


# each field of the wording: (a reset done, a plan)
_WORDS = {
    "title": ("gpu_reset", "gpu_reset --dry-run (nothing changed)"),
    "dropped": ("dropped", "would drop"),
    "amount_text": ("freed: {freed} of {what}", "would free about {expected} of {what}"),
    "held": ("still", "would still be"),
    "none_held": (NONE_NAMED, NONE_WOULD_STAY),
    "stays": ("stays", "would stay"),
    "free_it": ("to free {amount}it", "to free {amount}that too"),
    "all_none": tuple(
        f"--all {verb} no variable: none holds GPU memory (tensors and arrays in host memory "
        "stay); to delete variables, name them: %gpu_reset NAME ..."
        for verb in ("deleted", "would delete")
    ),
    "no_array": (
        "{names} held no tensor or array: deleted as asked, which freed no memory",
        "{names} {holds} no tensor or array: deleting {them} would free no memory",
    ),
    "only_mapped": (
        "{names} held only files on disk mapped into memory: deleted as asked, which freed "
        "no memory the system does not free on its own",
        "{names} {holds} only files on disk mapped into memory: deleting {them} would free "
        "no memory the system does not free on its own",
    ),
}
DONE = Wording(**{name: words[0] for name, words in _WORDS.items()})
PLANNED = Wording(**{name: words[1] for name, words in _WORDS.items()})

# what `dropped` counts (its keys stay as they are: the JSON report uses them), in words
_DROPPED_WORDS = {
    "output history": ("output history entry", "output history entries"),
    # _, __, ___, _N, and the copies IPython's display hook and hidden namespace keep
    "output names": ("reference to an output", "references to outputs"),
    "last cell result": ("last cell result", "last cell results"),
    "exceptions": ("exception", "exceptions"),
    "traceback frames": ("traceback frame", "traceback frames"),
    "debugger": ("debugger session", "debugger sessions"),
    "user variables": ("variable", "variables"),
}
# a dropped name the user can type: Out[3], _, _7, model (not an internal label)
_TYPED_NAME = re.compile(r"Out\[\d+\]|[^\W\d]\w*")
NAMES_SHOWN = 20  # dropped names in the text view
# the default report's one phrase for the references to outputs it does not name
IPYTHONS_COPIES = "IPython's own copies of outputs"


HOST_LINE_MIN = 2**20  # a smaller fall of host memory is malloc's noise, not a release


@dataclass
class DeviceRelease:
    """torch's caching allocator on one device, before and after (bytes)."""

    device: str
    allocated_before: int
    reserved_before: int
    allocated_after: Optional[int] = None
    reserved_after: Optional[int] = None

    @property
    def freed(self) -> Optional[int]:
        if self.allocated_after is None:
            return None
        return self.allocated_before - self.allocated_after

    @property
    def released(self) -> Optional[int]:
        if self.reserved_after is None:
            return None
        return self.reserved_before - self.reserved_after


@dataclass
class ReleaseReport:
    """What ``gpu_reset`` dropped, freed, and found still held.

    dropped: counts by kind (output history entries, output names, last cell result,
        exceptions, traceback frames cleared, debugger, user variables).
    dropped_names: the names dropped (``Out[3]``, ``_``, ``model``, ``<exception ...>``).
    estimated_bytes: memory held only through what is (or would be) dropped, per the scan
        before; blocks also held from elsewhere are not counted.
    released_bytes: memory of the blocks seen before that are gone now (proven by weakrefs;
        0 for a dry run).
    freed_frameworks: the frameworks of those blocks ("torch", "numpy", ...: what the
        amount is "of"), of the estimated ones where none was released.
    devices: torch CUDA allocator figures per device; nvml_used_*: NVML used per GPU (all
        processes), from the memory call nvml_used_call names: "v2" (driver-reserved
        memory left out) or "v1" (included).
    host_in_use_before / host_in_use_after: malloc's in-use bytes (glibc) around the reset,
        None where glibc's figure is missing or for a dry run: what fell there, arrays the
        scan never saw included (a tensor in a reference cycle that gc.collect() freed).
    leftovers: what is still held afterwards (for a dry run: what would still be held);
        a `LeftoverList` from the scan, whose entries are made when read.
    """

    dry_run: bool = False  # set once, by the plan: the report describes that plan
    names: list[str] = field(default_factory=list)
    all_vars: bool = False
    dropped: dict[str, int] = field(default_factory=dict)
    dropped_names: list[str] = field(default_factory=list)
    estimated_bytes: int = 0
    released_bytes: int = 0
    freed_frameworks: list[str] = field(default_factory=list)
    devices: list[DeviceRelease] = field(default_factory=list)
    nvml_used_before: Optional[list[int]] = None
    nvml_used_after: Optional[list[int]] = None
    nvml_used_call: Optional[str] = None
    host_in_use_before: Optional[int] = None
    host_in_use_after: Optional[int] = None
    gc_collected: Optional[int] = None
    steps: list[str] = field(default_factory=list)
    cuda_state: str = "torch not imported"
    restart_required: bool = False
    leftovers: list[Leftover] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def wording(self) -> Wording:
        """The words for what this report describes: the one place ``dry_run`` is read."""
        return PLANNED if self.dry_run else DONE

    @property
    def freed_bytes(self) -> int:
        """Bytes torch's allocator no longer has allocated, else the released blocks."""
        freed = [device.freed for device in self.devices if device.freed is not None]
        return sum(freed) if freed else self.released_bytes

    def host_line(self) -> Optional[str]:
        """'host memory allocated: 612 MiB -> 592 MiB' where it fell by 1 MiB or more."""
        before, after = self.host_in_use_before, self.host_in_use_after
        if before is None or after is None or before - after < HOST_LINE_MIN:
            return None
        return f"host memory allocated: {format_bytes(before)} -> {format_bytes(after)}"

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def held_groups(self) -> LeftoverGroups:
        """``leftovers`` by the root holding them (`leftovers.groups`); worked out once per
        list (the text and the HTML view both show them)."""
        items = self.leftovers
        cached = self.__dict__.get("_held")
        if cached is not None and cached[0] is items:
            return cached[1]
        scanned = isinstance(items, LeftoverList)
        columns = items.columns() if scanned else None
        grown = items.grown_on_rerun if scanned else ()
        types = items.root_types if scanned else None
        groups = group_leftovers(items, ENTRIES_SHOWN, columns, types, grown_on_rerun=grown)
        if isinstance(items, LeftoverList):  # a list of entries may change in place
            self.__dict__["_held"] = (items, groups)
        return groups

    def to_dict(self) -> dict[str, Any]:
        data = asdict(replace(self, leftovers=[]))
        data["leftovers"] = [item.to_dict() for item in self.leftovers]
        data["freed_bytes"] = self.freed_bytes
        data["held_groups"] = [group.to_dict() for group in self.held_groups()]
        return data

    def dropped_counts(self, verbose: bool = False) -> list[str]:
        """'1 output history entry', '2 references to outputs', '1 exception', ...: what
        ``dropped`` counts, in words. By default the references to outputs are those the
        names line shows (``_``, ``_7``), and the copies IPython keeps on its own (the
        display hook's and hidden namespace's, the last cell's result) are one phrase at
        the end; `verbose` counts each kind as ``dropped`` does."""
        counts = dict(self.dropped)
        own_copies = False
        if not verbose:
            # `_`, `__`, `___`, `_N`: the typed names neither Out[N] entries nor variables
            typed = len(self.typed_names()) - counts.get("output history", 0)
            typed -= counts.get("user variables", 0)
            outputs = counts.get("output names", 0)
            last_result = counts.pop("last cell result", 0)
            own_copies = outputs > typed or last_result > 0
            counts["output names"] = min(typed, outputs)
        texts = []
        for kind, count in counts.items():
            if count > 0:
                one, many = _DROPPED_WORDS.get(kind, (kind, kind))
                texts.append(counted(count, one, many))
        if own_copies:
            texts.append(IPYTHONS_COPIES)
        return texts

    def typed_names(self) -> list[str]:
        """The dropped names a user can type (``Out[3]``, ``_``, ``_7``, ``model``), in
        order; the rest of ``dropped_names`` are IPython's and Python's own references."""
        return [name for name in self.dropped_names if _TYPED_NAME.fullmatch(name)]

    def free_hint(self, verbose: bool = False) -> Optional[str]:
        """'to free it: %gpu_reset x y (deletes those variables)': the user's variables
        still holding memory, whole sets of names sharing memory (`free_hint.free_sets`),
        biggest first, as many as a copyable line holds (all where `verbose`); the bytes
        where the command frees less than is held, and how many variables it leaves out;
        None when deleting variables frees nothing listed."""
        if not self.leftovers:
            return None
        items = self.leftovers
        columns = items.columns() if isinstance(items, LeftoverList) else None
        order = [group.name for group in self.held_groups()]
        sets = free_sets(items, columns, order)
        if not sets:
            return None
        shown = len(sets) if verbose else shown_sets(sets)
        names = [name for group in sets[:shown] for name in group.names]
        freed = sum(group.nbytes for group in sets[:shown])
        amount = "" if freed >= self.held_groups().total_bytes else f"{format_bytes(freed)} of "
        which = "that variable" if len(names) == 1 else "those variables"
        text = (
            f"{self.wording.free_it.format(amount=amount)}: %gpu_reset {' '.join(names)} "
            f"(deletes {which})"
        )
        rest = sets[shown:]
        if rest:
            count = sum(len(group.names) for group in rest)
            held = format_bytes(sum(group.nbytes for group in rest))
            text += (
                f"; {counted(count, 'more variable')} {'holds' if count == 1 else 'hold'} "
                f"{held} (%gpu_reset --dry-run -v names them)"
            )
        return text

    def to_text(self, verbose: bool = False) -> str:
        """The report as text: what was dropped and freed, by the figures torch and NVML
        give, what is still held by name and how to free it. `verbose` adds what the
        reset did inside (the figure it expected, the garbage collector's count, every
        reference dropped)."""
        words = self.wording
        lines = [words.title]
        counts = self.dropped_counts(verbose)
        lines.append(f"  {words.dropped}: {', '.join(counts) if counts else 'nothing'}")
        typed = self.typed_names()
        if typed:
            shown = typed[:NAMES_SHOWN]
            more = len(typed) - len(shown)
            lines.append(f"  names: {', '.join(shown)}" + (f" (+{more} more)" if more > 0 else ""))
        if self._has_amount(counts):
            lines.append(f"  {self._amount_text(format_bytes)}")
        lines += [f"  {line}" for line in self._figure_lines()]
        if verbose:
            lines += [f"  {line}" for line in self._verbose_lines(typed)]
        lines += [f"  done: {step}" for step in self.steps]
        for warning in self.warnings:
            lines.append(f"  WARNING: {warning}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.leftovers:
            groups = self.held_groups()
            lines.append(f"  {words.held} held ({format_bytes(groups.total_bytes)}):")
            lines += [f"    {line}" for line in groups.lines(groups=8, entries=2)]
            hint = self.free_hint(verbose)
            if hint is not None:
                lines.append(f"  {hint}")
        else:
            lines.append(f"  {words.none_held}")
        return escape_lines(lines)  # names in it are the user's: no control character

    def __str__(self) -> str:
        return self.to_text()

    def _figure_lines(self) -> list[str]:
        """torch's allocator figures per device and NVML's used memory per GPU."""
        lines = []
        for device in self.devices:
            if device.allocated_after is None:
                lines.append(
                    f"{device.device}: allocated {format_bytes(device.allocated_before)}, "
                    f"reserved {format_bytes(device.reserved_before)}"
                )
            else:
                lines.append(
                    f"{device.device}: allocated {format_bytes(device.allocated_before)} -> "
                    f"{format_bytes(device.allocated_after)}, reserved "
                    f"{format_bytes(device.reserved_before)} -> "
                    f"{format_bytes(device.reserved_after)}"
                )
        host = self.host_line()
        if host is not None:
            lines.append(host)
        if self.nvml_used_before is not None:
            after = self.nvml_used_after or [None] * len(self.nvml_used_before)
            for index, (before, now) in enumerate(zip(self.nvml_used_before, after)):
                text = f"GPU {index} (NVML, all processes): used {format_bytes(before)}"
                if now is not None:
                    text += f" -> {format_bytes(now)}"
                if self.nvml_used_call == V1:
                    text += f" ({INCLUDES_RESERVED})"
                lines.append(text)
        return lines

    def _verbose_lines(self, typed: list[str]) -> list[str]:
        """What -v adds: the figure the scan expected, the references dropped that have no
        name a user types, and the garbage collector's count."""
        lines = []
        if not self.dry_run:
            lines.append(
                f"expected to free: {format_bytes(self.estimated_bytes)} (the "
                f"{_what_freed(self.freed_frameworks)} only "
                "the dropped references reached, found before the reset)"
            )
        others = len(self.dropped_names) - len(typed)
        if others:
            what = "reference" if others == 1 else "references"
            lines.append(
                f"also {self.wording.dropped}: {others} {what} IPython or Python keeps on its "
                "own (of these kinds: IPython's copies of _, the last cell result, the last "
                "exception, the debugger's frames)"
            )
        if self.gc_collected is not None:
            lines.append(
                f"Python's garbage collector found {self.gc_collected} unreachable objects"
            )
        return lines

    def _has_amount(self, counts: list[str]) -> bool:
        """Whether the amount line says anything: 'dropped: nothing' and 'freed: 0 B' say
        the same, so the second goes where nothing was dropped, freed or expected (the
        garbage collector may free a cycle with nothing dropped: then it stays)."""
        return bool(counts or self.released_bytes or self.estimated_bytes)

    def _amount_text(self, shown: Callable[[int], str]) -> str:
        """'freed: 4 MiB of tensors' (', of 8 MiB expected' where less went than the scan
        expected), or the dry run's 'would free about 4 MiB of tensors'."""
        text = self.wording.amount_text.format(**self._amounts(shown))
        if not self.dry_run and self.released_bytes < self.estimated_bytes:
            text += f", of {shown(self.estimated_bytes)} expected"
        return text

    def _repr_pretty_(self, printer, cycle) -> None:
        printer.text(str(self))

    def _repr_html_(self) -> str:
        esc = escape_html
        words = self.wording
        counts = self.dropped_counts()
        items = [f"<li>{words.dropped}: {esc(', '.join(counts) if counts else 'nothing')}</li>"]
        typed = self.typed_names()
        if typed:
            names = ", ".join(f"<code>{esc(name)}</code>" for name in typed[:50])
            items.append(f"<li>names: {names}</li>")
        if self._has_amount(counts):
            amount = self._amount_text(lambda amount: esc(format_bytes(amount)))
            items.append(f"<li>{amount}</li>")
        items += [f"<li>{esc(line)}</li>" for line in self._figure_lines()]
        items += [f"<li>done: {esc(step)}</li>" for step in self.steps]
        items += [f"<li><b>warning</b>: {esc(text)}</li>" for text in self.warnings]
        items += [f"<li>note: {esc(text)}</li>" for text in self.notes]
        if self.leftovers:
            hint = self.free_hint()
            held = f"<div>{esc(words.held)} held:</div>{groups_html(self.held_groups())}"
            held += f"<div>{esc(hint)}</div>" if hint is not None else ""
        else:
            held = f"<div>{esc(words.none_held)}</div>"
        return f"<div><b>{esc(words.title)}</b><ul>{''.join(items)}</ul>{held}</div>"

    def _amounts(self, shown: Callable[[int], str]) -> dict[str, str]:
        """The figures the wording's amount templates name, each as `shown` writes it."""
        return {
            "freed": shown(self.released_bytes),
            "expected": shown(self.estimated_bytes),
            "what": _what_freed(self.freed_frameworks),
        }


def _what_freed(frameworks: list[str]) -> str:
    """What the amount freed is memory of: "tensors" (torch's, or none), "arrays" (NumPy's,
    pandas', CuPy's, ...), or both."""
    tensors = not frameworks or "torch" in frameworks
    arrays = any(kind != "torch" for kind in frameworks)
    return "tensors and arrays" if tensors and arrays else "tensors" if tensors else "arrays"
