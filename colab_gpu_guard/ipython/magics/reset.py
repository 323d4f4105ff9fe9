"""%gpu_reset: free what a notebook keeps alive behind your back, and say what is left."""

from __future__ import annotations

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, parse_line, usage_error

GPU_RESET_USAGE = "%gpu_reset [NAME ...] [--all] [--dry-run]"


@magics_class
class ResetMagics(GuardMagics):
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
           host memory in use where it fell by 1 MiB or more (glibc's malloc figure: it
           also counts arrays only the garbage collector reached), and the arrays still
           alive (find_leftovers()).

        Examples::

          %gpu_reset                  # drop hidden references, empty caches
          %gpu_reset model opt        # ... and delete `model` and `opt`
          %gpu_reset --all            # ... and every variable holding GPU memory
          %gpu_reset --dry-run        # show what would be dropped/freed; change nothing

        From code: ``colab_gpu_guard.gpu_reset("model", dry_run=True)`` returns the report.
        """
        from ...reset import apply as reset

        args = parse_line(self.gpu_reset, line, GPU_RESET_USAGE)
        failure = None
        try:
            report = reset.gpu_reset(
                *args.names, all_vars=args.all_vars, dry_run=args.dry_run, shell=self.shell
            )
        except (TypeError, ValueError) as error:
            failure = usage_error(error, GPU_RESET_USAGE)
        except Exception as error:  # never a raw traceback from the magic
            print(
                f"gpu_reset: failed: {type(error).__name__}: {error}\n"
                "If CUDA reported an error, restart the runtime."
            )
            return
        if failure is not None:
            raise failure  # outside the handler: no internal exception chained to it
        print(report)
