"""The magics reference: each magic's help (its `%magic?` text), the rest of what it does
(the `REFERENCE` text of its module) and a glossary of the words the reports use. In a
notebook, `colab_gpu_guard.reference('gpu_history')`, also where the package came from a
wheel; docs/reference.md is the same text (tools/magic_reference.py writes it)."""

from __future__ import annotations

import sys
from typing import Optional

from . import line_magics

# The words the reports use that a PyTorch user may not know, each checked against the code
# that prints it (named in the comment).
GLOSSARY: tuple[tuple[str, str], ...] = (
    # notebook_refs/shell.py (UNDERSCORES, output_history), notebook_refs/roots.py
    (
        "output history",
        "IPython keeps every result a cell displays: `Out[N]` (also `_N`), and the last "
        "three in `_`, `__` and `___`. A tensor shown as a cell's result stays alive there "
        "after you `del` it. End the line with `;` to show nothing and keep nothing; "
        "`%gpu_reset` drops the entries that hold arrays.",
    ),
    # cells/history_text.py (leak_text, held_by_text)
    (
        "LEAK line",
        "In `%gpu_history`: the same cell code, run again, kept memory again (its run before "
        "kept some too, on the same device). The line says how much, which run came before, "
        "and what holds the earlier run's objects where it can tell.",
    ),
    # status/text.py (kernel_line), cells/history_text.py: torch.cuda.memory_allocated()
    (
        "allocated",
        "Memory in torch tensors on a device (`torch.cuda.memory_allocated()`).",
    ),
    # status/text.py (kernel_line), reset/: torch.cuda.memory_reserved(), empty_cache()
    (
        "reserved",
        "Memory torch's allocator holds on a device: allocated, plus freed memory it keeps "
        "for reuse (`torch.cuda.memory_reserved()`). Other processes cannot use it; "
        "`%gpu_reset` gives the unused part back. In `%gpu_status`'s GPU line, \"reserved by "
        'the driver" is another figure: memory the driver and firmware set aside (NVML).',
    ),
    # status/text.py (memory_line, the history line "NVML used, all processes")
    (
        "NVML used",
        "A GPU's used memory as NVIDIA's management library (NVML, the source of "
        "`nvidia-smi`) reports it: every process on the GPU, and in each the CUDA context "
        "and libraries as well as tensors. So it is more than allocated or reserved.",
    ),
    # cuda_health.py; status/text.py (kernel_line: "CUDA context + other libraries")
    (
        "CUDA context",
        "What CUDA sets up in a process on its first GPU use; it takes GPU memory of its "
        "own, which NVML counts and torch does not. After some errors (a device-side "
        "assert) it is unusable until the runtime restarts.",
    ),
    # cells/history_text.py (peak_text)
    (
        "peak",
        'The most memory torch had allocated during a cell; "<= X" is an upper bound '
        "(see `%gpu_history`).",
    ),
    # cells/ (rss_after), host_memory.py
    (
        "host RSS",
        "The memory this Python process uses on the host (the machine's RAM, not the GPU). "
        "It covers the whole process, not only arrays.",
    ),
    # leftovers/, reset/report.py
    (
        "still held (leftovers)",
        "Arrays still alive between runs, named by the variable or container that holds "
        'them, e.g. `model.0.weight` or `Out[7]`. "also: b, Out[3]" names the other names '
        "that reach the same memory (`b = a`, a view, a result shown by a cell); a name "
        'listed last with "no array of its own" reaches memory names above hold (`Out[7]` '
        "showing `model`): each must go for that memory to be freed.",
    ),
    (
        "traceback frame",
        "A failed cell's traceback keeps the local variables of each function it went "
        "through, listed as `<traceback: train() local 'batch'>` (`f() #2`: the second call "
        "of `f` on it); the locals of an installed package's functions (torch's own, inside "
        "a model's forward) are listed together as `<traceback: inside torch>`. "
        "`%gpu_reset` releases them.",
    ),
)


def help_text(function) -> str:
    """A magic's `%magic?` text, without the "::" that marks its usage line as code, and
    with argparse's heading as Python 3.10 and later write it (3.9: "optional arguments:")."""
    text = function.__doc__.strip().removeprefix("::").strip()
    return text.replace("\noptional arguments:\n", "\noptions:\n")


def conflicts_text(function) -> str:
    """The magic's options that contradict each other (its `conflicts`), one line: given
    together they are a usage error that changes nothing; '' for none."""
    pairs = getattr(function, "conflicts", ())
    if not pairs:
        return ""
    listed = "; ".join(f"`{first}` with `{second}`" for first, second in pairs)
    return f"Not together (a usage error that changes nothing): {listed}.\n"


def glossary() -> str:
    lines = ["## Words in the reports", ""]
    lines += [f"- **{term}**: {meaning}" for term, meaning in GLOSSARY]
    return "\n".join(lines) + "\n"


def sections() -> dict[str, str]:
    """Each magic's section of the reference (its help, its options that contradict each
    other, its REFERENCE text) by name, in the order the magics are registered."""
    parts = {}
    for name, function in line_magics().items():
        module = sys.modules[function.__module__]
        lines = [f"## `%{name}`\n\n```text\n{help_text(function)}\n```\n"]
        if conflicts_text(function):
            lines.append(conflicts_text(function))
        parts[name] = "\n".join([*lines, module.REFERENCE])
    return parts


def reference_text() -> str:
    """The whole reference: a line of contents, every magic's section, the glossary."""
    found = sections()
    contents = ", ".join(f"[`%{name}`](#{name})" for name in found)
    parts = [f"Magics: {contents}. Then: [words in the reports](#words-in-the-reports).\n"]
    return "\n".join([*parts, *found.values(), glossary()])


class Reference(str):
    """Reference text (Markdown): rendered in a notebook, plain in a terminal."""

    def _repr_markdown_(self) -> str:
        return str(self)

    def __repr__(self) -> str:
        return str(self)


def reference(magic: Optional[str] = None) -> Reference:
    """The reference of one magic (`'gpu_history'` or `'%gpu_history'`), or of them all
    with the glossary (no argument). A name that is not one of the magics raises
    ValueError naming those that are."""
    if magic is None:
        return Reference(reference_text())
    found = sections()
    name = magic.removeprefix("%") if isinstance(magic, str) else None
    if name not in found:
        listed = ", ".join(f"'{name}'" for name in found)
        raise ValueError(
            f"reference({magic!r}): no such magic; one of {listed}, or no argument for "
            "all of them and the words in the reports"
        )
    return Reference(found[name])
