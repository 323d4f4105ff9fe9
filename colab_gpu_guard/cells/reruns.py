"""Rerun leaks: does a cell that ran before keep memory again, run after run? Remembers what
each source kept per device and judges its next run (see docs/cells.md, "Rerun leaks")."""

from __future__ import annotations

import time
import weakref
from collections.abc import Sequence
from typing import Any, Callable, NamedTuple, Optional

from ..host_memory import MallocInUse, RssReader
from . import failed_runs, host_noise
from .rerun_holders import NAMED_NONE, NOTHING, Holding, Named

HOST = "cpu"
CHEAP_READ_S = 2e-6  # a malloc read this quick is taken around every cell
READ_SHARE = 0.01  # else around a rerun when a read is at most this share of its last run
_CUDA_NAMES: dict[int, str] = {}

# what one run of a cell kept: ((device, bytes), ...) in a fixed order, CUDA devices first
Kept = tuple


class PreviousRun(NamedTuple):
    """What the check remembers of a source's last run: what it kept per device, its
    cell, whether its host figure was exact, how long it took, whether it displayed a
    result, (a weakref to) its run record when it failed, the bytes cells had freed per
    device by its end (`RerunLeakCheck.freed`), and how many cells by then had a host
    figure that was not exact (`RerunLeakCheck.blind`)."""

    kept: Kept
    cell: Optional[int]
    host_exact: bool
    duration: float
    displayed: bool
    failed: Optional[weakref.ref]
    freed: tuple = ()
    blind: int = 0
    resets: int = 0


class CellRun(NamedTuple):
    """One run of a cell as read around it: its source; what it kept (+) or freed (-) per
    CUDA device, ((device, bytes), ...); the resident size before and after it and
    malloc's in-use bytes before it (None where not read); the lengths of the containers
    it names, read before it (`rerun_holders.RerunHolders.before`; None where not
    needed); its cell, how long it took, and its ``ExecutionResult``."""

    source: Optional[str]
    cuda: Sequence
    rss_before: Optional[int]
    rss_after: Optional[int]
    malloc_before: Optional[int]
    lengths: Optional[dict]
    cell: Optional[int]
    duration: float
    result: Any


class Verdict(NamedTuple):
    """leaks: what this run kept again, per device; rerun_of: the previous run's cell;
    named: what holds the previous run's objects, where it could tell
    (`rerun_holders.Holding.named`)."""

    leaks: Kept
    rerun_of: Optional[int]
    named: Named = NAMED_NONE


_FIRST = Verdict((), None)
_new_tuple = tuple.__new__  # a NamedTuple made without its Python-level __new__: hot path


def cuda_name(index: int) -> str:
    name = _CUDA_NAMES.get(index)
    if name is None:
        name = _CUDA_NAMES[index] = f"cuda:{index}"
    return name


def cuda_changes(stats_before: tuple, stats_after: tuple) -> list:
    """[(device name, change of its allocated bytes), ...] from per-device allocator
    stats: what a cell kept where positive, what it freed where negative."""
    started = {stats.device: stats.allocated for stats in stats_before}
    return [
        (cuda_name(after.device), after.allocated - started.get(after.device, 0))
        for after in stats_after
    ]


class MallocReadings:
    """malloc's in-use bytes, read where a read is worth its cost (see the module); each
    read is timed (the first one after an untimed call that loads glibc's function), and
    after `PROBE_EVERY` cells without a read one is taken to time it again: a slow read
    (a page fault, the heap fragmented then) decides only until then. ``enabled`` False:
    never read (host memory is then judged as where glibc's figure is missing: by the
    resident size and the objects)."""

    PROBE_EVERY = 64

    def __init__(self) -> None:
        self.reader = MallocInUse()
        self.enabled = True
        self.cheap_read_s = CHEAP_READ_S
        self.read_share = READ_SHARE
        self.cost: Optional[float] = None  # seconds the last read took
        self.last: Optional[int] = None  # read after the last cell, else None
        self.pending = False  # a reading was taken before this cell: one is due after it
        self._unread = 0  # cells since the last read

    def read(self) -> Optional[int]:
        if not self.enabled:
            return None
        if self.cost is None:
            self.reader.read()  # loads glibc's function through ctypes: not a read's cost
        started = time.perf_counter()
        value = self.reader.read()
        self.cost = time.perf_counter() - started
        self._unread = 0
        return value

    def probe_due(self) -> bool:
        """Counts a cell that took no read; True once every `PROBE_EVERY` of them."""
        self._unread += 1
        return self._unread >= self.PROBE_EVERY

    def affordable(self, duration: float) -> bool:
        """A read costs at most `cheap_read_s`, or `read_share` of `duration` (unknown
        until the first read, which is taken)."""
        cost = self.cost
        return cost is None or cost <= self.cheap_read_s or cost <= self.read_share * duration


