"""Past rerun leaks as `%gpu_reset` and the CUDA advisor recall them: each flagged cell with
the holders its LEAK line named that still hold something now, and the cells whose named
holders are all gone.

A LEAK line names what held the previous run's objects when the rerun was judged
(`rerun_holders.Holding.text`): ```losses`` (grew by 5 autograd graphs, 480 MiB saved)`,
```Out[7]`` (output history)`, a failed run's traceback locals. Recalled later, a holder
the user deleted, an output entry or a traceback a reset dropped, holds nothing any more:
naming it would send the user after something that is gone. A name counts as there while
the notebook still binds it (what it holds now is the leftovers list's business), an
output entry while the output history has it, traceback locals while the process keeps an
error (a dry run changed nothing: what it recalls is as it was). A LEAK line whose holders
held little of what the rerun kept (`rerun_holders.Holding.named`: it ends "the rest by
something else") is recalled with no holder: none of them is what held the memory.

The tracker keeps no reference to what a flagged run kept, so the recall cannot tell that
memory is still held: it says which cells were flagged, as history, and which of them had
every holder their line named gone since.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Optional

from .. import notebook_refs
from . import tracker as _tracker
from .rerun_holders import UNEXPLAINED

_OUT = re.compile(r"Out\[(\d+)\]")


def holder_items(text: str) -> list[str]:
    """The holders one LEAK line names, one string each (`Holding.text` joins them with
    ", "; a holder's own commas are inside its parentheses, and a traceback's labels,
    each "<...>", come before the one parenthesis that says why they are alive; a line's
    "the rest by something else" names no holder)."""
    text = text.removesuffix(UNEXPLAINED)
    items: list[str] = []
    depth = start = 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif depth == 0 and text.startswith(", ", index):
            items.append(text[start:index])
            start = index + 2
    items.append(text[start:])
    joined: list[str] = []
    for item in items:
        if joined and joined[-1].startswith("<") and joined[-1].endswith(">"):
            joined[-1] += ", " + item  # a traceback label before its siblings' reason
        else:
            joined.append(item)
    return [item for item in joined if item]


def still_there(shell: Any, namespace: dict, errors_kept: bool) -> Callable[[str], bool]:
    """Whether a holder a LEAK line named is still there (see the module)."""
    outputs = notebook_refs.output_history(shell)

    def there(item: str) -> bool:
        if item.startswith("`"):
            name = item[1:].split("`", 1)[0]
            cell = _OUT.fullmatch(name)
            if cell is not None:
                return int(cell.group(1)) in outputs
            return name in namespace
        return errors_kept  # a failed run's traceback locals

    return there


def _shown(there: Optional[Callable[[str], bool]]) -> Callable[[str], str]:
    """What of a LEAK line's holders a recall names: those still there (all where `there`
    is None), none of a line whose holders held little of the memory."""

    def shown(text: str) -> str:
        if text.endswith(UNEXPLAINED):
            return ""
        return ", ".join(item for item in holder_items(text) if there is None or there(item))

    return shown


def _there(shell: Any, namespace: dict) -> Callable[[str], bool]:
    return still_there(shell, namespace, bool(notebook_refs.held_exceptions(shell)[0]))


def holders_now(
    leaks: list[_tracker.CellMemory], shell: Any, namespace: dict, dry_run: bool = False
) -> list[tuple[str, str]]:
    """`tracker.leaks_by_holder` of `leaks`, each LEAK line's holders kept only where they
    are still there; a dry run recalls them all."""
    there = None if dry_run else _there(shell, namespace)
    return _tracker.leaks_by_holder(leaks, _shown(there))


def history_note(shell: Any, namespace: dict, dry_run: bool) -> Optional[str]:
    """The reset's note on the cells flagged for keeping memory again when rerun, naming
    what still holds it (the last three holders) and the cells whose named holders are all
    gone, or None when no rerun was flagged."""
    leaks = _tracker.rerun_leaks(_tracker.memory_history(shell))
    if not leaks:
        return None
    cells = ", ".join(f"[{record.cell}]" for record in leaks[-10:])
    note = f"cells flagged for keeping memory again when rerun: {cells} (see %gpu_history)"
    there = None if dry_run else _there(shell, namespace)
    # each holder named once, after all the cells it held memory for
    pairs = _tracker.leaks_by_holder(leaks, _shown(there))
    held = [f"{cells} {holder}" for cells, holder in pairs if holder][-3:]
    if held:
        note += "; held by: " + "; ".join(held)
    if there is not None:
        gone = [
            f"[{record.cell}]"
            for record in leaks[-10:]
            if _shown(None)(record.held_by) and not _shown(there)(record.held_by)
        ]
        if gone:
            note += (
                f"; what %gpu_history named as holding the memory of {', '.join(gone)} is gone now"
            )
    return note
