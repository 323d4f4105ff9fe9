"""%seed_all: seed every RNG that matters, optionally before every cell."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable, Optional

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, parse_line, usage_error

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ...seeding import SeedReport
    from ..registration import Registration

SEED_ALL_USAGE = (
    "%seed_all [SEED] [--deterministic] [--warn-only] [--strict] "
    "[--every-cell | --no-every-cell] [-v]"
)


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
    @argument(
        "seed",
        nargs="?",
        default=None,
        help="integer 0..4294967295; omitted: a fresh seed is drawn and printed",
    )
    @argument(
        "--deterministic",
        action="store_true",
        help="also switch on deterministic algorithms (torch, cuDNN, cuBLAS, TF)",
    )
    @argument(
        "--warn-only",
        action="store_true",
        help="deterministic mode that warns instead of raising on ops without a "
        "deterministic implementation (implies --deterministic)",
    )
    @argument(
        "--strict",
        action="store_true",
        help="deterministic mode with full fp32 matmuls, convolutions and RNNs (TF32 off "
        "on GPUs, no bf16 in oneDNN on the CPU; restored when deterministic mode is "
        "switched off; implies --deterministic)",
    )
    @argument(
        "--every-cell",
        action="store_true",
        help="reseed before every cell from (seed, cell source): a cell draws the same "
        "numbers each run, whatever ran before it (a training cell rerun per epoch repeats "
        "its shuffle; an edit, whitespace too, gives new draws); a later %%seed_all SEED "
        "takes over",
    )
    @argument(
        "--no-every-cell",
        action="store_true",
        help="stop reseeding before every cell",
    )
    @argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print the full report (what each RNG was seeded with, the flags and env "
        "vars set, the precision settings, notes) instead of one line",
    )
    @line_magic
    def seed_all(self, line: str = "") -> None:
        """Seed Python random, NumPy, PyTorch (CPU and every CUDA device) and any
        TensorFlow/CuPy already imported, then print in one line what was seeded and
        what was not (warnings that need action on lines of their own; the full report
        with -v).

        Examples::

          %seed_all 42                    # seed everything with 42
          %seed_all                       # draw a seed from the OS and print it
          %seed_all 42 --deterministic    # and use deterministic algorithms
          %seed_all 42 --strict           # deterministic, and full fp32 (TF32 off)
          %seed_all 42 --every-cell       # reseed before each cell from (42, its source)
          %seed_all 5                     # ...then reseed each cell from 5 instead
          %seed_all --no-every-cell       # stop per-cell reseeding
          %seed_all 42 -v                 # the full report

        `torch.manual_seed` already seeds every CUDA device; seeding before or after CUDA
        starts both work. For DataLoader workers use `colab_gpu_guard.seed_worker` and
        `colab_gpu_guard.dataloader_generator()`.
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

        args = parse_line(self.seed_all, line, SEED_ALL_USAGE)
        if args.every_cell and args.no_every_cell:
            raise usage_error(
                ValueError("--every-cell and --no-every-cell contradict each other: give one"),
                SEED_ALL_USAGE,
            )
        failure = None
        if args.seed is not None:
            try:
                args.seed = seeding.validate_seed(args.seed)
            except (TypeError, ValueError) as error:
                failure = usage_error(error, SEED_ALL_USAGE)
        if failure is not None:
            raise failure  # outside the handler: no internal exception chained to it
        return args
