"""%%gpu_trace: a cell's CUDA memory by the line that allocated it; %gpu_trace on|off
traces every following cell."""

from __future__ import annotations

import ast
import os
import sys
from typing import TYPE_CHECKING, Any, Optional

from IPython.core.magic import line_cell_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, conflicts, help_format, parse_line, usage_error

if TYPE_CHECKING:
    from ...trace.recording import Recorder

REFERENCE = """\
Examples:

```text
%%gpu_trace                      # this cell: its peak, what was alive at it, what it kept
%%gpu_trace --save trace.pickle  # also torch's own snapshot (pytorch.org/memory_viz opens it)
%gpu_trace on                    # each following cell that allocates, until %gpu_trace off
```

Under the cell's output: its **peak** (allocated and reserved, as torch's
`memory_allocated` / `memory_reserved` count them; docs/trace.md says how), what was alive
at the peak grouped by the **line of your notebook** that allocated it
(`[5] line 12  out = model(x)`), the lines of your own modules under it, torch's and other
libraries' frames folded away; what the cell **kept** (allocated in it and still alive at
its end) by line, with the variables that hold it (`<- losses`); and a **timeline** of
allocated memory over the cell's allocator events, the peak marked and the biggest
allocations labelled by line (HTML: an inline picture in the theme's colours, no script;
text: one line of bars). A cell that runs out of memory says which line asked, for how
much, and how much was free.

How: torch's allocator history (`torch.cuda.memory._record_memory_history`, Python stacks
only) is switched on before the cell, at most `--max-entries` events (default 100,000;
each several KB of host memory; when the cell makes more, the oldest are dropped and the
report says so), and switched off after it. Recording slows each CUDA allocation (see
`bench/bench_trace.py` for a training step traced against untraced). Where a recording of
your own is already on, it is left untouched (switching it off would discard its history)
and this cell's events are read from it; the report says so. Allocations made by torch's
own threads (the backward pass) carry no Python line and are listed as such.

The variables that hold what a cell kept come from a `find_leftovers` scan after the cell,
limited to 0.1 s by default (the report gives its time, and says when it stopped short);
`--names` runs the full scan.

Cells are named as IPython shows them: `In [5]` is `[5]`, on IPython 7.34 (file names
`<ipython-input-5-...>`, or ipykernel's hashed ones) and IPython 8/9 alike.

At a CUDA out-of-memory error while tracing is on, torch's out-of-memory observer keeps
what was alive at the failure (attached once per kernel; the last firing is kept, as
convolutions retry): `colab_gpu_guard.trace.at_failure(error)` gives its top lines
("at the failure: 6.1 GiB from `[7] line 3  logits = model(batch)`").

Without CUDA (a CPU runtime, a CPU-only torch) it says so in one line and runs the cell
untraced. There is no CPU view: torch's profiler memory events were measured as the
source of one (torch 2.13, `torch.profiler.profile(profile_memory=True, with_stack=True)`)
and they name the calling function's first line rather than the line that allocated, and
leave out allocations they cannot tie to a tensor (a 64 MiB `big * 2` result was missing),
so a per-line view from them would not be true.

From code: `with colab_gpu_guard.trace_cell() as tracing: ...` then `tracing.report`
(text, HTML, `to_dict()`).
"""


