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


# ---------------------------------------------------------------- %gpu_status


@magics_class
class StatusMagics(GuardMagics):
    @magic_arguments()
    @argument("--json", action="store_true", help="print the snapshot as JSON instead")
    @argument(
        "--processes",
        action="store_true",
        help="list every process on each GPU (default: the 5 using the most memory, "
        "and this kernel)",
    )
    @argument("--history", action="store_true", help="add the per-cell memory history")
    @argument(
        "--no-leftovers",
        dest="leftovers",
        action="store_false",
        help="skip looking for arrays still held between runs",
    )
    @line_magic
    def gpu_status(self, line: str = "") -> None:
        """Show one snapshot of the GPU: NVML's view beside this kernel's allocator.

        Driver, CUDA driver and NVML versions; per GPU its name, UUID, PCI bus id, memory
        (used / reserved by the driver / total / free), utilisation, temperature, power,
        compute mode, MIG instances and ECC; the processes using it (this kernel marked);
        this kernel's allocated and reserved bytes per device beside what NVML charges to
        it (the difference is the CUDA context and other libraries); the CUDA context's
        health; torch and CUDA runtime versions; host RAM; the biggest arrays still held
        between runs. Works without a GPU (it says so).

        Examples::

          %gpu_status                  # HTML in notebooks, text in terminals
          %gpu_status --processes      # every process on each GPU
          %gpu_status --history        # plus the per-cell memory history
          %gpu_status --json           # JSON (schema: colab_gpu_guard.status.json_schema())

        The same snapshot from code: ``colab_gpu_guard.gpu_status()``; from a terminal:
        ``python -m colab_gpu_guard status [--json] [--watch SECONDS]``.
        """
        from . import notebook_refs, status

        args = parse_argstring(self.gpu_status, line)
        snapshot = status.gpu_status(
            leftovers=args.leftovers,
            history=args.history,
            namespace=notebook_refs.namespace_to_scan(self.shell),
            process_limit=None if args.processes else status.DEFAULT_PROCESS_LIMIT,
        )
        if args.json:
            print(snapshot.to_json())
            return
        from IPython.display import display

        # Both representations, whatever the shell's formatters: notebooks render the HTML,
        # terminals the text.
        bundle = {"text/plain": snapshot.to_text(), "text/html": snapshot.to_html()}
        display(bundle, raw=True)


MAGIC_CLASSES.append(StatusMagics)


# ---------------------------------------------------------------- %gpu_advice

GPU_ADVICE_USAGE = "%gpu_advice [on|off]"


