"""``python -m colab_gpu_guard COMMAND``: the package's terminal commands, ``status`` and
``repro``.

Exit codes: 0 when the command could report (a machine without a GPU is a report too),
1 when it failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Callable, Optional, Sequence, TextIO

from .units import escape_text, unavailable

PROG = "python -m colab_gpu_guard"

# ANSI: cursor to the top-left, clear the screen.
CLEAR_SCREEN = "\x1b[H\x1b[2J"


def positive_seconds(text: str) -> float:
    """argparse type for --watch: a finite number of seconds above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of seconds above 0, got {text!r}"
        ) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number of seconds above 0, got {text!r}")
    return value


# ---------------------------------------------------------------- status


def add_status_command(subparsers: argparse._SubParsersAction) -> None:
    """``status [--json] [--processes] [--watch SECONDS]``: one GPU status snapshot (NVML
    beside this process's view) as text or JSON; with --watch, redrawn every SECONDS until
    Ctrl-C."""
    parser = subparsers.add_parser(
        "status",
        help="show GPU status: NVML's view and this process's",
        description="Show driver and CUDA versions, every GPU's memory, load, modes and "
        "processes, and host RAM. Works without a GPU (it says so).",
    )
    parser.add_argument("--json", action="store_true", help="print JSON (one line per refresh)")
    parser.add_argument("--processes", action="store_true", help="list every process on each GPU")
    parser.add_argument(
        "--watch",
        metavar="SECONDS",
        type=positive_seconds,
        default=None,
        help="refresh every SECONDS until Ctrl-C",
    )
    parser.set_defaults(handler=run_status)


def run_status(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    from . import status

    out = out or sys.stdout
    limit = None if args.processes else status.DEFAULT_PROCESS_LIMIT

    def render() -> str:
        snapshot = status.gpu_status(leftovers=False, process_limit=limit)
        if args.json:
            return snapshot.to_json(indent=None if args.watch else 2)
        return snapshot.to_text()

    if args.watch is None:
        out.write(render() + "\n")
        out.flush()
        return 0
    redraw = _isatty(out) and not args.json and os.environ.get("TERM") != "dumb"
    try:
        while True:
            text = render()
            if redraw:
                footer = f"\n(refreshing every {args.watch:g} s; Ctrl-C to stop)"
                out.write(CLEAR_SCREEN + text + footer + "\n")
            elif args.json:
                out.write(text + "\n")
            else:
                out.write(text + "\n\n")
            out.flush()
            time.sleep(args.watch)
    except KeyboardInterrupt:
        if redraw:
            out.write("\n")
            out.flush()
        return 0


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


# ---------------------------------------------------------------- repro


def add_repro_command(subparsers: argparse._SubParsersAction) -> None:
    """``repro [--diff FILE] [--json] [-v]``: this process's reproducibility record
    (versions, GPUs, env, torch's default flags), or what differs on this machine from a
    record saved with `%repro --save FILE` (seeds and torch flags are the program's:
    compared only by %repro --diff inside it)."""
    parser = subparsers.add_parser(
        "repro",
        help="show this process's reproducibility record, or diff it with a saved one",
        description="Show what decides a run's numbers here: Python, NumPy, torch, CUDA, "
        "cuDNN and driver versions, GPU models and compute capabilities, world size and "
        "rank, the environment variables libraries read, and torch's flags (as a new "
        "process has them: flags a running program set are recorded by "
        "colab_gpu_guard.repro_record() or %repro inside it). Imports torch if installed.",
    )
    parser.add_argument(
        "--diff",
        metavar="FILE",
        default=None,
        help="compare a record saved with %%repro --save FILE with this machine (versions, "
        "GPUs, environment, ranks; not seeds or torch flags, which only the program knows)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="show every field")
    parser.set_defaults(handler=run_repro)


# This command's process runs no model: its seeds and torch flags are nobody's.
FRESH_LABEL = "this command's own process: no program's seeds or torch flags"
NOT_COMPARED = (
    "seeds and torch flags are set by the program that runs, which this command cannot see: "
    "they were not compared, except the CPU threads torch uses by default here (compare "
    "them inside the program: %repro --diff FILE, or "
    "colab_gpu_guard.repro_diff(read_record(FILE), repro_record()))"
)


def run_repro(args: argparse.Namespace, out: Optional[TextIO] = None) -> int:
    from . import seeding

    out = out or sys.stdout
    record = dataclasses.replace(seeding.repro_record(import_torch=True), label=FRESH_LABEL)
    if args.diff is None:
        text = record.to_json() if args.json else record.to_text(verbose=args.verbose)
    else:
        try:
            saved = seeding.read_record(args.diff)
        except ValueError as error:
            sys.stderr.write(escape_text(f"{PROG} repro: error: {error}") + "\n")
            return 2
        # Compare what this machine decides (versions, GPUs, CPU, env, ranks) as if the
        # saved program ran here with its own seeds and flags. CPU threads are the
        # machine's (torch uses every core unless told otherwise): this process's count.
        if record.versions.torch is not None:
            flags = dataclasses.replace(
                saved.torch_flags, cpu_threads=record.torch_flags.cpu_threads
            )
            record = dataclasses.replace(record, torch_flags=flags)
        env = dict(record.env)
        if saved.seeding.seed is not None and saved.env_value("PYTHONHASHSEED") == str(
            saved.seeding.seed
        ):  # seed_all set it in the program
            env["PYTHONHASHSEED"] = str(saved.seeding.seed)
        for name, value in seeding.program_set_env(saved).items():
            if env.get(name) is None:  # the program would set it here too
                env[name] = value
        record = dataclasses.replace(record, seeding=saved.seeding, env=tuple(env.items()))
        diff = seeding.repro_diff(saved, record, args.diff)
        diff = dataclasses.replace(diff, notes=(*diff.notes, NOT_COMPARED))
        text = json.dumps(diff.to_dict(), indent=2) if args.json else diff.to_text(args.verbose)
    out.write(text + "\n")
    out.flush()
    return 0


# ---------------------------------------------------------------- the program

# Add a command with a function that takes the subparsers object (see `add_status_command`)
# and list it here.
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_status_command,
    add_repro_command,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="colab_gpu_guard from a terminal.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add_command in COMMANDS:
        add_command(subparsers)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run one command; returns the exit code (2 for bad arguments)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2)
        return exit_.code if isinstance(exit_.code, int) else 2
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_usage(sys.stderr)
        sys.stderr.write(f"{PROG}: error: choose a command (e.g. status); see --help\n")
        return 2
    try:
        return int(handler(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, without a traceback at exit.
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0
    except Exception as error:  # the CLI's edge: any failure in one line, no traceback
        reason = unavailable(error, f"{PROG} {args.command}: error").reason
        sys.stderr.write(escape_text(reason) + "\n")  # one line, whatever the error says
        return 1


if __name__ == "__main__":
    sys.exit(main())
