"""How a run computes on the device at hand: its dtype policy (`dtype_policy="auto"`:
mixed bfloat16 where the device computes it, mixed float16 on older GPUs, float32
elsewhere) and, on JAX, the generator Keras draws its random numbers from."""

from pathlib import Path

import keras

# CPU instructions that compute in bfloat16 (Linux's names): without them, a CPU
# emulates it, about 11 times slower than float32 (the `cpu` translator's step on a
# 2-core AMD EPYC with AVX2 only: 8.2 s in mixed bfloat16, 0.73 s in float32)
BFLOAT16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_computes_bfloat16(cpuinfo=Path("/proc/cpuinfo")):
    """Whether this machine's CPU has bfloat16 instructions (False where it cannot tell)."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return False
    flags = {flag for line in text.splitlines() if line.startswith("flags")
             for flag in line.partition(":")[2].split()}
    return any(flag in flags for flag in BFLOAT16_CPU_FLAGS)


def policy_for(platform, compute_capability=None):
    """The dtype policy for a device: `platform` "gpu" or "cpu" (or "tpu"), and a GPU's
    compute capability as "major.minor". A CPU computes in bfloat16 only where it has
    the instructions for it."""
    if platform == "tpu":
        return "mixed_bfloat16"
    if platform != "gpu":
        return "mixed_bfloat16" if platform == "cpu" and cpu_computes_bfloat16() else "float32"
    major = int(str(compute_capability or "0").split(".")[0])
    return "mixed_bfloat16" if major >= 8 else "mixed_float16"


def resolve_precision(policy):
    """`policy`, or for "auto" the policy of the first device of this backend."""
    return policy_for(*first_device()) if policy == "auto" else policy


def use_precision(policy):
    """Sets Keras' global dtype policy (resolving "auto"); returns the name set."""
    keras.config.set_dtype_policy(resolve_precision(policy))
    return keras.config.dtype_policy().name


_keras_draw_seed = None  # Keras's own, while another generator is in use


def use_random_generator(name):
    """Draws Keras's random numbers on JAX (dropout masks, mostly) with JAX's generator
    `name`: "threefry" (Keras's own: reproducible anywhere, but dozens of operations per
    mask, which XLA compiles and runs) or "rbg" (one `RngBitGenerator` operation: a
    third less compiling on a CPU, a fraction of the mask's cost on a GPU). Keras seeds
    (two 32-bit words) become rbg keys of four. No effect on other backends."""
    global _keras_draw_seed
    if keras.backend.backend() != "jax":
        return
    from keras.src.backend.jax import random as keras_random  # the one place Keras draws

    _keras_draw_seed = _keras_draw_seed or keras_random.jax_draw_seed
    if name == "threefry":
        keras_random.jax_draw_seed = _keras_draw_seed
        return
    import jax

    def draw_rbg_key(seed):
        words = _keras_draw_seed(seed)
        if jax.dtypes.issubdtype(words.dtype, jax.dtypes.prng_key):
            return words  # a typed key already
        words = jax.numpy.asarray(words, "uint32")
        mixed = jax.numpy.bitwise_xor(words, jax.numpy.uint32(0x9E3779B9))
        return jax.random.wrap_key_data(jax.numpy.concatenate([words, mixed]), impl=name)

    keras_random.jax_draw_seed = draw_rbg_key


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
