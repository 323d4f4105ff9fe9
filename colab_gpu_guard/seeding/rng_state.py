"""Exact save and restore of every RNG stream `seed_all` seeds: `rng_state()` captures
them, `restore_rng_state(state)` puts them all back or restores nothing, and
`isolated_rng()` runs a block and restores the streams after it.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Optional, Union

from ..frameworks import cupy as cupy_support
from ..frameworks import tensorflow as tensorflow_support
from ..frameworks import torch as torch_support

Generators = Union[Mapping[str, Any], Sequence[Any], None]


class RngStateError(ValueError):
    """This process cannot restore a captured stream (nothing was restored)."""


@dataclass(frozen=True)
class GeneratorState:
    """One torch generator's state: a device's default generator or a named one."""

    name: str  # "cpu", "cuda:0", "mps", "xpu:0", or the caller's name for a generator
    device: str  # the generator's device type: cpu, cuda, mps, xpu
    state: bytes


@dataclass(frozen=True)
class RngState:
    """Every captured RNG stream of one moment; picklable, restored by `restore_rng_state`.

    The state holds plain Python values (bytes, ints, tuples), so it pickles without torch
    or NumPy and reads back in another process."""

    python: tuple
    numpy: Optional[tuple] = None  # ("MT19937", keys, pos, has_gauss, cached_gaussian)
    torch: tuple[GeneratorState, ...] = ()  # default generators: cpu, cuda:N, mps, xpu:N
    generators: tuple[GeneratorState, ...] = ()  # the caller's generators, by name
    not_captured: tuple[tuple[str, str], ...] = ()  # (stream, why)

    def streams(self) -> list[str]:
        """The captured streams, as `__str__` names them."""
        names = ["Python random"]
        if self.numpy is not None:
            names.append("NumPy legacy global")
        names += [f"torch {g.name}" for g in self.torch]
        names += [f"generator {g.name!r}" for g in self.generators]
        return names

    def __str__(self) -> str:
        lines = [f"RngState: {', '.join(self.streams())}"]
        for name, why in self.not_captured:
            lines.append(f"  not captured: {name}: {why}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # the report as text, not the dataclass repr

    def _repr_html_(self) -> str:
        import html

        rows = "".join(
            f"<li>not captured: {html.escape(name)}: {html.escape(why)}</li>"
            for name, why in self.not_captured
        )
        return (
            f"<div><b>RngState</b>: {html.escape(', '.join(self.streams()))}"
            f"{f'<ul>{rows}</ul>' if rows else ''}</div>"
        )

    def to_dict(self) -> dict[str, Any]:
        """What it holds (names and sizes, not the states themselves)."""
        return {
            "streams": self.streams(),
            "state_bytes": {g.name: len(g.state) for g in self.torch + self.generators},
            "not_captured": [list(item) for item in self.not_captured],
        }


# ---------------------------------------------------------------- capture


def rng_state(generators: Generators = None) -> RngState:
    """Capture every RNG stream `seed_all` seeds: Python `random`, NumPy's legacy global
    RNG, torch's CPU generator, each CUDA device's generator (devices with a CUDA context:
    reading another device's would create one), MPS and XPU generators; plus `generators`,
    any `torch.Generator` the caller names (a DataLoader's ``generator=``): a mapping of
    names to `torch.Generator` objects (e.g. ``{"train_loader": g}`` for
    ``DataLoader(generator=g)``) or a list of them (named "0", "1", ...). Pass the same
    generators to `restore_rng_state`. Creates no CUDA context and imports nothing."""
    numpy_random = sys.modules.get("numpy.random")  # never import it
    numpy_state = None
    if numpy_random is not None and hasattr(numpy_random, "get_state"):
        name, keys, pos, has_gauss, cached = numpy_random.get_state(legacy=True)
        numpy_state = (str(name), tuple(int(k) for k in keys), int(pos), int(has_gauss), cached)
    torch = torch_support.loaded()
    return RngState(
        python=random.getstate(),
        numpy=numpy_state,
        torch=_torch_states(torch) if torch is not None else (),
        generators=_named_states(_named(generators)),
        not_captured=_not_captured(),
    )


def _state_bytes(tensor: Any) -> bytes:
    return bytes(tensor.tolist())


def _torch_states(torch: Any) -> tuple[GeneratorState, ...]:
    states = [GeneratorState("cpu", "cpu", _state_bytes(torch.get_rng_state()))]
    devices = torch_support.devices_with_context(torch)
    if devices:
        with torch_support.seeding_device(torch):
            for index in devices:
                state = torch.cuda.default_generators[index].get_state()
                states.append(GeneratorState(f"cuda:{index}", "cuda", _state_bytes(state)))
    accelerators = torch_support.other_accelerators(torch)
    if "mps" in accelerators:
        states.append(GeneratorState("mps", "mps", _state_bytes(torch.mps.get_rng_state())))
    if "xpu" in accelerators:
        for index in range(torch.xpu.device_count()):
            state = torch.xpu.get_rng_state(index)
            states.append(GeneratorState(f"xpu:{index}", "xpu", _state_bytes(state)))
    return tuple(states)


def _named(generators: Generators) -> list[tuple[str, Any]]:
    if generators is None:
        return []
    if isinstance(generators, Mapping):
        pairs = [(str(name), g) for name, g in generators.items()]
    elif isinstance(generators, Sequence) and not isinstance(generators, (str, bytes)):
        pairs = [(str(index), g) for index, g in enumerate(generators)]
    else:
        raise TypeError(
            "generators must be a dict of names to torch.Generator objects or a list of "
            f"them, not {type(generators).__name__}"
        )
    torch = torch_support.loaded()
    kind = getattr(torch, "Generator", None)
    for name, generator in pairs:
        if kind is None or not isinstance(generator, kind):
            raise TypeError(
                f"generator {name!r} is a {type(generator).__name__}, not a torch.Generator"
            )
    return pairs


def _named_states(pairs: list[tuple[str, Any]]) -> tuple[GeneratorState, ...]:
    return tuple(
        GeneratorState(name, g.device.type, _state_bytes(g.get_state())) for name, g in pairs
    )


def _not_captured() -> tuple[tuple[str, str], ...]:
    """CuPy and TensorFlow, when imported, are listed as not captured: CuPy's global
    generators are cuRAND generators whose position CuPy does not expose
    (``cupy.random.RandomState`` has no ``get_state``), and TensorFlow keeps its stateful
    random ops' state inside cached op kernels. Reseed those with `seed_all` after
    restoring."""
    missing = []
    if cupy_support.loaded() is not None:
        missing.append(
            (
                cupy_support.NAME,
                "CuPy does not expose its cuRAND generators' position; "
                "reseed it with seed_all after restoring",
            )
        )
    if tensorflow_support.loaded() is not None:
        missing.append(
            (
                tensorflow_support.NAME,
                "TensorFlow keeps its random ops' state inside cached kernels; "
                "reseed it with seed_all after restoring (tf.random.Generator has .state)",
            )
        )
    return tuple(missing)


# ---------------------------------------------------------------- restore


def restore_rng_state(state: RngState, generators: Generators = None) -> None:
    """Put back every stream `state` holds, and the states of `generators` (the same names,
    or list order, as when captured). Checks first that each one can be restored here,
    and raises RngStateError naming those that cannot, restoring nothing."""
    if not isinstance(state, RngState):
        raise TypeError(f"expected an RngState from rng_state(), not {type(state).__name__}")
    pairs = dict(_named(generators))
    torch = torch_support.loaded()
    if torch is None and (state.torch or state.generators) and torch_support.installed():
        torch = torch_support.import_torch()
    numpy_random = _numpy_random() if state.numpy is not None else None
    problems = _problems(state, pairs, torch, numpy_random)
    if problems:
        raise RngStateError(
            "cannot restore this RNG state here (nothing was restored): " + "; ".join(problems)
        )
    random.setstate(state.python)
    if state.numpy is not None:
        name, keys, pos, has_gauss, cached = state.numpy
        numpy = sys.modules["numpy"]
        numpy_random.set_state(
            (name, numpy.array(keys, dtype=numpy.uint32), pos, has_gauss, cached)
        )
    if state.torch:
        _restore_torch(torch, state.torch)
    for saved in state.generators:
        pairs[saved.name].set_state(_tensor(torch, saved.state))


def _numpy_random() -> Optional[Any]:
    module = sys.modules.get("numpy.random")
    if module is not None:
        return module
    try:
        import numpy.random
    except ImportError:
        return None
    return numpy.random


def _problems(state: RngState, pairs: dict[str, Any], torch: Any, numpy_random: Any) -> list[str]:
    problems = []
    if state.numpy is not None and numpy_random is None:
        problems.append("NumPy's state was captured but NumPy is not installed")
    if (state.torch or state.generators) and torch is None:
        problems.append("torch generators were captured but PyTorch is not installed")
        return problems
    cuda_count = torch_support.cuda_device_count(torch)
    accelerators = torch_support.other_accelerators(torch) if state.torch else ()
    for saved in state.torch:
        if saved.device == "cuda" and int(saved.name.split(":")[1]) >= cuda_count:
            problems.append(
                f"{saved.name} was captured but this process sees {cuda_count} CUDA "
                "device(s) (check CUDA_VISIBLE_DEVICES and the runtime type)"
            )
        elif saved.device in ("mps", "xpu") and saved.device not in accelerators:
            problems.append(f"{saved.name} was captured but this process has no {saved.device}")
        elif saved.device == "xpu" and int(saved.name.split(":")[1]) >= torch.xpu.device_count():
            problems.append(f"{saved.name} was captured but this process has no such device")
    for saved in state.generators:
        generator = pairs.get(saved.name)
        if generator is None:
            problems.append(
                f"generator {saved.name!r} was captured; pass it again "
                f"(generators={{{saved.name!r}: ...}} or the same list)"
            )
        elif generator.device.type != saved.device:
            problems.append(
                f"generator {saved.name!r} was a {saved.device} generator, "
                f"the one given is on {generator.device.type}"
            )
    extra = sorted(set(pairs) - {saved.name for saved in state.generators})
    if extra:
        problems.append(f"generator(s) {', '.join(map(repr, extra))} were not captured")
    return problems


def _tensor(torch: Any, data: bytes) -> Any:
    return torch.tensor(list(data), dtype=torch.uint8)


def _restore_torch(torch: Any, states: tuple[GeneratorState, ...]) -> None:
    for saved in states:
        tensor = _tensor(torch, saved.state)
        if saved.device == "cpu":
            torch.set_rng_state(tensor)
        elif saved.device == "cuda":
            # queued by torch until CUDA initialises; set on the generator, no device switch
            with torch_support.seeding_device(torch):
                torch.cuda.set_rng_state(tensor, int(saved.name.split(":")[1]))
        elif saved.device == "mps":
            torch.mps.set_rng_state(tensor)
        else:
            torch.xpu.set_rng_state(tensor, int(saved.name.split(":")[1]))


@contextmanager
def isolated_rng(generators: Generators = None) -> Iterator[RngState]:
    """Run a block, then put every RNG stream (and `generators`) back as it was before it:
    a plotting or validation cell inside ``with isolated_rng():`` does not shift the draws
    of the training cells after it."""
    state = rng_state(generators)
    try:
        yield state
    finally:
        restore_rng_state(state, generators)