@magics_class
class TraceMagics(GuardMagics):
    following: Optional[Following] = None

    def on_load(self) -> None:
        self.registration.add_cleanup(self._switch_off)

    @conflicts(("off", "--names"), ("off", "--max-entries"))
    @magic_arguments()
    @help_format()
    @argument(
        "--max-entries",
        type=int,
        default=None,
        metavar="N",
        help="keep at most N allocator events (default 100000)",
    )
    @argument("--save", default=None, metavar="FILE", help="also write torch's snapshot pickle")
    @argument("--names", action="store_true", help="full scan for the names holding what was kept")
    @argument(
        "switch",
        nargs="?",
        type=str.lower,
        choices=("on", "off"),
        default=None,
        metavar="on|off",
        help="line form: trace every following cell, or stop",
    )
    @line_cell_magic
    def gpu_trace(self, line: str = "", cell: Optional[str] = None) -> Any:
        """Show what a cell allocated on the GPU, line by line: its peak, what was alive
        at it by the notebook line that allocated it, what the cell kept, a timeline.

        Example: %gpu_trace on   (or %%gpu_trace as the first line of one cell)
        More (what it records, its cost, your own recording): colab_gpu_guard.reference('gpu_trace')
        """
        __tracebackhide__ = True  # noqa: F841  (IPython 8+ hides this frame in tracebacks)
        from ...trace.recording import DEFAULT_MAX_ENTRIES

        args = parse_line(self.gpu_trace, line)
        max_entries = args.max_entries if args.max_entries is not None else DEFAULT_MAX_ENTRIES
        if max_entries < 1:
            raise usage_error(ValueError("--max-entries must be 1 or more"), self.gpu_trace)
        if cell is None:
            return self._line(args.switch, max_entries, args)
        if args.switch is not None:
            raise usage_error(
                ValueError(f"'{args.switch}' is for the line form: %gpu_trace {args.switch}"),
                self.gpu_trace,
            )
        given = [
            option
            for option, value in (
                ("--save", args.save),
                ("--names", args.names or None),
                ("--max-entries", args.max_entries),
            )
            if value is not None
        ]
        if self.following is not None and given:  # they would not apply: the cell runs traced
            raise usage_error(
                ValueError(
                    f"{', '.join(given)}: every cell is traced already by %gpu_trace on "
                    "(%gpu_trace off first, then %%gpu_trace with them)"
                ),
                self.gpu_trace,
            )
        return self._cell(cell, max_entries, args.save, args.names)

    # ------------------------------------------------------------ %%gpu_trace

    def _cell(self, cell: str, max_entries: int, save: Optional[str], names: bool) -> Any:
        __tracebackhide__ = True  # noqa: F841
        from ...trace.recording import Recorder, cuda_torch, untraced
        from ...units import Unavailable, error_text

        if self.following is not None:
            print("gpu_trace: every cell is traced already (%gpu_trace off to stop)")
            return self._run(cell)
        if save is not None and not os.path.isdir(os.path.dirname(os.path.abspath(save))):
            folder = os.path.dirname(os.path.abspath(save))
            raise usage_error(ValueError(f"--save: no folder {folder!r}"), self.gpu_trace)
        torch = cuda_torch()
        if isinstance(torch, Unavailable):
            print(f"gpu_trace: {untraced(torch)}{_not_saved(save)}")
            return self._run(cell)
        recorder = Recorder(torch, max_entries, self.shell)
        failure = None
        try:
            recorder.start()
        except RuntimeError as error:  # CUDA unusable (a device-side assert before)
            failure = error_text(error)
        if failure is not None:
            print(
                f"gpu_trace: CUDA cannot record here ({failure}); the cell ran untraced"
                f"{_not_saved(save)}"
            )
            return self._run(cell)
        try:
            return self._run(cell)
        finally:
            _show(_finish(recorder, save, names))

    def _run(self, cell: str) -> Any:
        """Run the cell's body in the user's namespace, compiled under a name IPython
        knows as this cell's, its lines numbered as the cell shows them (the magic's line
        is line 1); the value of a last expression is returned (IPython shows it)."""
        __tracebackhide__ = True  # noqa: F841
        from ...notebook_refs import cell_files

        shell = self.shell
        number = cell_files.running_cell_number(shell)
        transformed = shell.transform_cell(cell)
        # IPython drops a cell's leading blank lines: put them back, and the magic's line
        source = "\n" * (1 + _leading_blank(cell) - _leading_blank(transformed)) + transformed
        name = shell.compile.cache(source, number or 0, raw_code=source)
        if number is not None:
            cell_files.remember(name, number)
        tree = ast.parse(source, filename=name)
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(shell.compile(tree, name, "exec"), shell.user_ns)
        if last is not None:
            return eval(shell.compile(last, name, "eval"), shell.user_ns)
        return None

    # ------------------------------------------------------------ %gpu_trace on|off

    def _line(self, switch: Optional[str], max_entries: int, args: Any) -> None:
        from ...trace.recording import cuda_torch
        from ...units import Unavailable

        if args.save is not None:
            raise usage_error(
                ValueError("--save is for one cell: %%gpu_trace --save FILE"), self.gpu_trace
            )
        if switch is None and (args.names or args.max_entries is not None):
            option = "--names" if args.names else "--max-entries"
            raise usage_error(  # it would be dropped: the line alone says whether tracing is on
                ValueError(
                    f"{option} applies to tracing: %gpu_trace on {option} (every cell) or "
                    f"%%gpu_trace {option} (one cell)"
                ),
                self.gpu_trace,
            )
        if switch is None:
            state = "on" if self.following is not None else "off"
            print(
                f"gpu_trace: tracing every cell is {state} (%gpu_trace on|off; %%gpu_trace "
                "as a cell's first line traces that cell)"
            )
            return
        if switch == "off":
            was_on = self.following is not None
            self._switch_off()
            print("gpu_trace: off" if was_on else "gpu_trace: was not on")
            return
        torch = cuda_torch()
        if isinstance(torch, Unavailable):
            print(f"gpu_trace: {torch.reason}; cells run untraced")
            return
        if self.following is None:
            self.following = Following(self, torch)
        self.following.max_entries = max_entries
        self.following.names = args.names
        print("gpu_trace: on from the next cell (each cell's report under its output)")

    def _switch_off(self) -> None:
        following, self.following = self.following, None
        if following is not None:
            following.close()