@magics_class
class AdvisorMagics(GuardMagics):
    """The CUDA error advisor: a custom exception handler, on from %load_ext."""

    def __init__(self, shell: Any, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.advisor: Any = None

    def on_load(self) -> None:
        from .ipython.shell_advisor import ShellAdvisor

        self.advisor = ShellAdvisor(self.shell)
        self.advisor.install()
        self.registration.add_cleanup(self.advisor.uninstall)

    @line_magic
    def gpu_advice(self, line: str = "") -> None:
        """Turn the CUDA error advisor on or off, or show whether it is on.

        Usage::

          %gpu_advice          # is it on?
          %gpu_advice on       # diagnose CUDA errors under their traceback (the default)
          %gpu_advice off      # plain tracebacks only, exactly as without the extension

        When a cell fails with a CUDA error, the normal traceback is shown unchanged and then
        a short diagnosis: the real cause and the fix. It covers CUDA out-of-memory (torch,
        CuPy, JAX/XLA, TensorFlow: requested vs free, the biggest leftover tensors by name;
        the failed cell's traceback frames are released so their tensors are freed), sticky
        errors such as a device-side assert (the runtime must be restarted; the context is
        marked broken for %gpu_status and %gpu_reset), CUDA in forked DataLoader workers,
        cuBLAS determinism and ops with no deterministic implementation, driver/build
        mismatches, and the driver out of memory because another process holds the GPU.
        Any other error is shown exactly as without the extension, and %debug works as
        usual. Outside notebooks: ``colab_gpu_guard.advise(exc)``.
        """
        words = line.split()
        if len(words) > 1 or (words and words[0].lower() not in ("on", "off")):
            raise UsageError(
                f"expected 'on' or 'off', got {line.strip()!r}\nUsage: {GPU_ADVICE_USAGE}"
            )
        if words and words[0].lower() == "on":
            self.advisor.install()
        elif words:
            self.advisor.uninstall()
        print(f"gpu_advice: {'on' if self.advisor.enabled else 'off'}")


MAGIC_CLASSES.append(AdvisorMagics)


# ---------------------------------------------------------------- %gpu_panel


@magics_class
class PanelMagics(GuardMagics):
    def on_load(self) -> None:
        self.registration.add_cleanup(self._stop_panel)

    def _stop_panel(self) -> None:
        import sys

        panel_module = sys.modules.get(f"{__package__}.panel")
        if panel_module is not None:  # never imported: no panel to stop
            panel_module.stop_panels(self.shell)

    @magic_arguments()
    @argument("--new", action="store_true", help="close the current panel and show a fresh one")
    @argument("--close", action="store_true", help="close the panel (it stops refreshing)")
    @line_magic
    def gpu_panel(self, line: str = "") -> None:
        """Show the live GPU panel: driver and CUDA versions, context health, a memory bar
        per GPU (this kernel's tensors, its allocator cache, CUDA context + other libraries,
        other processes, free), the biggest leftover arrays, a per-cell memory chart, and
        buttons: Refresh, Free memory (gpu_reset), Seed (seed_all).

        It refreshes after every cell while shown. A slow snapshot (looking for leftovers
        among 10^5 arrays takes about 0.5 s) is taken again after a cell only once it costs
        at most a tenth of the time since the last one; until then the leftovers shown say
        how old they are, and Refresh looks again. One panel per kernel: running
        %gpu_panel again shows the same live panel. Core ipywidgets only, so it renders in
        Colab, JupyterLab, Notebook and VS Code. From code: ``colab_gpu_guard.panel()``.

        Examples::

          %gpu_panel           # show the panel
          %gpu_panel --new     # replace it with a fresh one
          %gpu_panel --close   # close it (no more refreshes)
        """
        from IPython.display import display

        from . import panel as panel_module

        args = parse_argstring(self.gpu_panel, line)
        if args.close:
            current = panel_module.current_panel(self.shell)
            if current is not None:
                current.close()
            print("gpu_panel: closed" if current is not None else "gpu_panel: no panel open")
            return
        widget = panel_module.panel(self.shell, new=args.new, registration=self.registration)
        display(widget)


MAGIC_CLASSES.append(PanelMagics)


# ---------------------------------------------------------------- %gpu_reset, %gpu_history

GPU_RESET_USAGE = "%gpu_reset [NAME ...] [--all] [--dry-run]"
GPU_HISTORY_USAGE = "%gpu_history [--limit N]"


@magics_class
class ResetMagics(GuardMagics):
    def __init__(self, shell: Any, registration: Registration) -> None:
        super().__init__(shell, registration)
        self.tracker: Any = None

    def on_load(self) -> None:
        from . import tracker

        self.tracker = tracker.install(self.registration)

    @magic_arguments()
    @argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="user variables to delete too (only these; none by default)",
    )
    @argument(
        "--all",
        dest="all_vars",
        action="store_true",
        help="delete every user variable that holds accelerator memory (CPU torch tensors "
        "when there is no accelerator); not with names",
    )
    @argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="change nothing: list what would be dropped and about how much would be freed",
    )
    @line_magic
    def gpu_reset(self, line: str = "") -> None:
        """Free the memory a notebook keeps alive behind your back, then show what was
        freed and what is still held, by name.

        1. Drops output history that holds arrays (Out[N], _N, _, __, ___; plain outputs
           stay), including the copies IPython's own %reset -f out leaves alive in
           user_ns_hidden, the last cell's result, the last exception (sys.last_value &
           co.) with its traceback frames' locals and chained exceptions, and %debug's
           frames.
        2. Deletes the variables you name (or, with --all, every variable holding
           accelerator memory). No other variable is touched.
        3. gc.collect(); torch: synchronize, empty_cache, ipc_collect; CuPy pools;
           jax.clear_caches(). A broken CUDA context is detected, the CUDA steps are
           skipped, and you are told to restart the runtime.
        4. Prints allocated/reserved before and after per device, NVML used, bytes freed,
           and the arrays still alive (find_leftovers()).

        Examples::

          %gpu_reset                  # drop hidden references, empty caches
          %gpu_reset model opt        # ... and delete `model` and `opt`
          %gpu_reset --all            # ... and every variable holding GPU memory
          %gpu_reset --dry-run        # show what would be dropped/freed; change nothing

        From code: ``colab_gpu_guard.gpu_reset("model", dry_run=True)`` returns the report.
        """
        from . import memory

        args = parse_argstring(self.gpu_reset, line)
        try:
            report = memory.gpu_reset(
                *args.names, all_vars=args.all_vars, dry_run=args.dry_run, shell=self.shell
            )
        except (TypeError, ValueError) as error:
            raise usage_error(error, GPU_RESET_USAGE) from None
        except Exception as error:  # never a raw traceback from the magic
            print(
                f"gpu_reset: failed: {type(error).__name__}: {error}\n"
                "If CUDA reported an error, restart the runtime."
            )
            return
        print(report)

    @magic_arguments()
    @argument(
        "--limit",
        type=int,
        default=None,
        metavar="N",
        help="show only the last N cells (default: all recorded, at most 500)",
    )
    @line_magic
    def gpu_history(self, line: str = "") -> None:
        """Show each cell's memory effect since the extension was loaded.

        Per cell: time, torch CUDA allocated before/after, change, peak during the cell,
        reserved, CUDA out-of-memory errors, NVML used, host RSS, and LEAK when the same
        cell source, run again, ended with more memory than its previous run did.

        Examples::

          %gpu_history              # every recorded cell (the last 500 at most)
          %gpu_history --limit 10   # the last 10

        From code: ``colab_gpu_guard.memory_history()`` (dataclasses) and
        ``colab_gpu_guard.format_history(...)``.
        """
        from . import tracker

        args = parse_argstring(self.gpu_history, line)
        if args.limit is not None and args.limit < 0:
            raise usage_error(ValueError("--limit must be 0 or more"), GPU_HISTORY_USAGE)
        history = self.tracker.history() if self.tracker is not None else []
        print(tracker.format_history(history, limit=args.limit))


MAGIC_CLASSES.append(ResetMagics)
