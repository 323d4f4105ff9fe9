"""%seed_all: seed every RNG that matters, optionally before every cell."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable, Optional

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, help_format, parse_line, usage_error

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
%seed_all 5                     # ...then reseed each cell from 5 instead
%seed_all --no-every-cell       # stop per-cell reseeding
%seed_all 42 -v                 # the full report
```

It prints one line of what was seeded and what was not; a warning that needs action gets
a line of its own. `-v` prints the full report: what each random number generator was
seeded with, the flags and environment variables set, the precision settings, and notes.

- `--warn-only`: deterministic mode that warns instead of raising on an operation with no
  deterministic implementation (implies `--deterministic`).
- `--strict`: deterministic mode with full float32 matrix multiplications, convolutions
  and RNNs (TF32 off on GPUs, no bfloat16 in oneDNN on the CPU; restored when
  deterministic mode is switched off; implies `--deterministic`).
- `--every-cell`: reseed before every cell from (seed, the cell's code): a cell draws the
  same numbers each run, whatever ran before it (a training cell rerun per epoch repeats
  its shuffle; an edit, whitespace too, gives new draws). A later `%seed_all SEED` takes
  over as the base.

`torch.manual_seed` already seeds every CUDA device; seeding before or after CUDA starts
both work. For DataLoader workers use `colab_gpu_guard.seed_worker` and
`colab_gpu_guard.dataloader_generator()`.
"""


@magics_class
class SeedMagics(GuardMagics):
    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.reseeder: Optional[Callable] = None

    def _stop_every_cell(self) -> None:
        if self.reseeder is not None:
            self.registration.unregister_event("pre_run_cell", self.reseeder)
            self.reseeder = None

    def _start_every_cell(self, seed: int) -> None:
        from ... import seeding

        self._stop_every_cell()
        self.reseeder = seeding.CellReseeder(seed)
        self.registration.register_event("pre_run_cell", self.reseeder)

    def take_over_every_cell(self, report: SeedReport) -> None:
        """While per-cell reseeding is on, a new seed (this magic's, or the panel's Seed
        button's) becomes its base, and the report says so."""
        if self.reseeder is not None:
            self._start_every_cell(report.seed)
            report.every_cell = True

    def on_load(self) -> None:
        self.registration.add_cleanup(self._stop_every_cell)

    @magic_arguments()
    @help_format()
    @argument(
        "seed", nargs="?", default=None, metavar="SEED", help="0 to 4294967295; none: draw one"
    )
    @argument(
        "--deterministic",
        action="store_true",
        help="also use deterministic algorithms (torch, cuDNN, cuBLAS, TF)",
    )
    @argument(
        "--warn-only", action="store_true", help="like --deterministic, but warn instead of raising"
    )
    @argument(
        "--strict", action="store_true", help="deterministic, and full float32 math (no TF32)"
    )
    @argument(
        "--every-cell", action="store_true", help="reseed before every cell from (SEED, its code)"
    )
    @argument("--no-every-cell", action="store_true", help="stop reseeding before every cell")
    @argument("-v", "--verbose", action="store_true", help="the full report instead of one line")
    @line_magic
    def seed_all(self, line: str = "") -> None:
        """Seed Python, NumPy, torch (CPU and every GPU) and CuPy/TensorFlow if imported.

        Prints one line: what was seeded and what was not (-v: the full report).

        Example: %seed_all 42 --deterministic
        More (each option, DataLoader workers): docs/reference.md
        """
        from ... import seeding

        args = self._parse(line)
        only_stop = args.seed is None and not (args.deterministic or args.warn_only or args.strict)
        if args.no_every_cell and only_stop:
            self._stop_every_cell()
            print("seed_all: per-cell reseeding off")
            return
        report = seeding.seed_all(
            args.seed,
            deterministic=args.deterministic,
            warn_only=args.warn_only,
            strict=args.strict,
        )
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
        if args.every_cell and args.no_every_cell:
            raise usage_error(
                ValueError("--every-cell and --no-every-cell contradict each other: give one"),
                self.seed_all,
            )
        failure = None
        if args.seed is not None:
            try:
                args.seed = seeding.validate_seed(args.seed)
            except (TypeError, ValueError) as error:
                failure = usage_error(error, self.seed_all)
        if failure is not None:
            raise failure  # outside the handler: no internal exception chained to it
        return args
