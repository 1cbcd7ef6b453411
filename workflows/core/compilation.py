"""Compile once per machine: JAX's persistent compilation cache, and a count of compilations.

XLA compiles one program per function and input shape; for a large translator on a
GPU that is half a minute each. `use_persistent_cache` keeps the programs in the work
folder (`compiled/jax/`), so a resumed run, a second run of a preset, `evaluate` and
serving load them instead of compiling again. TensorFlow offers no such cache for
`tf.function` graphs: it traces once per process (seconds), which the fixed batch
shapes keep to one trace per function.

`Compilations` counts what XLA compiled while it is open (JAX), by function name, with
the seconds spent and how many came from the persistent cache: the figures a run logs
and the tests bound.
"""

import collections
import os
import threading
from pathlib import Path

from data_prep import cache
from data_prep.runtime import loaded

CACHE_ENV = "NLPKIT_COMPILATION_CACHE"  # "0": compile without the persistent cache
_open_counters = []
_lock = threading.Lock()
_listening = False


def use_persistent_cache(work_dir=None):
    """Keeps JAX's compiled programs under the work folder (or where
    `JAX_COMPILATION_CACHE_DIR` says); returns that folder (None with
    `NLPKIT_COMPILATION_CACHE=0`). Loads nothing: before JAX is loaded, it sets the
    environment variables JAX reads when it loads (harmless on other backends)."""
    if os.environ.get(CACHE_ENV) == "0":
        return None
    chosen = os.environ.get("JAX_COMPILATION_CACHE_DIR")  # the user's own
    folder = Path(chosen) if chosen else cache.work_dir(work_dir) / "compiled" / "jax"
    settings = {"jax_compilation_cache_dir": str(folder),
                # every program, however quick to compile: a small model's decoding steps too
                "jax_persistent_cache_min_compile_time_secs": 0.0,
                "jax_persistent_cache_min_entry_size_bytes": 0}
    if loaded("jax"):
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:
        os.environ.update({name.upper(): str(value) for name, value in settings.items()})
    return folder


class Compilations:
    """While open, the XLA compilations of this process (JAX; nothing elsewhere).

    `counts[name]` is how many programs `name` (e.g. `"jit(train_step)"`) was compiled
    into or loaded from the persistent cache as; `cache_hits[name]` how many of those
    were loaded; `seconds` the time spent compiling or loading.
    """

    def __init__(self):
        self.counts = collections.Counter()
        self.cache_hits = collections.Counter()
        self.seconds = 0.0
        self._hit_pending = False

    def __enter__(self):
        import keras

        if keras.backend.backend() == "jax":
            _listen()
            with _lock:
                _open_counters.append(self)
        return self

    def __exit__(self, *exc):
        with _lock:
            if self in _open_counters:
                _open_counters.remove(self)

    def of(self, prefix):
        """Programs compiled or loaded for functions whose name starts with `prefix`."""
        return sum(count for name, count in self.counts.items() if name.startswith(prefix))

    def compiled(self, prefix=""):
        """Programs really compiled (not loaded from the cache) for `prefix`."""
        return self.of(prefix) - sum(count for name, count in self.cache_hits.items()
                                     if name.startswith(prefix))

    def _on_event(self, event):
        if event == "/jax/compilation_cache/cache_hits":
            self._hit_pending = True

    def _on_compile(self, name, seconds):
        self.counts[name] += 1
        self.seconds += seconds
        if self._hit_pending:
            self.cache_hits[name] += 1
            self._hit_pending = False


def _listen():
    """Registers JAX's monitoring listeners once per process."""
    global _listening
    with _lock:
        if _listening:
            return
        _listening = True
    from jax import monitoring

    def on_event(event, **_):
        for counter in list(_open_counters):
            counter._on_event(event)

    def on_duration(event, seconds, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            for counter in list(_open_counters):
                counter._on_compile(kwargs.get("fun_name", "?"), seconds)

    monitoring.register_event_listener(on_event)
    monitoring.register_event_duration_secs_listener(on_duration)


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
