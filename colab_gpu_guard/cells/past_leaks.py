"""Past rerun leaks as `%gpu_reset` and the CUDA advisor recall them: each flagged cell
with the holders its LEAK line named that still hold something now, and the cells whose
named holders are all gone (see docs/cells.md, "Past leaks")."""

from __future__ import annotations

import sys
from collections.abc import Collection
from typing import Any, Callable, Optional

from .. import notebook_refs
from . import tracker as _tracker
from .history_text import holder_words
from .rerun_holders import CACHE, CYCLE, OUTPUT, VARIABLE, Holder


def still_there(shell: Any, namespace: dict, errors_kept: bool) -> Callable[[Holder], bool]:
    """Whether a holder a LEAK line named is still there: a variable while the notebook
    binds its name (what it holds now is the leftovers list's business), an output entry
    while the output history has it, traceback locals while the process keeps an error
    (`errors_kept`)."""
    outputs = notebook_refs.output_history(shell)

    def there(holder: Holder) -> bool:
        if holder.kind in (VARIABLE, CACHE):
            # `trainer.history`, `nbutils._cache`: while what it is reached from is
            root = holder.name.partition(".")[0]
            return root in namespace or (root != holder.name and root in sys.modules)
        if holder.kind == OUTPUT:
            return holder.cell in outputs
        if holder.kind == CYCLE:
            return False  # garbage: the collector may have freed it since (a reset has)
        return errors_kept  # a failed run's traceback locals

    return there


def _shown(there: Optional[Callable[[Holder], bool]]) -> Callable[[_tracker.CellMemory], str]:
    """What of a LEAK line's holders a recall names, in words: those still there (all
    where `there` is None); none of a line whose holders held little of the memory (none
    of them is what held it)."""

    def shown(record: _tracker.CellMemory) -> str:
        if not record.explained:
            return ""
        return ", ".join(
            holder_words(holder) for holder in record.holders if there is None or there(holder)
        )

    return shown


def _there(shell: Any, namespace: dict) -> Callable[[Holder], bool]:
    from ..notebook_refs.roots import users_exceptions  # the user's: not our UsageError

    return still_there(shell, namespace, bool(users_exceptions(shell)[0]))


def holders_now(
    leaks: list[_tracker.CellMemory], shell: Any, namespace: dict, dry_run: bool = False
) -> list[tuple[str, str]]:
    """`tracker.leaks_by_holder` of `leaks`, each LEAK line's holders kept only where they
    are still there; a dry run (it changed nothing) recalls them all."""
    there = None if dry_run else _there(shell, namespace)
    return _tracker.leaks_by_holder(leaks, _shown(there))


def history_note(
    shell: Any, namespace: dict, dry_run: bool, settled: Collection[int] = ()
) -> Optional[str]:
    """The reset's note on the cells flagged for keeping memory again when rerun, naming
    what still holds it (the last three holders) and the cells whose named holders are all
    gone, or None when no rerun was flagged. `settled`: cells an earlier reset already
    said were gone (`gone_cells`), left out of the note.

    The tracker keeps no reference to what a flagged run kept, so the recall cannot tell
    that memory is still held: it says which cells were flagged, as history, and which of
    them had every holder their line named gone since (naming a holder the user deleted,
    or an output entry a reset dropped, would send the user after something gone)."""
    leaks = _tracker.rerun_leaks(_tracker.memory_history(shell))
    leaks = [record for record in leaks if record.cell not in settled]
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
        gone = [f"[{cell}]" for cell in _gone(leaks[-10:], there)]
        if gone:
            note += (
                f"; what %gpu_history named as holding the memory of {', '.join(gone)} is gone now"
            )
    return note


def gone_cells(shell: Any, namespace: dict) -> list[int]:
    """The flagged cells whose every holder their LEAK line named is gone now."""
    leaks = _tracker.rerun_leaks(_tracker.memory_history(shell))
    return _gone(leaks, _there(shell, namespace)) if leaks else []


def _gone(leaks: list[_tracker.CellMemory], there: Callable[[Holder], bool]) -> list[int]:
    named, still = _shown(None), _shown(there)
    return [record.cell for record in leaks if named(record) and not still(record)]
