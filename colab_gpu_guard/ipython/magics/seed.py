"""%seed_all: seed every RNG that matters, optionally before every cell."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Callable, Optional

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from .base import GuardMagics, usage_error

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

    from ..registration import Registration

SEED_ALL_USAGE = "%seed_all [SEED] [--deterministic] [--warn-only] [--every-cell | --no-every-cell]"


@magics_class
class SeedMagics(GuardMagics):
    def __init__(self, shell: InteractiveShell, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.reseeder: Optional[Callable] = None

    def _stop_every_cell(self) -> None:
        if self.reseeder is not None:
            self.registration.unregister_event("pre_run_cell", self.reseeder)
            self.reseeder = None

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
        "--every-cell",
        dest="every_cell",
        action="store_const",
        const=True,
        default=None,
        help="reseed before every cell from (seed, cell source): a cell draws the same "
        "numbers each run, whatever ran before it",
    )
    @argument(
        "--no-every-cell",
        dest="every_cell",
        action="store_const",
        const=False,
        help="stop reseeding before every cell",
    )
    @line_magic
    def seed_all(self, line: str = "") -> None:
        """Seed Python random, NumPy, PyTorch (CPU and every CUDA device) and any
        TensorFlow/CuPy already imported, then print what was seeded and what was not.

        Examples::

          %seed_all 42                    # seed everything with 42
          %seed_all                       # draw a seed from the OS and print it
          %seed_all 42 --deterministic    # and use deterministic algorithms
          %seed_all 42 --every-cell       # reseed before each cell from (42, its source)
          %seed_all --no-every-cell       # stop per-cell reseeding

        `torch.manual_seed` already seeds every CUDA device; seeding before or after CUDA
        starts both work. For DataLoader workers use `colab_gpu_guard.seed_worker` and
        `colab_gpu_guard.dataloader_generator()`.
        """
        from ... import seeding

        args = self._parse(line)
        if args.seed is None and args.every_cell is False and not args.deterministic:
            self._stop_every_cell()
            print("seed_all: per-cell reseeding off")
            return
        report = seeding.seed_all(
            args.seed, deterministic=args.deterministic, warn_only=args.warn_only
        )
        if args.every_cell is True:
            self._stop_every_cell()
            self.reseeder = seeding.CellReseeder(report.seed)
            self.registration.register_event("pre_run_cell", self.reseeder)
        elif args.every_cell is False:
            self._stop_every_cell()
        if args.every_cell is not None:
            report.every_cell = args.every_cell
        print(report)

    def _parse(self, line: str) -> argparse.Namespace:
        from ... import seeding

        args = parse_argstring(self.seed_all, line)
        failure = None
        if args.seed is not None:
            try:
                args.seed = seeding.validate_seed(args.seed)
            except (TypeError, ValueError) as error:
                failure = usage_error(error, SEED_ALL_USAGE)
        if failure is not None:
            raise failure  # outside the handler: no internal exception chained to it
        return args