class Following:
    """The line form: a recording per cell, from ``pre_run_cell`` to ``post_run_cell``."""

    def __init__(self, magics: TraceMagics, torch: Any) -> None:
        self.registration = magics.registration
        self.shell = magics.shell
        self.torch = torch
        self.max_entries = 0
        self.names = False
        self.recorder: Optional[Recorder] = None
        self.registration.register_event("pre_run_cell", self.pre_run_cell)
        self.registration.register_event("post_run_cell", self.post_run_cell)

    def pre_run_cell(self, info: Any = None) -> None:
        from ...trace.recording import Recorder
        from ...units import error_text

        recorder = Recorder(self.torch, self.max_entries, self.shell)
        try:
            recorder.start()
        except RuntimeError as error:  # CUDA unusable (a device-side assert before)
            print(f"gpu_trace: this cell runs untraced: {error_text(error)}")
            return
        self.recorder = recorder

    def post_run_cell(self, result: Any = None) -> None:
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            number = getattr(result, "execution_count", None)
            if isinstance(number, int):  # (IPython 8+ has no running cell at pre_run_cell)
                recorder.cell = number
            report = _finish(recorder, None, self.names)
            if report.devices or report.unavailable is not None:
                _show(report)  # a cell that allocated no CUDA memory gets no line

    def close(self) -> None:
        """Stop: the running cell's recording (the `%gpu_trace off` cell's) is switched off
        and not shown."""
        self.registration.unregister_event("pre_run_cell", self.pre_run_cell)
        self.registration.unregister_event("post_run_cell", self.post_run_cell)
        recorder, self.recorder = self.recorder, None
        if recorder is not None:
            recorder.stop()


def _not_saved(save: Optional[str]) -> str:
    """What an untraced cell's line adds where `--save FILE` was asked for: no file."""
    if save is None:
        return ""
    from ...units import escape_text

    return f" (nothing written to {escape_text(save)})"


def _leading_blank(text: str) -> int:
    count = 0
    for line in text.splitlines():
        if line.strip():
            break
        count += 1
    return count


def _finish(recorder: Recorder, save: Optional[str], names: bool) -> Any:
    from ...trace.recording import link_names

    report = recorder.stop(save)
    if report.unavailable is None:
        report = link_names(report, requested=names)
    return report


def _show(report: Any) -> None:
    from IPython.display import display

    # both forms whatever the shell's formatters: notebooks render the HTML, terminals text
    display({"text/plain": str(report), "text/html": report._repr_html_()}, raw=True)
    sys.stdout.flush()
