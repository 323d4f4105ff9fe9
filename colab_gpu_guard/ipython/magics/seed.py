"""%seed_all: seed every RNG that matters, optionally before every cell."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable, Optional

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, conflicts, help_format, parse_line, read_value

# The modes an option switches on and its --no- form off; a new seed keeps each as it is.
MODES = ("deterministic", "strict")


def _help_format():
    """The house help format, with a usage line that writes each option with its `--no-`
    form as `--[no-]NAME` (--no-warn-only, the rarest, only in the options list): the full
    list does not fit a line."""
    decorator = help_format()
    decorator.kwds["usage"] = (
        "%(prog)s [--[no-]deterministic] [--warn-only] [--[no-]strict] "
        "[--[no-]every-cell] [-v] [SEED]"
    )
    return decorator


if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ...seeding import SeedReport
    from ..registration import Registration

REFERENCE = """\
Examples:

```text
%seed_all 42                    # seed everything with 42
%seed_all                       # draw a seed from the OS and print it
%seed_all 42 --deterministic    # and use deterministic algorithms
%seed_all 42 --strict           # deterministic, and full float32 math (TF32 off)
%seed_all 42 --every-cell       # reseed before each cell from (42, its code)
%seed_all 5                     # a new seed: every mode on stays on (kept)
%seed_all 5 --no-deterministic  # deterministic mode off (--strict, --warn-only too)
%seed_all 5 --no-warn-only      # deterministic ops raise again (deterministic stays)
%seed_all --no-every-cell       # stop per-cell reseeding
%seed_all 42 -v                 # the full report
```

It prints one line of what was seeded, what was not and which modes are on; a warning
that needs action gets a line of its own. `-v` prints the full report: what each random
number generator was seeded with, the flags and environment variables set, the precision
settings, and notes.

A new seed keeps every mode in force (deterministic, warn-only, strict, every cell), also
one switched on by hand with `torch.use_deterministic_algorithms`; a `--no-` option
switches its mode off. An option with its `--no-` form (or `--warn-only` with
`--no-deterministic`) is an error that changes nothing.

- `--warn-only`: deterministic mode that warns instead of raising on an operation with no
  deterministic implementation (implies `--deterministic`; `--deterministic` without it
  raises again).
- `--strict`: deterministic mode with full float32 matrix multiplications, convolutions
  and RNNs (TF32 off on GPUs, no bfloat16 in oneDNN on the CPU; implies
  `--deterministic`). `--no-strict` restores the precision from before and keeps
  deterministic mode; `--no-deterministic` ends both.
- `--no-warn-only`: deterministic mode that raises again on such an operation
  (deterministic mode stays on; `--deterministic` alone does the same).
