"""%gpu_reset: free what a notebook keeps alive behind your back, and say what is left."""

from __future__ import annotations

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, conflicts, help_format, parse_line, usage_error

REFERENCE = """\
Examples:

```text
%gpu_reset                  # drop hidden references, empty caches
%gpu_reset model opt        # ... and delete `model` and `opt`
%gpu_reset --all            # ... and every variable holding GPU memory
%gpu_reset --dry-run        # show what would be dropped and freed; change nothing
```

What it does, in order:

1. Drops the output history entries that hold arrays (`Out[N]`, `_N`, `_`, `__`, `___`;
   plain outputs stay), including the copies IPython's own `%reset -f out` leaves alive in
   IPython's hidden namespace, the last cell's result, the last exception
   (`sys.last_value` and the like) with its traceback frames' local variables and chained
   exceptions, and `%debug`'s frames.
2. Deletes the variables you name (or, with `--all`, every variable holding accelerator
   memory: CUDA/ROCm, MPS or XPU through torch, CuPy, JAX on a GPU; on a CPU-only runtime
   none, and it says so: name host tensors to delete them). No other variable is touched;
   Python's own names (`__name__`, `__builtins__`, ...) are never deleted.
3. Runs Python's garbage collector; torch: synchronize, `empty_cache`, `ipc_collect`; CuPy's
   memory pools; `jax.clear_caches()`. When this process's CUDA context is unusable (after
   a device-side assert, for instance) the CUDA steps are skipped, and you are told to
   restart the runtime.
4. Prints allocated and reserved memory before and after per device, NVML used, the memory
   freed, host memory allocated where it fell by 1 MiB or more (glibc's malloc figure,
   not the resident size: it also counts arrays only the garbage collector reached), and
   the arrays still held (`colab_gpu_guard.find_leftovers()`).

From code: `colab_gpu_guard.gpu_reset("model", dry_run=True)` returns the report.

### What the scan cannot see

`%gpu_reset`, `%gpu_status`, the panel and `find_leftovers()` share one scan. It starts
from the notebook's variables, the output history, the last exception's frames and the
debugger's, the globals of your own modules (`nbutils._cache`, as you imported it),
logging's loggers with handlers, `weakref.finalize`'s finalizers and running threads
(their arguments), and walks into containers, objects' attributes and slots, closures,
generators, iterators, `nn.Module`s, optimizers, the standard library's and other
libraries' objects (a `Future`'s result, a logging handler's records, a queue's items)
and pandas frames (by their NumPy blocks), without running any of your code. It does not
see, or counts only in part:

- **Installed packages' and the standard library's module globals** (a library's
  module-level cache) and what only they reach: not searched. (Your own modules' globals
  are, the files beside the notebook or on Drive: `%gpu_reset` names them and never
  deletes them, `del nbutils._cache` does.) `find_leftovers(deep=True)` lists the torch,
  CuPy and JAX arrays alive that no name reaches (`<unnamed ...>`, with what refers to
  them), and per GPU the gap between what it found and `torch.cuda.memory_allocated()`. A
  reset says how much it expected to free and found still in use.
- **A registry that keeps an object beyond its name**, other than logging's (loggers with
  handlers, `<logging.getLogger('x')>`) and `weakref.finalize`'s (a finalizer keeps its
  arguments until it runs, `<weakref.finalize cleanup>.args[0]`; a reset never runs or
  removes one). Not read: `atexit` callbacks (Python keeps them where no code reads them
  without running them), the hooks `torch.nn.modules.module.register_module_forward_hook`
  keeps for every module, an installed package's own finalizers. A dry run counts what
  only such a registry keeps, and the reset then says how much it expected to free and
  found still in use.
- **Memory only C or C++ code holds**: what a C extension keeps without telling Python's
  garbage collector, CUDA graph pools, caches inside libraries. It shows only as that
  gap. (Autograd graphs are measured: what they saved is counted with their tensor.)
- **Local variables of a function still running** (another thread, an executing
  generator): not walked (a running thread's arguments are, `<thread 'loader'>._args[0]`).
  A deep scan names such a tensor by its variable, function and thread.
- **Libraries whose arrays live in buffers no Python object shows**: cuDF, Polars,
  TensorFlow, and Arrow's tensors. Their holders are named, "not looked into: `gdf`
  (cudf.core.dataframe.DataFrame)", and not counted. (Arrow's arrays, chunked arrays,
  tables are counted by their buffers; a pandas column of Arrow strings, nullable
  numbers, categories or dates is listed as its column, `df['name']  str [100000]`.)
- **Files on disk mapped into memory** (a NumPy memmap, an Arrow memory map such as a
  Hugging Face dataset's, `torch.load(..., mmap=True)`; Linux): not counted, as the system
  reads such a file into RAM as it is used and can drop those pages again; a note names
  the variable, the file and its size. (Counted: a file in memory, on a tmpfs such as
  /dev/shm, and a private mapping once written to, as `torch.load(mmap=True)`'s is when a
  tensor changes in place: its pages are copies in the kernel's own RAM then.)
- **The Python objects inside NumPy object arrays** (a pandas object or string column):
  the array counts its pointers, 8 bytes an item; arrays among its items are listed on
  their own, strings and other objects are not counted.
- **A tensor over a NumPy array no name reaches** (`torch.from_numpy(a[10:])` after
  `del a`): it counts the part of the buffer it spans, not the whole buffer it keeps.
- **NumPy arrays no name reaches**: the garbage collector does not track them, so a deep
  scan cannot list them.
- **What lies deeper than 100 containers** (a note names the variables it lies in), or
  past the time budget (5 s for `find_leftovers()`, 2 s for `%gpu_status` and the panel,
  10 s for each of a reset's scans): the report then says which containers it did not
  search to the end.
- Weak references (`weakref.ref`, `WeakValueDictionary`) keep nothing alive and are not
  counted; memory other processes use (DataLoader workers) is listed by `%gpu_status`'s
  processes, not as leftovers; memory torch's allocator caches is not an array
  (`%gpu_reset` empties it).
"""


