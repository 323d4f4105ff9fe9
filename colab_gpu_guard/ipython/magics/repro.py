"""%repro: the reproducibility record of this kernel, saved as JSON or compared with one."""

from __future__ import annotations

import os
from typing import Any, Optional

from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments

from .base import GuardMagics, conflicts, help_format, parse_line, read_value, usage_error

REFERENCE = """\
Examples:

```text
%repro                       # a short summary (-v: every field)
%repro --save run.json       # write the record as JSON
%repro --diff run.json       # what differs from that run, and what it does
                             # to the numbers, most important first (-v: how each works)
%repro --json                # JSON (schema: colab_gpu_guard.seeding.repro.json_schema())
```

The record: the `%seed_all` seed and per-cell reseeding base, and the seeds torch's CPU
and CUDA generators hold however they were seeded (`torch.manual_seed`, Lightning's
`seed_everything`...); torch's deterministic settings (use_deterministic_algorithms,
cudnn.deterministic, cudnn.benchmark, mkldnn.deterministic); TF32 (matmul and cuDNN) and
float32 precision; fp16/bf16 reduced-precision reductions and the attention backends
(flash, memory-efficient, math, cuDNN); the default dtype, the MultiheadAttention fast
path and the GPU linear algebra library; CPU threads; the CPU's model, the instruction set
torch's CPU kernels use and whether oneDNN can compute in bf16 or TF32 on it; the
environment variables libraries read (CUBLAS_WORKSPACE_CONFIG, PYTHONHASHSEED,
CUDA_VISIBLE_DEVICES, NVIDIA_TF32_OVERRIDE, ATEN_CPU_CAPABILITY, XLA_FLAGS, thread
counts...); Python, NumPy, torch, CUDA runtime, cuDNN, driver, Triton and torchvision
versions; each GPU's model and compute capability (from NVML: no CUDA context is
created); world size and rank; the imported frameworks' versions.

`--diff` judges each difference on the two machines: a CUDA setting changes nothing where
neither record can run CUDA, bf16 matmul precision nothing on CPUs without bf16, and one
precision setting is one entry (`set_float32_matmul_precision`, `allow_tf32`, or an
`fp32_precision` node with the settings below it that follow it).

From code: `colab_gpu_guard.repro_record()` and `repro_diff(saved, current)`; from a
terminal or a DDP worker: `python -m colab_gpu_guard repro [--diff FILE]` (what the
machine decides; a program's seeds and torch flags only it can compare).
"""


@magics_class
class ReproMagics(GuardMagics):
    @conflicts(("--diff", "--save"), ("--diff", "--json"))
    @magic_arguments()
    @help_format()
    @argument(
        "-v",
        "--verbose",
        action="store_true",
        help="show every field, not the summary (with --diff: how each difference works)",
    )
    @argument("--json", action="store_true", help="print the record as JSON")
    @argument("--save", metavar="FILE", default=None, help="write the record to FILE as JSON")
    @argument(
        "--diff",
        metavar="FILE",
        default=None,
        help="compare a record saved with --save with this kernel",
    )
    @line_magic
    def repro(self, line: str = "") -> None:
        """Show what decides this kernel's numbers (seeds, deterministic and TF32
        settings, environment variables, versions, GPUs), save it, or compare it with a
        saved run.

        Example: %repro --diff run.json
        More (every field, from a terminal): colab_gpu_guard.reference('repro')
        """
        from ... import seeding

        args = self._parse(line)
        record = seeding.repro_record()
        if args.diff is not None:
            saved = read_value(self.repro, seeding.read_record, args.diff)
            diff = seeding.repro_diff(saved, record, args.diff, "this kernel")
            self._show(diff, diff.to_text(args.verbose), diff.to_html(args.verbose))
            return
        if args.save is not None:
            replaced = os.path.isfile(args.save)  # said, not refused: saving again is common
            failure = None
            try:
                with open(args.save, "w", encoding="utf-8") as handle:
                    handle.write(record.to_json() + "\n")
            except OSError as error:
                failure = usage_error(
                    ValueError(f"cannot write {args.save!r}: {error.strerror or error}"),
                    self.repro,
                )
            if failure is not None:
                raise failure  # outside the handler: no exception of ours chained to it
            print(
                f"repro: saved to {args.save}" + (" (replaced the file there)" if replaced else "")
            )
        if args.json:
            print(record.to_json())
            return
        self._show(record, record.to_text(verbose=args.verbose))

    def _parse(self, line: str) -> Any:
        args = parse_line(self.repro, line)
        args.diff, args.save = _path(args.diff), _path(args.save)
        return args

    def _show(self, report: Any, text: Optional[str] = None, html: Optional[str] = None) -> None:
        from IPython.display import display

        bundle = {"text/plain": text or str(report), "text/html": html or report._repr_html_()}
        display(bundle, raw=True)


def _path(text: Optional[str]) -> Optional[str]:
    """A FILE argument as typed: IPython's argument splitter keeps the quotes around a path
    with spaces, and nothing expands ``~``."""
    if text is None:
        return None
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "\"'":
        text = text[1:-1]
    return os.path.expanduser(text)