def _nothing_held(_lengths: dict, _result: Any, _previous: PreviousRun) -> Holding:
    return NOTHING


class _Found:
    """What holds a previous run's objects, read once, when first needed (a few containers,
    sometimes a bounded leftovers scan)."""

    def __init__(self, holding: Callable, run: CellRun, previous: PreviousRun) -> None:
        self._holding = holding
        self._run = run
        self._previous = previous
        self._read: Optional[Holding] = None

    def __call__(self) -> Holding:
        if self._read is None:
            self._read = self._holding(self._run.lengths or {}, self._run.result, self._previous)
        return self._read


class RerunLeakCheck:
    """Remembers what each cell source kept on its last run and judges the next run of it."""

    def __init__(
        self,
        maxlen: int,
        rss: Optional[RssReader] = None,
        holding: Optional[Callable[[dict, Any, PreviousRun], Holding]] = None,
    ) -> None:
        """`holding` (`rerun_holders.RerunHolders.after`) reads what holds a previous run's
        objects after a rerun, from the lengths read before it; called only for a rerun
        that may be flagged (none: nothing is found held)."""
        self.maxlen = maxlen
        self._holding = holding or _nothing_held
        self._last_by_source: dict[str, PreviousRun] = {}
        self.malloc = MallocReadings()
        self._rss = rss if rss is not None else RssReader()
        self._floor: Optional[host_noise.NoiseFloor] = None
        self._freed_totals: dict[str, int] = {}
        # the bytes cells freed so far per device (their falls, summed): a rerun whose
        # previous run's keep may have been freed since is flagged on evidence only
        self.freed: tuple = ()
        # cells whose host figure was not exact: what they freed on the host is unknown
        self.blind = 0

    @property
    def noise_floor(self) -> host_noise.NoiseFloor:
        """The host noise floors, measured on first use (see ``host_noise``)."""
        if self._floor is None:
            self._floor = host_noise.measure(self._rss, self.malloc.reader)
        return self._floor

    def host_floor(self, exact: bool) -> int:
        floor = self.noise_floor
        return floor.malloc if exact else floor.rss

    def before_run(self, source: Optional[str]) -> tuple[Optional[int], bool]:
        """(malloc's in-use bytes before a run of `source`, or None; whether the run may
        need what holds its previous run's objects (`rerun_holders`)).

        The malloc reading is the one taken after the cell before, or a new one where it is
        affordable or needed (see the module). Holders are needed for a rerun whose host
        figure may not be exact, or whose previous run kept memory (this one may be
        flagged, and the flag names them)."""
        malloc = self.malloc
        previous = self._last_by_source.get(source) if source is not None else None
        wanted = malloc.affordable(0.0) if previous is None else self._read_around(previous)
        malloc.pending = wanted  # a reading this cell wants before is matched after it
        reading = malloc.last
        if reading is not None:
            malloc.last = None  # taken once
        elif wanted:
            reading = malloc.read()
        if previous is None:
            return reading, False
        if reading is None or not previous.host_exact:
            return reading, True
        for device, amount in previous.kept:
            if amount > (host_noise.MINIMUM if device == HOST else 0):
                return reading, True
        return reading, False

    def _significant(self, host: Optional[int], exact: bool) -> bool:
        return host is not None and host > host_noise.MINIMUM and host > self.host_floor(exact)

    def _read_around(self, previous: PreviousRun) -> bool:
        """Whether a rerun of `previous` gets malloc readings before and after it: its
        previous run kept host memory (the judgement needs this run's exact figure), or
        took long enough that a read is at most `READ_SHARE` of it."""
        kept_host = self._significant(_host_of(previous.kept), exact=True)
        return kept_host or self.malloc.affordable(previous.duration)

    def _host_kept(self, run: CellRun) -> tuple[Optional[int], bool]:
        """(change of host bytes over `run`, exact?): of malloc's in-use bytes where they
        were read before and after the cell, else of the resident size; None when neither.
        The reading after a cell is taken where the cell wanted one before (see
        `before_run`), or where it is affordable for this cell; it stands as the next
        cell's reading before."""
        malloc_before = run.malloc_before
        malloc = self.malloc
        pending, malloc.pending = malloc.pending, False
        if (
            (pending and malloc_before is not None)
            or malloc.affordable(run.duration)
            or malloc.probe_due()
        ):
            after = malloc.last = malloc.read()
            if after is not None and malloc_before is not None:
                return after - malloc_before, True
        rss, rss_before = run.rss_after, run.rss_before
        if rss is None or rss_before is None:
            return None, False
        return rss - rss_before, False

    # -- the judgement
    def judge(self, run: CellRun) -> Verdict:
        """Judge `run`: whether it kept memory again, where its previous run kept some, and
        what holds the previous run's objects (see docs/cells.md, "Rerun leaks")."""
        source = run.source
        previous = self._last_by_source.pop(source, None) if source is not None else None
        failed = getattr(run.result, "error_in_exec", None) is not None
        if failed:
            failed_runs.count_failure()
        freed_before, blind_before = self.freed, self.blind  # as the previous cell left them
        # what it kept per CUDA device and on the host (None: no figure; exact or not);
        # what it freed goes to the running totals
        cuda = run.cuda
        host, exact = self._host_kept(run)
        if not exact:
            self.blind = blind_before + 1
        if (host is not None and host < 0) or _any_freed(cuda):
            cuda, host = self._count_frees(cuda, host)
        if source is None:
            return _FIRST
        displayed = getattr(run.result, "result", None) is not None
        if previous is None:
            verdict = _FIRST
        elif not _any_kept(cuda) and (
            (exact and host <= host_noise.MINIMUM)
            or (not exact and _nothing_could_hold(run, previous, displayed, failed))
        ):
            # the common rerun: it kept nothing, as malloc's exact figure says, or nothing
            # could hold either run's objects (no container it names, no result, no error)
            verdict = _new_tuple(Verdict, ((), previous.cell, NAMED_NONE))
        else:
            since = _freed_since(freed_before, previous.freed)
            unseen = blind_before != previous.blind  # a cell since may have freed it unseen
            # a reset since dropped the notebook's hidden holders and collected: what it
            # freed of the previous run's objects is told by what is found holding them
            reset = previous.resets != failed_runs.resets
            verdict = self._again(run, previous, cuda, host, exact, since, unseen, reset)
            host_again = _host_of(verdict.leaks)
            if host_again is not None:  # what it kept, as its objects tell where inexact
                host = max(host or 0, host_again)
        self._remember(run, cuda, host, exact, displayed, failed)
        return verdict

    def _again(
        self,
        run: CellRun,
        previous: PreviousRun,
        cuda: Sequence,
        host: Optional[int],
        exact: bool,
        since: dict,
        unseen: bool,
        reset: bool = False,
    ) -> Verdict:
        """The verdict on a rerun that kept memory, or may have: on which devices it kept
        memory again, and what holds the previous run's objects. `since`: what cells freed
        per device since the previous run; `unseen`: a cell since had no exact host figure;
        `reset`: a `%gpu_reset` ran since (its own figures can hide what it freed: a cell
        that resets and allocates).

        On a CUDA device, what the previous run kept is still held, as far as the figures
        tell, where the cells since freed less than it there; else only if its objects
        are found held (the user may have freed them: `outs.clear()`, %gpu_reset)."""
        found = _Found(self._holding, run, previous)
        before = dict(previous.kept)
        again = []
        doubtful = []
        for device, amount in cuda:
            if amount and before.get(device):
                held = not reset and before[device] > since.get(device, 0)
                (again if held else doubtful).append((device, amount))
        if doubtful:
            held_on = dict(found().held)
            again += [(device, amount) for device, amount in doubtful if held_on.get(device)]
        host_again = self._host_again(
            host, exact, previous, since.get(HOST, 0), unseen or reset, found
        )
        if host_again is not None:
            again.append((HOST, host_again))
        if not again:
            return _new_tuple(Verdict, ((), previous.cell, NAMED_NONE))
        kept = tuple(again)
        return Verdict(kept, previous.cell, found().named(kept))

    def _host_again(
        self,
        host: Optional[int],
        exact: bool,
        previous: PreviousRun,
        freed_since: int,
        unseen: bool,
        found: _Found,
    ) -> Optional[int]:
        """What a rerun kept again on the host, or None.

        A figure that is not exact flags nothing by itself: the resident size misses a keep
        the heap had room for, and counts a freed block that stays resident. Both runs'
        figures flag it where this one's is exact and the previous run's keep is still
        held as far as they tell (the cells since freed less, all with exact figures);
        else the objects the runs left in the holders found decide (their bytes are
        exact)."""
        if exact and not self._significant(host, True):
            return None  # it kept nothing there, as malloc's exact figure says
        previous_host = _host_of(previous.kept)
        previous_held = (
            previous_host is not None
            and not unseen
            and self._significant(previous_host - freed_since, previous.host_exact)
        )
        if exact and previous_held:
            return host
        if exact and previous.host_exact and not self._significant(previous_host, True):
            return None  # the previous run kept nothing there
        objects = found()
        if (exact or self._significant(objects.new, True)) and (
            previous_held or self._significant(objects.previous, True)
        ):
            return host if exact else objects.new
        return None

    def _remember(
        self,
        run: CellRun,
        cuda: Sequence,
        host: Optional[int],
        exact: bool,
        displayed: bool,
        failed: bool,
    ) -> None:
        failed_run = None
        if failed:
            try:
                failed_run = weakref.ref(run.result)
            except TypeError:
                failed_run = None
        kept = tuple(cuda)
        if host is not None:  # without CUDA figures no list is built: the hot path
            kept = (*kept, (HOST, host)) if kept else ((HOST, host),)
        last = self._last_by_source
        last[run.source] = _new_tuple(  # type: ignore[index]
            PreviousRun,
            (
                kept,
                run.cell,
                exact,
                run.duration,
                displayed,
                failed_run,
                self.freed,
                self.blind,
                failed_runs.resets,
            ),
        )
        if len(last) > 4 * self.maxlen:
            for stale in list(last)[: 2 * self.maxlen]:
                del last[stale]

    def _count_frees(self, cuda: Sequence, host: Optional[int]) -> tuple[list, Optional[int]]:
        """Add what a cell freed per device (its falls) to the running totals; return its
        changes clamped at 0: what it kept."""
        totals = self._freed_totals
        if host is not None and host < 0:
            totals[HOST] = totals.get(HOST, 0) - host
            host = 0
        kept = []
        for device, change in cuda:
            if change < 0:
                totals[device] = totals.get(device, 0) - change
                change = 0
            kept.append((device, change))
        self.freed = tuple(totals.items())
        return kept, host

    def clear(self) -> None:
        self._last_by_source.clear()
        self._freed_totals.clear()
        self.freed = ()
        self.blind = 0


def _nothing_could_hold(run: CellRun, previous: PreviousRun, displayed: bool, failed: bool) -> bool:
    """Nothing can hold either run's objects: the cell names no container, and neither
    run displayed a result or failed."""
    return (
        not run.lengths
        and not (displayed or failed or previous.displayed)
        and previous.failed is None
    )


def _any_kept(cuda: Sequence) -> bool:
    for _, amount in cuda:  # noqa: SIM110 - any() of a generator costs on the hot path
        if amount > 0:
            return True
    return False


def _any_freed(cuda: Sequence) -> bool:
    for _, change in cuda:  # noqa: SIM110 - as above
        if change < 0:
            return True
    return False


def _freed_since(now: tuple, then: tuple) -> dict:
    """{device: bytes cells freed} between two readings of `RerunLeakCheck.freed`."""
    if now is then:
        return {}
    earlier = dict(then)
    since = {device: total - earlier.get(device, 0) for device, total in now}
    return {device: amount for device, amount in since.items() if amount > 0}


def _host_of(kept: Kept) -> Optional[int]:
    for device, amount in kept:
        if device == HOST:
            return amount
    return None