@magics_class
class ResetMagics(GuardMagics):
    @conflicts(("--all", "NAME"))
    @magic_arguments()
    @help_format()
    @argument("names", nargs="*", metavar="NAME", help="variables to delete too (none by default)")
    @argument(
        "--all",
        dest="all_vars",
        action="store_true",
        help="delete every variable that holds GPU memory; not with NAME",
    )
    @argument(
        "--dry-run",
        dest="dry_run",
        action="store_true",
        help="change nothing: show what would be dropped and freed",
    )
    @argument(
        "-v",
        "--verbose",
        action="store_true",
        help="also every reference dropped and what Python's garbage collector found",
    )
    @line_magic
    def gpu_reset(self, line: str = "") -> None:
        """Free the memory a notebook keeps alive behind your back (output history, the
        last error's traceback, cached GPU memory), then show what was freed and what is
        still held, by name. Your variables stay, unless you name them or give --all.

        Example: %gpu_reset model opt
        More (what it drops, in order): colab_gpu_guard.reference('gpu_reset')
        """
        from ...reset import apply as reset

        args = parse_line(self.gpu_reset, line)
        failure = None
        try:
            report = reset.gpu_reset(
                *args.names, all_vars=args.all_vars, dry_run=args.dry_run, shell=self.shell
            )
        except (TypeError, ValueError) as error:
            failure = usage_error(error, self.gpu_reset)
        except Exception as error:  # never a raw traceback from the magic
            print(
                f"gpu_reset: failed: {type(error).__name__}: {error}\n"
                "If CUDA reported an error, restart the runtime."
            )
            return
        if failure is not None:
            raise failure  # outside the handler: no internal exception chained to it
        print(report.to_text(verbose=args.verbose))
