"""Start-up for command-line entry points: TensorFlow without its log noise, one error policy."""

import importlib.util
import os
import platform
import sys

from data_prep.errors import run_command


def quiet_tensorflow():
    """Imports TensorFlow with its C++ start-up messages silenced.

    TensorFlow prints oneDNN/CUDA notices to stderr before its logging is configured,
    so no environment variable hides them; stderr is muted during the import and the
    first device probe (where a machine without a GPU driver logs a cuInit error) only.
    Set `NLPKIT_VERBOSE=1` to see them.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # its runtime notices too (oneDNN)
    if (os.environ.get("NLPKIT_VERBOSE") or "tensorflow" in sys.modules
            or importlib.util.find_spec("tensorflow") is None):  # e.g. a JAX-only machine
        return
    sys.stderr.flush()
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 2)
        import tensorflow

        tensorflow.config.list_physical_devices()  # probes CUDA now: its errors muted too
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def run_main(main):
    """The `__main__` of every command: quiet start-up, one-line user errors, exit status.

    Ctrl-C ends the command with status 130 and one line instead of a traceback.
    """
    quiet_tensorflow()
    try:
        status = run_command(main)
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        status = 130
    sys.exit(status)


def cpu_model():
    """The CPU's model name (Linux: from /proc/cpuinfo), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def compiled(function, *holders, tf_signature=None, jit_compile=False, name=None):
    """`function(*arrays)` compiled for the current Keras backend (eager on torch).

    `name` names the compiled program (JAX's compilation logs and counts: `jit(name)`).

    `tf_signature` (`[(shape, dtype), ...]`, `None` for unknown sizes) fixes the
    TensorFlow graph's input shapes, for loops whose shapes must stay unknown; without
    it TensorFlow retraces per shape, generalizing as it goes. `jit_compile` has
    TensorFlow compile the graph with XLA (one compilation per input shape; JAX always
    does).

    On JAX the variables of `holders` (models, keras-hub samplers) are passed in at
    every call, so the compiled code always reads their current values, never those
    at tracing time (weights trained or loaded since), and the values it changes (a
    sampler's seed state) are written back.
    """
    import keras  # lazily: this module is imported before TensorFlow is configured

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # only on its backend

        if tf_signature:
            return tf.function(function, jit_compile=jit_compile, input_signature=[
                tf.TensorSpec(shape, dtype) for shape, dtype in tf_signature])
        return tf.function(function, jit_compile=jit_compile, reduce_retracing=True)
    if backend != "jax":
        return function
    import jax  # likewise

    variables = list({id(v): v for h in holders for v in h.variables}.values())

    def stateless(values, *args):
        with keras.StatelessScope(state_mapping=list(zip(variables, values, strict=True))) as scope:
            output = function(*args)
        return output, [scope.get_current_value(v) for v in variables]

    stateless.__name__ = stateless.__qualname__ = name or getattr(function, "__name__", "step")
    jitted = jax.jit(stateless)

    def call(*args):
        output, values = jitted([v.value for v in variables], *args)
        for variable, value in zip(variables, values, strict=True):
            if not variable.trainable and value is not None:
                variable.assign(value)
        return output

    return call
