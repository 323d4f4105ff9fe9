"""JAX: no global RNG exists; keys are explicit."""

from __future__ import annotations

from types import ModuleType
from typing import Optional

from . import is_installed, loaded_module, module_version

NAME = "JAX"
MODULE = "jax"


def loaded() -> Optional[ModuleType]:
    return loaded_module(MODULE)


def installed() -> bool:
    return is_installed(MODULE)


def version() -> str:
    return module_version(loaded(), "jax")


def key(value: int):
    """A JAX PRNG key for `value` (imports JAX: the caller asked for JAX)."""
    import jax

    make_key = getattr(jax.random, "key", None) or jax.random.PRNGKey
    return make_key(value)
