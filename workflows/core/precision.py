"""Mixed precision for the device at hand: `dtype_policy="auto"`.

Recent NVIDIA GPUs (compute capability 8.0 and up: A100, H100, RTX 30xx and later)
compute in bfloat16 at full speed with float32's range, so no loss scaling is needed.
Older GPUs have fast float16 only: `mixed_float16`, for which Keras' `compile` wraps the
optimizer in a `LossScaleOptimizer`. A CPU keeps float32: bfloat16 is emulated on most
of them (the translator's `cpu` preset sets `mixed_bfloat16` itself, measured faster
on the AVX512-BF16 machine it was tuned on).

>>> policy_for("gpu", "9.0"), policy_for("gpu", "7.5"), policy_for("cpu")
('mixed_bfloat16', 'mixed_float16', 'float32')
"""

import keras

POLICIES = ("auto", "float32", "mixed_bfloat16", "mixed_float16")


def policy_for(platform, compute_capability=None):
    """The dtype policy for a device: `platform` "gpu" or "cpu" (or "tpu"), and a GPU's
    compute capability as "major.minor"."""
    if platform == "tpu":
        return "mixed_bfloat16"
    if platform != "gpu":
        return "float32"
    major = int(str(compute_capability or "0").split(".")[0])
    return "mixed_bfloat16" if major >= 8 else "mixed_float16"


def resolve(policy):
    """`policy`, or for "auto" the policy of the first device of this backend."""
    return policy_for(*first_device()) if policy == "auto" else policy


def use(policy):
    """Sets Keras' global dtype policy (resolving "auto"); returns the name set."""
    keras.config.set_dtype_policy(resolve(policy))
    return keras.config.dtype_policy().name


def first_device():
    """(platform, compute capability or None) of the device Keras trains on."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        device = jax.devices()[0]
        return device.platform, getattr(device, "compute_capability", None)
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        if gpus:
            capability = tf.config.experimental.get_device_details(gpus[0]).get(
                "compute_capability")
            return "gpu", ".".join(map(str, capability)) if capability else None
        return "cpu", None
    if backend == "torch":
        import torch

        if torch.cuda.is_available():
            return "gpu", ".".join(map(str, torch.cuda.get_device_capability()))
    return "cpu", None
