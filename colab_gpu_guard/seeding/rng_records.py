"""The records of RNG state that `rng_state()` captures and `restore_rng_state()` reads
(picklable, printable), and how NumPy's bit-generator states become them and back."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional, Union

from ..units import escape_html, escape_lines

Generators = Union[Mapping[str, Any], Sequence[Any], None]
GLOBAL_NUMPY = "NumPy global RNG"


class RngStateError(ValueError):
    """This process cannot restore a captured stream; nothing was restored. `streams`
    names the streams that could not be restored."""

    def __init__(self, message: str, streams: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.streams = streams


class NumpyArray(NamedTuple):
    """An array inside a NumPy bit generator's state, as plain Python values."""

    dtype: str
    values: tuple


@dataclass(frozen=True)
class NumpyState:
    """A NumPy bit generator's state (any of MT19937, PCG64, PCG64DXSM, Philox, SFC64),
    its arrays as `NumpyArray`: plain values that pickle without NumPy. For the global
    RNG it also holds the legacy cached Gaussian (has_gauss, gauss)."""

    bit_generator: str
    state: dict  # bit_generator.state with arrays made plain


@dataclass(frozen=True)
class GeneratorState:
    """One generator's state: a torch device's default generator, or a generator the caller
    named (a torch.Generator, or a numpy.random.Generator: device "numpy")."""

    name: str  # "cpu", "cuda:0", "mps", "xpu:0", or the caller's name for a generator
    device: str  # cpu, cuda, mps, xpu; "numpy" for a numpy.random.Generator
    state: Union[bytes, NumpyState]


@dataclass(frozen=True)
class RngState:
    """Every captured RNG stream of one moment; picklable, restored by `restore_rng_state`.

    The state holds plain Python values (bytes, ints, tuples, dicts), so it pickles without
    torch or NumPy and reads back in another process."""

    python: tuple
    numpy: Optional[NumpyState] = None  # the global RNG, whichever bit generator it runs on
    torch: tuple[GeneratorState, ...] = ()  # default generators: cpu, cuda:N, mps, xpu:N
    generators: tuple[GeneratorState, ...] = ()  # the caller's generators, by name
    not_captured: tuple[tuple[str, str], ...] = ()  # (stream, why)

    def streams(self) -> list[str]:
        """The captured streams, as `__str__` names them."""
        names = ["Python random"]
        if self.numpy is not None:
            names.append(f"{GLOBAL_NUMPY} ({self.numpy.bit_generator})")
        names += [f"torch {g.name}" for g in self.torch]
        names += [generator_label(g) for g in self.generators]
        return names

    def __str__(self) -> str:
        lines = [f"RngState: {', '.join(self.streams())}"]
        for name, why in self.not_captured:
            lines.append(f"  not captured: {name}: {why}")
        return escape_lines(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # the report as text, not the dataclass repr

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<li>not captured: {escape_html(name)}: {escape_html(why)}</li>"
            for name, why in self.not_captured
        )
        return (
            f"<div><b>RngState</b>: {escape_html(', '.join(self.streams()))}"
            f"{f'<ul>{rows}</ul>' if rows else ''}</div>"
        )

    def to_dict(self) -> dict[str, Any]:
        """What it holds (names and sizes, not the states themselves)."""
        return {
            "streams": self.streams(),
            "state_bytes": {
                g.name: len(g.state)
                for g in self.torch + self.generators
                if isinstance(g.state, bytes)
            },
            "not_captured": [list(item) for item in self.not_captured],
        }


def generator_label(saved: GeneratorState) -> str:
    if saved.device == "numpy":
        assert isinstance(saved.state, NumpyState)
        return f"NumPy generator {saved.name!r} ({saved.state.bit_generator})"
    return f"generator {saved.name!r}"


# ---------------------------------------------------------------- NumPy states


def plain(value: Any) -> Any:
    """A bit generator's state with its arrays as NumpyArray and NumPy scalars as Python's."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if hasattr(value, "dtype") and hasattr(value, "tolist"):
        if getattr(value, "ndim", 0) == 0:
            return value.item()
        return NumpyArray(str(value.dtype), tuple(value.tolist()))
    return value


def numpy_value(value: Any, numpy: Any) -> Any:
    if isinstance(value, dict):
        return {key: numpy_value(item, numpy) for key, item in value.items()}
    if isinstance(value, NumpyArray):
        return numpy.array(value.values, dtype=value.dtype)
    return value


def global_numpy_state(numpy_random: Any) -> NumpyState:
    with warnings.catch_warnings():  # NumPy warns on legacy reads of other bit generators
        warnings.simplefilter("ignore")
        state = numpy_random.get_state(legacy=False)
    return NumpyState(str(state["bit_generator"]), plain(state))


_scratch: dict[str, Any] = {}  # a bit generator per kind, to check states on


def bit_generator(numpy_random: Any, saved: NumpyState, fresh: bool = False) -> Any:
    """A bit generator of the saved kind holding the saved state (setting it checks it):
    a scratch one kept for checking (its seeding from the OS costs ~0.2 ms), or `fresh`."""
    kind = getattr(numpy_random, saved.bit_generator, None)
    if not isinstance(kind, type):
        raise ValueError(f"this NumPy has no bit generator {saved.bit_generator}")
    generator = _scratch.get(saved.bit_generator)
    if fresh or generator is None or type(generator) is not kind:
        generator = kind()
        if not fresh:
            _scratch[saved.bit_generator] = generator
    state = numpy_value(saved.state, sys.modules["numpy"])
    generator.state = {key: state[key] for key in state if key not in ("has_gauss", "gauss")}
    return generator
