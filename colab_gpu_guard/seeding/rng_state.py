"""Exact save and restore of every RNG stream `seed_all` seeds: `rng_state()` captures
them, `restore_rng_state(state)` puts them all back or restores nothing, and
`isolated_rng()` runs a block and restores the streams after it.
"""

from __future__ import annotations

import contextlib
import random
import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Optional

from ..frameworks import cupy as cupy_support
from ..frameworks import tensorflow as tensorflow_support
from ..frameworks import torch as torch_support
from ..units import counted
from .rng_records import (  # noqa: F401  (RngState and its parts are this module's API too)
    GLOBAL_NUMPY,
    Generators,
    GeneratorState,
    NumpyArray,
    NumpyState,
    RngState,
    RngStateError,
    bit_generator,
    generator_label,
    global_numpy_state,
    numpy_value,
    plain,
)

# ---------------------------------------------------------------- capture


def rng_state(generators: Generators = None) -> RngState:
    """Capture every RNG stream `seed_all` seeds: Python `random`, NumPy's global RNG (on
    whichever bit generator it runs), torch's CPU generator, each CUDA device's generator
    (devices with a CUDA context: reading another device's would create one), MPS and XPU
    generators; plus `generators`, the generators the caller names: `torch.Generator`
    objects (a DataLoader's ``generator=``) and `numpy.random.Generator` objects
    (``rng = np.random.default_rng(0)``), as a mapping of names to generators (e.g.
    ``{"train_loader": g, "rng": rng}``) or a list of them (named "0", "1", ...). Pass the
    same generators to `restore_rng_state`. Generators held in the notebook's variables
    and not passed are listed as not captured, by name. Creates no CUDA context and
    imports nothing."""
    return _capture(_named(generators), list_held=True)


def _capture(pairs: list[tuple[str, Any]], list_held: bool) -> RngState:
    numpy_random = sys.modules.get("numpy.random")  # never import it
    numpy_state = None
    if numpy_random is not None and hasattr(numpy_random, "get_state"):
        numpy_state = global_numpy_state(numpy_random)
    torch = torch_support.loaded()
    return RngState(
        python=random.getstate(),
        numpy=numpy_state,
        torch=_torch_states(torch) if torch is not None else (),
        generators=_named_states(pairs),
        not_captured=_not_captured() + (_held_not_passed(pairs) if list_held else ()),
    )


def _state_bytes(tensor: Any) -> bytes:
    """A generator state (a uint8 CPU tensor) as bytes."""
    if "numpy" in sys.modules:  # torch's .numpy() needs it; never imported here
        return tensor.contiguous().numpy().tobytes()
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


def _generator_kinds() -> tuple[type, ...]:
    torch = torch_support.loaded()
    numpy_random = sys.modules.get("numpy.random")
    kinds = [getattr(torch, "Generator", None), getattr(numpy_random, "Generator", None)]
    return tuple(kind for kind in kinds if isinstance(kind, type))


def _is_numpy_generator(generator: Any) -> bool:
    kind = getattr(sys.modules.get("numpy.random"), "Generator", None)
    return isinstance(kind, type) and isinstance(generator, kind)


def _named(generators: Generators) -> list[tuple[str, Any]]:
    if generators is None:
        return []
    if isinstance(generators, Mapping):
        pairs = [(str(name), g) for name, g in generators.items()]
    elif isinstance(generators, Sequence) and not isinstance(generators, (str, bytes)):
        pairs = [(str(index), g) for index, g in enumerate(generators)]
    else:
        raise TypeError(
            "generators must be a dict of names to torch.Generator or numpy.random.Generator "
            f"objects or a list of them, not {type(generators).__name__}"
        )
    kinds = _generator_kinds()
    for name, generator in pairs:
        if not kinds or not isinstance(generator, kinds):
            raise TypeError(
                f"generator {name!r} is a {type(generator).__name__}, not a torch.Generator "
                "or numpy.random.Generator"
            )
    return pairs


def _named_states(pairs: list[tuple[str, Any]]) -> tuple[GeneratorState, ...]:
    states = []
    for name, generator in pairs:
        if _is_numpy_generator(generator):
            state = generator.bit_generator.state
            saved = NumpyState(str(state["bit_generator"]), plain(state))
            states.append(GeneratorState(name, "numpy", saved))
        else:
            states.append(
                GeneratorState(name, generator.device.type, _state_bytes(generator.get_state()))
            )
    return tuple(states)


