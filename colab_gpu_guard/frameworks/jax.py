"""JAX: no global RNG exists; keys are explicit."""

from __future__ import annotations

from typing import Optional

from .base import ArrayInfo, presence

NAME = "JAX"
MODULE = "jax"

loaded, installed, version = presence(MODULE)


def key(value: int):
    """A JAX PRNG key for `value` (imports JAX: the caller asked for JAX)."""
    import jax

    make_key = getattr(jax.random, "key", None) or jax.random.PRNGKey
    return make_key(value)


def array_type() -> Optional[type]:
    jax = loaded()
    return getattr(jax, "Array", None) if jax is not None else None


def _device_name(device) -> str:
    platform = str(getattr(device, "platform", "unknown"))
    if platform == "gpu":
        platform = "cuda"
    return f"{platform}:{getattr(device, 'id', 0)}"


def array_info(array) -> ArrayInfo:
    """A jax.Array's metadata. A sharded array names its devices joined by '+'; its bytes
    are the global size."""
    try:
        devices = sorted(array.devices(), key=lambda d: getattr(d, "id", 0))
    except Exception:  # JAX: a user's array (deleted, or on an odd backend)
        devices = []
    device = "+".join(_device_name(d) for d in devices) or "unknown"
    nbytes = int(array.nbytes)
    try:
        pointer = int(array.unsafe_buffer_pointer()) if len(devices) == 1 else 0
    except Exception:  # JAX: a sharded or deleted user's array
        pointer = 0
    key, ident = ((device, pointer), pointer) if pointer else (("jax", id(array)), id(array))
    return ArrayInfo(tuple(array.shape), str(array.dtype), device, nbytes, key, nbytes, ident)


def live_arrays() -> list:
    """Every live jax.Array (JAX's own list), or [] when JAX is not imported."""
    jax = loaded()
    if jax is None or not hasattr(jax, "live_arrays"):
        return []
    try:
        return [a for a in jax.live_arrays() if not a.is_deleted()]
    except Exception:  # JAX: an array deleted while listed
        return []


def release_caches() -> list[str]:
    """``jax.clear_caches()``: drop JAX's compilation and tracing caches."""
    jax = loaded()
    if jax is None or not hasattr(jax, "clear_caches"):
        return []
    jax.clear_caches()
    return ["jax.clear_caches()"]
