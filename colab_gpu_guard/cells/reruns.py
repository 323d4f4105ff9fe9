"""Rerun leaks: does a cell that ran before keep memory again, run after run?

A cell's effect is what it kept: memory after it minus memory before *it*, so what other
cells allocated in between is never charged to it. It is measured per device: torch's
allocated bytes on each CUDA device (exact: any growth counts), and host memory ("cpu"),
always, CUDA or not. A rerun is flagged on a device when this run kept a significant amount
there and the previous run of the same source did too: its earlier objects are still held
somewhere (``losses.append(loss)``), where a cell that rebinds its names
(``big = torch.ones(...)``) keeps nothing on a rerun. Unless the user freed them: where the
cells run since the previous run freed at least what it kept on a device (what each cell
freed, its fall, is summed per device: ``outs.clear()``, ``%gpu_reset``), its figure no
longer tells that its objects are held, and the rerun is flagged there only if they are
found held (`rerun_holders`). A cell that frees and allocates as much hides its free in its
net change, so such a free is not counted. On the host, a cell in between without an exact
figure (below) may have freed it unseen: the rerun is then flagged only on what is found
held, too.

Host memory is exact where malloc's in-use bytes (glibc ``mallinfo2``) are read before and
after the cell; else there is only the resident set size's growth. ``mallinfo2`` walks
malloc's free lists: a microsecond on a tidy heap, milliseconds on a fragmented one. So it
is read around every cell while a read costs at most `CHEAP_READ_S` (one read per cell:
the reading after a cell is the next cell's before), else after a cell that took long
enough that a read is at most `READ_SHARE` of it, around a rerun whose previous run took
that long, and always around a rerun of a cell whose previous run kept host memory (the
judgement needs this run's exact figure). A short cell on a heap where a read is costly
gets none.

Where a rerun's host figure is not exact, what it kept is read from its objects instead
(`rerun_holders`: what the containers the cell names gained during the run hold, the
output history, a failed run's traceback), and so is what the previous run kept where its
figure was not exact either: a rerun whose objects, and the previous run's, hold a
significant amount there is flagged, whatever the resident size did; the resident size
alone flags nothing (a keep the heap had room for leaves it unchanged; a freed block that
stays resident grows it).
Significant means above a noise floor *measured* in this process (``host_noise``) the first
time a rerun is judged: malloc's floor for exact figures (and for the bytes of objects),
else the resident set's. Runs on the per-cell hot path: no CUDA calls, and no object walk
but for a flagged rerun or one whose host figure is not exact, where the holders are read
(a few containers; one bounded leftovers scan when they gained autograd graphs).
"""

from __future__ import annotations

import time
import weakref
from typing import Any, Callable, NamedTuple, Optional

from ..host_memory import MallocInUse, RssReader
from . import failed_runs, host_noise

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


class Verdict(NamedTuple):
    """leaks: what this run kept again, per device; rerun_of: the previous run's cell;
    held_by: what holds the previous run's objects, where it could tell; grew: the user's
    containers among those holders (`rerun_holders.Holding.named`)."""

    leaks: Kept
    rerun_of: Optional[int]
    held_by: str
    grew: tuple


_FIRST = Verdict((), None, "", ())
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


