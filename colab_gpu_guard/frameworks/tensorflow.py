"""TensorFlow: seeded and made deterministic only when the user imported it already; it is
never imported here.
"""

from __future__ import annotations

from .base import presence

NAME = "TensorFlow"
MODULE = "tensorflow"

# Importing TensorFlow allocates no GPU memory. Initialising its runtime does: the first op
# or tensor, or ``tf.config.list_logical_devices`` ("triggers the runtime to configure any
# PhysicalDevice visible to the runtime, thereby preventing further configuration"), and by
# default it then maps nearly all memory of every visible GPU unless memory growth was
# switched on before (``tf.config.experimental.set_memory_growth``, which raises once the
# runtime is initialised). TensorFlow is never imported here: the import is slow, and the
# memory settings are the user's to choose before anything initialises it.
loaded, installed, version = presence(MODULE)


def seed(value: int) -> str:
    tf = loaded()
    assert tf is not None, "seed TensorFlow only once the user imported it"
    keras_utils = getattr(getattr(tf, "keras", None), "utils", None)
    set_random_seed = getattr(keras_utils, "set_random_seed", None)
    if set_random_seed is not None:
        set_random_seed(value)
        return "tf.keras.utils.set_random_seed"
    tf.random.set_seed(value)
    return "tf.random.set_seed"


def enable_op_determinism() -> bool:
    """Switch on TF's deterministic ops; False where this TF has no such switch."""
    tf = loaded()
    experimental = getattr(getattr(tf, "config", None), "experimental", None)
    enable = getattr(experimental, "enable_op_determinism", None)
    if enable is None:
        return False
    enable()
    return True