def _held_not_passed(pairs: list[tuple[str, Any]]) -> tuple[tuple[str, str], ...]:
    """Generators the notebook holds in its variables (top level) and the caller did not
    pass: named, with how to capture them. Only types are read: no user code runs."""
    from ..notebook_refs import resolve_namespace

    kinds = _generator_kinds()
    if not kinds:
        return ()
    _, namespace = resolve_namespace(None, None)
    passed = {id(generator) for _, generator in pairs}
    missing = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or id(value) in passed or not issubclass(type(value), kinds):
            continue
        what = "a NumPy Generator" if _is_numpy_generator(value) else "a torch.Generator"
        missing.append(
            (
                f"{name!r}",
                f"{what} in your variables: pass generators={{{name!r}: {name}}} to capture it",
            )
        )
    return tuple(missing)


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
    or list order, as when captured): all of them or none. Each one is checked first; a
    stream that cannot be restored here raises RngStateError naming it, restoring nothing
    (and should a late step fail, what was already restored is put back as it was). A
    NumPy global state taken on another bit generator reinstalls that bit generator
    (``numpy.random.set_bit_generator``, NumPy 1.25 or later)."""
    if not isinstance(state, RngState):
        raise TypeError(f"expected an RngState from rng_state(), not {type(state).__name__}")
    pairs = dict(_named(generators))
    torch = torch_support.loaded()
    needs_torch = state.torch or any(g.device != "numpy" for g in state.generators)
    if torch is None and needs_torch and torch_support.installed():
        torch = torch_support.import_torch()
    needs_numpy = state.numpy is not None or any(g.device == "numpy" for g in state.generators)
    numpy_random = _numpy_random() if needs_numpy else None
    problems = _problems(state, pairs, torch, numpy_random)
    if problems:
        raise RngStateError(
            "cannot restore this RNG state here (nothing was restored): "
            + "; ".join(why for _, why in problems),
            tuple(stream for stream, _ in problems),
        )
    undo = _Undo(_capture(list(pairs.items()), list_held=False), numpy_random, pairs)
    done: list[str] = []
    for stream, step in _steps(state, pairs, torch, numpy_random):
        try:
            step()
        except (ValueError, TypeError, RuntimeError, IndexError, KeyError) as error:
            undo.apply(done + [stream])
            raise RngStateError(
                f"cannot restore {stream}: {error} (nothing was restored: the streams "
                "already set were put back)",
                (stream,),
            ) from None
        done.append(stream)


class _Undo:
    """The streams as they were before a restore, and the NumPy bit generator object the
    global RNG ran on (a reinstalled one is swapped back, not just its state)."""

    def __init__(self, before: RngState, numpy_random: Any, generators: dict[str, Any]) -> None:
        self.before = before
        self.numpy_random = numpy_random
        getter = getattr(numpy_random, "get_bit_generator", None)
        self.bit_generator = getter() if getter is not None else None
        self.generators = generators

    def apply(self, streams: list[str]) -> None:
        """Put back `streams` (those a restore set, or was setting when it failed)."""
        setter = getattr(self.numpy_random, "set_bit_generator", None)
        if GLOBAL_NUMPY in streams and self.bit_generator is not None and setter is not None:
            setter(self.bit_generator)
        wanted = {name.split(" (")[0] for name in streams}  # without the bit generator
        torch = torch_support.loaded()
        for stream, step in _steps(self.before, self.generators, torch, self.numpy_random):
            if stream.split(" (")[0] in wanted:
                # states read from this process a moment ago; the one that just failed may
                # fail again, having changed nothing
                with contextlib.suppress(ValueError, TypeError, RuntimeError, IndexError):
                    step()


def _steps(state: RngState, pairs: dict[str, Any], torch: Any, numpy_random: Any) -> list:
    """(stream, step) to restore each stream, in order."""
    steps: list = [("Python random", lambda: random.setstate(state.python))]
    if state.numpy is not None:
        saved = state.numpy
        steps.append((GLOBAL_NUMPY, lambda: _restore_global_numpy(numpy_random, saved)))
    for saved_torch in state.torch:
        steps.append((f"torch {saved_torch.name}", lambda s=saved_torch: _restore_torch(torch, s)))
    for saved_generator in state.generators:
        generator = pairs[saved_generator.name]
        steps.append(
            (
                generator_label(saved_generator),
                lambda s=saved_generator, g=generator: _restore_generator(torch, g, s),
            )
        )
    return steps


def _restore_global_numpy(numpy_random: Any, saved: NumpyState) -> None:
    state = numpy_value(saved.state, sys.modules["numpy"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        current = numpy_random.get_state(legacy=False)["bit_generator"]
        if current != saved.bit_generator:
            numpy_random.set_bit_generator(bit_generator(numpy_random, saved, fresh=True))
        numpy_random.set_state(state)


def _restore_generator(torch: Any, generator: Any, saved: GeneratorState) -> None:
    if isinstance(saved.state, NumpyState):
        generator.bit_generator.state = numpy_value(saved.state.state, sys.modules["numpy"])
    else:
        generator.set_state(_tensor(torch, saved.state))


def _numpy_random() -> Optional[Any]:
    module = sys.modules.get("numpy.random")
    if module is not None:
        return module
    try:
        import numpy.random
    except ImportError:
        return None
    return numpy.random


def _problems(
    state: RngState, pairs: dict[str, Any], torch: Any, numpy_random: Any
) -> list[tuple[str, str]]:
    """(stream, why) for each stream that cannot be restored here."""
    problems = []
    try:
        random.Random().setstate(state.python)  # a scratch generator checks the state
    except (ValueError, TypeError, OverflowError) as error:
        problems.append(("Python random", f"Python random: not a random.getstate(): {error}"))
    if state.numpy is not None:
        why = _numpy_problem(state.numpy, numpy_random, global_rng=True)
        if why:
            problems.append((GLOBAL_NUMPY, f"{GLOBAL_NUMPY}: {why}"))
    if (state.torch or any(g.device != "numpy" for g in state.generators)) and torch is None:
        problems.append(("torch", "torch generators were captured but PyTorch is not installed"))
        return problems
    if state.torch:
        problems += _torch_problems(state.torch, torch)
    for saved in state.generators:
        label = generator_label(saved)
        generator = pairs.get(saved.name)
        if generator is None:
            problems.append(
                (
                    label,
                    f"{label} was captured; pass it again "
                    f"(generators={{{saved.name!r}: ...}} or the same list)",
                )
            )
        elif saved.device == "numpy":
            if not _is_numpy_generator(generator):
                problems.append((label, f"{label}: the one given is not a NumPy Generator"))
                continue
            why = _numpy_problem(saved.state, numpy_random, global_rng=False)
            current = generator.bit_generator.state["bit_generator"]
            if why is None and current != saved.state.bit_generator:
                why = (
                    f"it was captured on {saved.state.bit_generator}, the one given runs {current}"
                )
            if why:
                problems.append((label, f"{label}: {why}"))
        elif _is_numpy_generator(generator) or generator.device.type != saved.device:
            given = (
                "a NumPy Generator"
                if _is_numpy_generator(generator)
                else (f"on {generator.device.type}")
            )
            problems.append(
                (label, f"{label} was a {saved.device} torch.Generator, the one given is {given}")
            )
        elif len(_state_bytes(generator.get_state())) != len(saved.state):
            problems.append((label, f"{label}: its state does not fit that generator"))
    extra = sorted(set(pairs) - {saved.name for saved in state.generators})
    if extra:
        names = ", ".join(map(repr, extra))
        which = f"generator {names} was" if len(extra) == 1 else f"generators {names} were"
        problems.append(("generators", f"{which} not captured"))
    return problems


def _numpy_problem(saved: Any, numpy_random: Any, global_rng: bool) -> Optional[str]:
    if numpy_random is None:
        return "captured, but NumPy is not installed"
    if not isinstance(saved, NumpyState):
        return "not a state rng_state() captured"
    if global_rng and not hasattr(numpy_random, "set_bit_generator"):
        current = global_numpy_state(numpy_random).bit_generator
        if current != saved.bit_generator:
            return (
                f"captured on {saved.bit_generator}, and this NumPy "
                f"({sys.modules['numpy'].__version__}) cannot reinstall it in place of "
                f"{current} (numpy.random.set_bit_generator needs NumPy 1.25 or later)"
            )
    try:
        bit_generator(numpy_random, saved)
    except (ValueError, TypeError, KeyError, IndexError, OverflowError) as error:
        return f"its {saved.bit_generator} state does not fit: {error!r}"
    return None


def _torch_problems(states: tuple[GeneratorState, ...], torch: Any) -> list[tuple[str, str]]:
    problems = []
    cuda_count = torch_support.cuda_device_count(torch)
    accelerators = torch_support.other_accelerators(torch)
    for saved in states:
        stream = f"torch {saved.name}"
        if saved.device == "cuda" and int(saved.name.split(":")[1]) >= cuda_count:
            problems.append(
                (
                    stream,
                    f"{saved.name} was captured but this process sees "
                    f"{counted(cuda_count, 'CUDA device')} (check CUDA_VISIBLE_DEVICES and the "
                    "runtime type)",
                )
            )
        elif saved.device in ("mps", "xpu") and saved.device not in accelerators:
            problems.append(
                (stream, f"{saved.name} was captured but this process has no {saved.device}")
            )
        elif saved.device == "xpu" and int(saved.name.split(":")[1]) >= torch.xpu.device_count():
            problems.append(
                (stream, f"{saved.name} was captured but this process has no such device")
            )
        elif saved.device == "cpu" and len(saved.state) != torch.get_rng_state().numel():
            problems.append(
                (stream, f"torch {saved.name}: its state does not fit torch's CPU generator")
            )
    return problems


def _tensor(torch: Any, data: bytes) -> Any:
    """A uint8 tensor of `data` (a copy: torch reads it into the generator's state)."""
    if not data:
        return torch.empty(0, dtype=torch.uint8)
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _restore_torch(torch: Any, saved: GeneratorState) -> None:
    assert isinstance(saved.state, bytes)
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
