"""How sizes, versions and the few shared labels are written in every report and view, and
how a text or HTML view escapes what it did not write (`escape_text`, `escape_html`)."""

from __future__ import annotations

import functools
import re
from typing import Any, Iterable, NamedTuple, Optional

NA = "n/a"

# Who keeps a leftover array alive, as every report and view names it.
USER_VARIABLE = "user variable"
OUTPUT_HISTORY = "output history"
TRACEBACK_FRAME = "traceback frame"
OTHER = "other"
HOLDERS = (USER_VARIABLE, OUTPUT_HISTORY, TRACEBACK_FRAME, OTHER)
# Globals torch.compile (dynamo) installs in the namespace a compiled function runs in: its
# graphs (``__compiled_fn_<n>_<uuid>``), resume functions, imports, builtins dicts, guard
# helpers. Never the user's variables.
COMPILED_FN_PREFIX = "__compiled_fn_"
DYNAMO_GLOBALS = (COMPILED_FN_PREFIX, "__resume_at_", "__import_", "__builtins_dict__", "___")

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(value: Optional[float]) -> str:
    """A size with three significant digits and no trailing zeros: 1536 -> '1.5 KiB',
    2**30 -> '1 GiB', 1.06 * 2**30 -> '1.06 GiB', 360000 -> '352 KiB'; None -> 'n/a'."""
    if value is None:
        return NA
    sign = "-" if value < 0 else ""
    amount = float(abs(value))
    unit = _UNITS[0]
    for unit in _UNITS:
        if amount < 1024 or unit == _UNITS[-1]:
            break
        amount /= 1024
    if unit == "B":
        return f"{sign}{int(amount)} B"
    decimals = 2 if amount < 10 else 1 if amount < 100 else 0
    text = f"{amount:.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return f"{sign}{text} {unit}"


def counted(count: int, one: str, many: str = "") -> str:
    """'1 cell', '13 cells', '1,024 arrays', '2 processes' (`many`: the plural where it is
    not `one` + 's'). Reports say the number of a thing in words, never 'cell(s)'."""
    return f"{count:,} {one if count == 1 else (many or one + 's')}"


def shape_text(shape: Optional[Iterable[int]]) -> str:
    """An array's shape as every report writes it: ``[2048x512]``, ``[scalar]``; '' when
    not known."""
    if shape is None:
        return ""
    return "[" + ("x".join(str(size) for size in shape) or "scalar") + "]"


def signed_bytes(value: int) -> str:
    """A change in size: '+1.5 KiB', '-2 MiB', '0 B'."""
    return ("+" if value > 0 else "") + format_bytes(value)


def cuda_version_text(version: Optional[int]) -> Optional[str]:
    """CUDA's integer version (as NVML and the driver report it, e.g. 12020) as '12.2'."""
    if version is None:
        return None
    version = int(version)
    return f"{version // 1000}.{(version % 1000) // 10}"


# Text escaping for terminals. A name the package did not write (a variable, an NVML process
# or GPU name, a hostname, a saved record's field) may hold control characters: on a shared
# GPU host another user chooses a process's name, and an ESC sequence in it retitles the
# terminal or clears the screen, a newline fakes a table row, a bidi override reorders what
# follows. Every text view shows them escaped (JSON escapes them its own way): C0,
# DEL, C1, the Unicode line/paragraph separators and the bidi controls (Unicode's
# Bidi_Control: U+061C, U+200E/F, U+202A-U+202E, U+2066-U+2069). Printable text, non-ASCII
# names included ('модель', '重み'), is unchanged.
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]"
)
_NAMED_CONTROLS = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match) -> str:
    char = match.group(0)
    named = _NAMED_CONTROLS.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_text(text: str) -> str:
    """`text` safe for a terminal: every control character shown as its escape ('\\x1b',
    '\\n', '\\u202e'), everything else unchanged. Idempotent (what it writes is printable),
    so a line built from escaped parts may be escaped again at the view's edge."""
    return _CONTROL.sub(_escaped, text)


def escape_lines(lines: Iterable[str]) -> str:
    """A text view's `lines`, each escaped (`escape_text`), one per line: a name inside a
    line can neither end it nor start another."""
    return "\n".join(map(escape_text, lines))


# html.escape(text, quote=True), without importing html (and html.entities) at %load_ext
_MARKUP = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#x27;"})


def escape_html(value: Any, lines: bool = False) -> str:
    """`value` as HTML element text or a quoted attribute's value (a ``title`` tooltip, SVG
    text): its control characters shown as the text views show them (`escape_text`: a
    bidi override or an ESC no longer acts in the page, in a copy of it or a terminal it is
    pasted into), then ``<>&"'`` escaped. With `lines` (a ``<pre>`` block), its own line
    ends stay: each line is escaped, as `escape_lines` does."""
    text = str(value)
    shown = escape_lines(text.split("\n")) if lines else escape_text(text)
    return shown.translate(_MARKUP)


class Unavailable(NamedTuple):
    """The one record an optional part (NVML, a framework, psutil, a user object) fails
    into: made at the boundary where its exception is caught, read by `reason`."""

    reason: str


def error_text(error: BaseException) -> str:
    """``str(error)``, or its repr when ``__str__`` itself fails (an NVMLError asks its
    library, which may be gone; a user's exception class may be broken)."""
    try:
        return str(error)
    except Exception:  # the optional part's or user's own __str__
        return repr(error)


def unavailable(error: BaseException, part: str = "") -> Unavailable:
    """The boundary helper: `error` from an optional part as ``Unavailable``, its reason
    worded as the package words them, ``"<part>: <ExceptionType>: <message>"`` (no part:
    ``"<ExceptionType>: <message>"``)."""
    text = f"{type(error).__name__}: {error_text(error)}"
    return Unavailable(f"{part}: {text}" if part else text)


# Words a default report never prints: they name this package's internals or CPython's and
# IPython's, not the things a PyTorch user in a notebook knows. Detail behind `-v` may say
# more, in plain words too. Tests hold every default report, the README's first screen and
# new wording to this list (`jargon_in`).
JARGON = (
    "block",
    "blocks",
    "block(s)",
    "group",
    "groups",
    "group(s)",
    "hidden holder",
    "hidden holders",
    "arrays released",
    "gc.collect()",
    "user_ns_hidden",
    "gh-113939",
    "Philox",
    "sticky error",
    "NVML v1",
    "NVML v2",
    "jagged layout",
    "fp32_precision",
)


@functools.lru_cache(maxsize=1)
def _jargon() -> re.Pattern:
    # compiled on first use: only checks read it, and this module loads with %load_ext
    words = sorted(JARGON, key=len, reverse=True)
    listed = [rf"(?<![\w.]){re.escape(word)}(?![\w(])" for word in words]
    # and any 'noun(s)': `counted` says how many in words
    return re.compile("|".join([*listed, r"\b\w+\(s\)"]), re.IGNORECASE)


def jargon_in(text: str) -> list[str]:
    """The words of `JARGON` that `text` uses, and each 'noun(s)', as written there, in
    order (none: [])."""
    return [match.group(0) for match in _jargon().finditer(text)]