class RerunLeakCheck:
    """Remembers what each cell source kept on its last run and judges the next run of it."""

    def __init__(self, maxlen: int, rss: Optional[RssReader] = None) -> None:
        self.maxlen = maxlen
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

    def _host_kept(
        self,
        rss_before: Optional[int],
        rss: Optional[int],
        malloc_before: Optional[int],
        duration: float,
    ) -> tuple[Optional[int], bool]:
        """(change of host bytes over the cell, exact?): of malloc's in-use bytes where
        they were read before and after the cell, else of the resident size; None when
        neither.
        The reading after a cell is taken where the cell wanted one before (see
        `malloc_before`), or where it is affordable for this cell; it stands as the next
        cell's reading before."""
        malloc = self.malloc
        pending, malloc.pending = malloc.pending, False
        if (
            (pending and malloc_before is not None)
            or malloc.affordable(duration)
            or malloc.probe_due()
        ):
            after = malloc.last = malloc.read()
            if after is not None and malloc_before is not None:
                return after - malloc_before, True
        if rss is None or rss_before is None:
            return None, False
        return rss - rss_before, False

    # -- the judgement
    def judge(
        self,
        source: Optional[str],
        cuda: list,
        rss_before: Optional[int],
        rss: Optional[int],
        malloc_before: Optional[int],
        cell: Optional[int],
        duration: float,
        result: Any,
        holding: Callable[[dict, Any, PreviousRun], Any],
        lengths: Optional[dict],
    ) -> Verdict:
        """Judge a run of `source` that kept `cuda` ([(device, bytes)], a list this call
        owns) and went from `rss_before` to `rss` resident bytes (`malloc_before`: malloc's
        in-use bytes before it, or None). `result`: its ``ExecutionResult``; `holding`
        (`rerun_holders.RerunHolders.after`) reads what holds the previous run's objects
        from `lengths` (read before the run), called only for a flagged rerun or where
        host figures are not exact."""
        previous = self._last_by_source.pop(source, None) if source is not None else None
        failed = getattr(result, "error_in_exec", None) is not None
        if failed:
            failed_runs.count_failure()
        host, exact = self._host_kept(rss_before, rss, malloc_before, duration)
        freed_before, blind_before = self.freed, self.blind
        if not exact:
            self.blind = blind_before + 1
        if (host is not None and host < 0) or _any_freed(cuda):
            cuda, host = self._count_frees(cuda, host)
        if source is None:
            return _FIRST
        displayed = getattr(result, "result", None) is not None
        if previous is None:
            self._remember(source, cuda, host, exact, cell, duration, result, displayed, failed)
            return _FIRST
        if not _any_kept(cuda) and (
            (exact and host <= host_noise.MINIMUM)
            or (
                not exact
                and not lengths
                and not (displayed or failed or previous.displayed)
                and previous.failed is None
            )
        ):
            # the common rerun: it kept nothing, as malloc's exact figure says, or nothing
            # could hold either run's objects (no container it names, no result, no error)
            self._remember(source, cuda, host, exact, cell, duration, result, displayed, failed)
            return _new_tuple(Verdict, ((), previous.cell, "", ()))
        before = dict(previous.kept)
        # what the previous run kept is still held, as far as the figures tell, where the
        # cells since freed less than it on that device; else only if its objects are
        # found held (the user may have freed them: `outs.clear()`, %gpu_reset). On the
        # host, a cell since without an exact figure may have freed it unseen.
        since = _freed_since(freed_before, previous.freed)
        again = []
        doubtful = []
        for device, amount in cuda:
            if amount and before.get(device):
                held = before[device] > since.get(device, 0)
                (again if held else doubtful).append((device, amount))
        host_again: Optional[int] = None
        read = None
        # a figure that is not exact flags nothing by itself: the resident size misses a
        # keep the heap had room for, and counts a freed block that stays resident
        this_kept = exact and self._significant(host, True)
        previous_host = before.get(HOST)
        previous_kept = (
            previous_host is not None
            and blind_before == previous.blind
            and self._significant(previous_host - since.get(HOST, 0), previous.host_exact)
        )
        freed_since = not previous_kept and self._significant(previous_host, previous.host_exact)
        if this_kept and previous_kept:
            host_again = host
        elif not exact or (this_kept and (freed_since or not previous.host_exact)):
            read = holding(lengths or {}, result, previous)  # what objects hold: exact
            if (this_kept or self._significant(read.new, True)) and (
                previous_kept or self._significant(read.previous, True)
            ):
                host_again = host if this_kept else read.new
        if doubtful:
            if read is None:
                read = holding(lengths or {}, result, previous)
            held = dict(read.held)
            again += [(device, amount) for device, amount in doubtful if held.get(device)]
        if host_again is not None:
            again.append((HOST, host_again))
            host = max(host or 0, host_again)
        if read is None and again:
            read = holding(lengths or {}, result, previous)
        self._remember(source, cuda, host, exact, cell, duration, result, displayed, failed)
        if not again:
            return _new_tuple(Verdict, ((), previous.cell, "", ()))
        held_by, grew = read.named(tuple(again))
        return Verdict(tuple(again), previous.cell, held_by, grew)

    def _remember(
        self,
        source: str,
        cuda: list,
        host: Optional[int],
        exact: bool,
        cell: Optional[int],
        duration: float,
        result: Any,
        displayed: bool,
        failed: bool,
    ) -> None:
        kept = cuda
        if host is not None:
            kept.append((HOST, host))
        failed_run = None
        if failed:
            try:
                failed_run = weakref.ref(result)
            except TypeError:
                failed_run = None
        last = self._last_by_source
        last[source] = _new_tuple(
            PreviousRun,
            (tuple(kept), cell, exact, duration, displayed, failed_run, self.freed, self.blind),
        )
        if len(last) > 4 * self.maxlen:
            for stale in list(last)[: 2 * self.maxlen]:
                del last[stale]

    def _count_frees(self, cuda: list, host: Optional[int]) -> tuple[list, Optional[int]]:
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


def _any_kept(cuda: list) -> bool:
    for _, amount in cuda:  # noqa: SIM110 - any() of a generator costs on the hot path
        if amount > 0:
            return True
    return False


def _any_freed(cuda: list) -> bool:
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
