"""The IPython layer: thin magics over the API, and exact bookkeeping of what the
extension adds to a shell so that `%unload_ext` removes exactly that.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

# ---------------------------------------------------------------- registration bookkeeping


class Registration:
    """Everything the extension added to one shell: magics, event callbacks, cleanups."""

    def __init__(self, shell: Any) -> None:
        self.shell = shell
        self.magics: list[Magics] = []
        self.events: list[tuple[str, Callable]] = []
        self.cleanups: list[Callable[[], None]] = []

    def register_event(self, event: str, callback: Callable) -> None:
        if (event, callback) in self.events:
            return
        self.shell.events.register(event, callback)
        self.events.append((event, callback))

    def unregister_event(self, event: str, callback: Callable) -> None:
        if (event, callback) not in self.events:
            return
        self.events.remove((event, callback))
        with contextlib.suppress(ValueError):  # already removed by someone else
            self.shell.events.unregister(event, callback)

    def add_cleanup(self, cleanup: Callable[[], None]) -> None:
        self.cleanups.append(cleanup)

    def close(self) -> None:
        for event, callback in list(self.events):
            self.unregister_event(event, callback)
        for cleanup in reversed(self.cleanups):
            cleanup()
        self.cleanups.clear()
        manager = self.shell.magics_manager
        for instance in self.magics:
            for kind, names in instance.magics.items():
                for name in names:
                    if manager.magics[kind].get(name) is not None:
                        owner = getattr(manager.magics[kind][name], "__self__", None)
                        if owner is instance:
                            del manager.magics[kind][name]
            manager.registry.pop(type(instance).__name__, None)
        self.magics.clear()


_registrations: dict[int, Registration] = {}


def registration_for(shell: Any) -> Optional[Registration]:
    return _registrations.get(id(shell))


def load(shell: Any) -> None:
    if id(shell) in _registrations:
        unload(shell)
    registration = Registration(shell)
    _registrations[id(shell)] = registration
    for magics_class_ in MAGIC_CLASSES:
        instance = magics_class_(shell, registration)
        shell.register_magics(instance)
        registration.magics.append(instance)
        instance.on_load()


def unload(shell: Any) -> None:
    registration = _registrations.pop(id(shell), None)
    if registration is not None:
        registration.close()


class GuardMagics(Magics):
    """Base of the extension's magics classes: knows its shell's Registration."""

    def __init__(self, shell: Any, registration: Registration) -> None:
        super().__init__(shell)
        self.registration = registration

    def on_load(self) -> None:
        """Register event callbacks here (through self.registration)."""


def usage_error(error: Exception, valid_form: str = "") -> UsageError:
    message = str(error)
    if valid_form and valid_form not in message:
        message = f"{message}\nUsage: {valid_form}"
    return UsageError(message)


# ---------------------------------------------------------------- %seed_all

SEED_ALL_USAGE = "%seed_all [SEED] [--deterministic] [--warn-only] [--every-cell | --no-every-cell]"


@magics_class
class SeedMagics(GuardMagics):
    def __init__(self, shell: Any, registration: Registration) -> None:
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
        from . import seeding

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

    def _parse(self, line: str):
        from . import seeding

        args = parse_argstring(self.seed_all, line)
        if args.seed is not None:
            try:
                args.seed = seeding.validate_seed(args.seed)
            except (TypeError, ValueError) as error:
                raise usage_error(error, SEED_ALL_USAGE) from None
        return args


MAGIC_CLASSES: list[type[GuardMagics]] = [SeedMagics]