- `--every-cell`: reseed before every cell from (seed, the cell's code): a cell draws the
  same numbers each run, whatever ran before it (a training cell rerun per epoch repeats
  its shuffle; an edit, whitespace too, gives new draws). A later `%seed_all SEED`, or
  `seed_all(SEED)` called from Python, takes over as the base.

Several processes (DDP): every rank gets the same seed, as in Lightning and accelerate,
so models initialised on each rank start alike; DataLoader workers draw differently on
each rank with `seed_worker`. `seed_all(seed, per_rank=True)` seeds seed + this process's
rank (torch.distributed's rank, else `$RANK`) instead, like accelerate's
`set_seed(seed, device_specific=True)`.

`torch.manual_seed` already seeds every CUDA device; seeding before or after CUDA starts
both work. For DataLoader workers use `colab_gpu_guard.seed_worker` and
`colab_gpu_guard.dataloader_generator()`; `rng_state()` / `restore_rng_state()` /
`isolated_rng()` save and restore every stream, `ResumableEpoch` resumes a DataLoader
epoch exactly mid-way.

Compared with Lightning 2.6.6, accelerate 1.15.0 and `torch.random.fork_rng` (measured
with torch 2.14.1 and NumPy 2.4.6 by `tools/compare_seeding_peers.py`):

- Seed 42: `seed_all`, Lightning's `seed_everything` and accelerate's `set_seed` draw the
  same numbers from torch, Python `random` and NumPy. `seed_everything` sets
  `PL_GLOBAL_SEED` for spawned processes; `seed_all` sets `COLAB_GPU_GUARD_SEED`, which
  `seed_worker`, `dataloader_generator()` and `jax_key()` read in a process that never
  called `seed_all`.
- DataLoader workers on two ranks seeded alike: with no `worker_init_fn` they share their
  torch, `random` and NumPy draws; with `seed_worker`, as with Lightning's
  `pl_worker_init_function`, they share none.
- Main-process seeds are equal across ranks in all three. `per_rank=True` adds the rank,
  as accelerate's `set_seed(seed, device_specific=True)` adds the process index: on two
  gloo ranks the two draw the same numbers.
- Restoring: `torch.random.fork_rng` puts back torch's generators only (Python `random`
  and NumPy draws stay shifted); Lightning's `isolate_rng` puts back all three, but not
  when the block raises, and on a NumPy global RNG moved to another bit generator it lets
  NumPy's legacy-state warning through. `isolated_rng` restores after an exception, on any
  bit generator, and takes named `torch.Generator` and `numpy.random.Generator` objects.
- Mid-epoch: accelerate's `skip_first_batches`, after restoring the epoch's starting
  state, yields the same samples but other worker augmentations; `ResumableEpoch` yields
  the same batches.
"""


@magics_class
class SeedMagics(GuardMagics):
    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.reseeder: Optional[Callable] = None

    def _stop_every_cell(self) -> None:
        if self.reseeder is not None:
            self.registration.unregister_event("pre_run_cell", self.reseeder)
            self.reseeder.stop_following()
            self.reseeder = None

    def _start_every_cell(self, seed: int) -> None:
        from ... import seeding

        self._stop_every_cell()
        self.reseeder = seeding.CellReseeder(seed)
        self.reseeder.follow_seed_all()  # seed_all from Python takes over the base too
        self.registration.register_event("pre_run_cell", self.reseeder)

    def take_over_every_cell(self, report: SeedReport) -> None:
        """While per-cell reseeding is on, a new seed (this magic's, the panel's Seed
        button's, or seed_all called from Python) is its base: seed_all rebased it; the
        report says so."""
        if self.reseeder is not None:
            self.reseeder.rebase(report.seed)
            report.every_cell = True

    def on_load(self) -> None:
        self.registration.add_cleanup(self._stop_every_cell)

    @conflicts(  # a mode and its --no- form; deterministic off with a mode that needs it
        ("--deterministic", "--no-deterministic"),
        ("--strict", "--no-strict"),
        ("--warn-only", "--no-warn-only"),
        ("--every-cell", "--no-every-cell"),
        ("--warn-only", "--no-deterministic"),
        ("--strict", "--no-deterministic"),
    )
    @magic_arguments()
    @_help_format()
    @argument(
        "seed", nargs="?", default=None, metavar="SEED", help="0 to 4294967295; none: draw one"
    )
    @argument(
        "--deterministic",
        action="store_true",
        help="also use deterministic algorithms (torch, cuDNN, cuBLAS, TF)",
    )
    @argument(
        "--no-deterministic",
        action="store_true",
        help="deterministic mode off (--strict and --warn-only end with it)",
    )
    @argument(
        "--warn-only", action="store_true", help="like --deterministic, but warn instead of raising"
    )
    @argument("--no-warn-only", action="store_true", help="raise again (deterministic stays on)")
    @argument(
        "--strict", action="store_true", help="deterministic, and full float32 math (no TF32)"
    )
    @argument(
        "--no-strict", action="store_true", help="precision as before --strict; deterministic stays"
    )
    @argument(
        "--every-cell", action="store_true", help="reseed before every cell from (SEED, its code)"
    )
    @argument("--no-every-cell", action="store_true", help="stop reseeding before every cell")
    @argument("-v", "--verbose", action="store_true", help="the full report instead of one line")
    @line_magic
    def seed_all(self, line: str = "") -> None:
        """Seed Python, NumPy, torch (CPU, every GPU), CuPy/TF if imported; one line out.

        Example: %seed_all 42 --deterministic
        More (each option, DataLoader workers): colab_gpu_guard.reference('seed_all')
        """
        from ... import seeding

        args = self._parse(line)
        wanted = {mode: _switch(args, mode) for mode in MODES}  # None: keep what is in force
        # --warn-only is --deterministic that warns: --deterministic alone raises again
        wanted["warn_only"] = (
            True if args.warn_only else (False if args.deterministic or args.no_warn_only else None)
        )
        only_stop = args.seed is None and all(value is None for value in wanted.values())
        if args.no_every_cell and only_stop:
            self._stop_every_cell()
            print("seed_all: per-cell reseeding off")
            return
        report = seeding.seed_all(args.seed, **wanted)
        if args.no_every_cell:
            self._stop_every_cell()
            report.every_cell = False
        elif args.every_cell:
            self._start_every_cell(report.seed)
            report.every_cell = True
        else:
            self.take_over_every_cell(report)
        print(report if args.verbose else report.summary())

    def _parse(self, line: str) -> argparse.Namespace:
        from ... import seeding

        args = parse_line(self.seed_all, line)
        if args.seed is not None:
            args.seed = read_value(
                self.seed_all, seeding.validate_seed, args.seed, (TypeError, ValueError)
            )
        return args


def _switch(args: argparse.Namespace, mode: str) -> Optional[bool]:
    """True: --MODE given; False: --no-MODE; None: neither (keep the mode in force)."""
    if getattr(args, mode):
        return True
    return False if getattr(args, f"no_{mode}") else None
