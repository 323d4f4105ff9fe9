"""What was alive at the last CUDA out-of-memory, by line: torch's allocator calls an
observer just before it raises (``torch._C._cuda_attach_out_of_memory_observer``, private,
no way to detach, so it is attached once per process). It can fire several times for one
error the user sees (a convolution retrying with less scratch memory), so the observer
keeps only the last firing's snapshot, taken only while a recording with stacks is on;
`at_failure()` hands it out once, for the out-of-memory error that surfaced.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Optional

from .. import notebook_refs
from ..notebook_refs import cell_files
from ..units import escape_text, format_bytes
from .kinds import BEFORE
from .records import LineMemory

TOP_LINES = 3


class _Firing(NamedTuple):
    device: int
    requested: int
    device_limit: int  # the device's memory, or the fraction set_per_process_memory_fraction allows
    device_free: int
    snapshot: dict
    cell: Optional[int]  # the cell running when it fired


_attached = False
_last: Optional[_Firing] = None


def _observer(device: int, alloc: int, device_limit: int, device_free: int) -> None:
    """What torch's allocator calls just before it raises its out-of-memory error (after
    recording the ``oom`` event, with its lock released): the device, the bytes asked for,
    the device's memory or the allowed fraction of it, and what CUDA said was free."""
    global _last
    import torch

    enabled = getattr(torch._C, "_cuda_isHistoryEnabled", None)
    if enabled is not None and not enabled():
        _last = None  # no history, no stacks: and an earlier firing is not this error's
        return
    _last = _Firing(
        device,
        alloc,
        device_limit,
        device_free,
        torch.cuda.memory._snapshot(),
        cell_files.running_cell_number(notebook_refs.running_shell()),
    )


def attach(torch: Any) -> bool:
    """Attach the observer (once per process); False where this torch has no such hook."""
    global _attached
    if _attached:
        return True
    hook = getattr(torch._C, "_cuda_attach_out_of_memory_observer", None)
    if hook is None:
        return False
    hook(_observer)
    _attached = True
    return True


def forget() -> None:
    """Drop the kept firing (a new cell starts: an earlier failure is not this one's)."""
    global _last
    _last = None


@dataclasses.dataclass(frozen=True)
class OomLines:
    """The top lines alive when CUDA ran out of memory, and what was asked for."""

    device: int
    requested: int
    device_free: int
    allocated: int
    lines: tuple[LineMemory, ...]

    @property
    def text(self) -> str:
        """``at the failure: 6.1 GiB from `[7] line 3  logits = model(batch)`; ...``: the
        top lines alive when CUDA ran out of memory (empty: none of the user's)."""
        from .views import place

        parts = [f"{format_bytes(line.nbytes)} from `{place(line.where)}`" for line in self.lines]
        return escape_text("at the failure: " + "; ".join(parts)) if parts else ""

    def __str__(self) -> str:
        return self.text

    def to_dict(self) -> dict[str, Any]:
        from .. import serialize

        return serialize.to_data(self)


def at_failure(
    error: Optional[BaseException] = None, *, disguised: bool = False, shell: Any = None
) -> Optional[OomLines]:
    """The lines alive at the CUDA out-of-memory that surfaced as `error`, from the
    observer's last firing in the running cell, handed out once. None where it did not fire
    in this cell (no trace on, or the error came from elsewhere), or `error` is not torch's
    out-of-memory error (nor caused by one) and not `disguised` (an error the caller knows
    for an out-of-memory in other words, e.g. a cuBLAS allocation failure)."""
    global _last
    firing, _last = _last, None
    if firing is None:
        return None
    shell = shell if shell is not None else notebook_refs.running_shell()
    if firing.cell != cell_files.running_cell_number(shell):
        return None  # an earlier cell's (caught there): not this error's
    if error is not None and not disguised and not _is_oom(error):
        _last = firing  # not this error's: kept for the one it belongs to
        return None
    from .lines import Places
    from .replay import live_by_line

    live, allocated = live_by_line(firing.snapshot, firing.device, places=Places(shell))
    return OomLines(
        device=firing.device,
        requested=firing.requested,
        device_free=firing.device_free,
        allocated=allocated,
        lines=tuple(line for line in live if line.where.kind != BEFORE)[:TOP_LINES],
    )


def _is_oom(error: BaseException) -> bool:
    """torch's OutOfMemoryError, or an error whose cause or context is one (an "OOM in
    disguise" raised while handling it)."""
    seen = 0
    while error is not None and seen < 8:
        if type(error).__name__ == "OutOfMemoryError":
            return True
        error = error.__cause__ or error.__context__
        seen += 1
    return False
