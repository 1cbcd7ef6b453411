"""What XLA compiles, and when: JAX's persistent compilation cache, a count of the
compilations, `compiled` functions for any backend, the train and test steps of
every batch shape compiled at once, ahead of the first batch (`AheadOfTime`), and on
TensorFlow a model's state built before its train step is traced (`build_before_tracing`)."""

import collections
import concurrent.futures
import os
import sys
import threading
import weakref
from pathlib import Path

import numpy as np

from data_prep import cache

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
    if "jax" in sys.modules:
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
        self._pending = threading.local()  # per thread: programs compile side by side

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
            self._pending.hit = True

    def _on_compile(self, name, seconds):
        with _lock:
            self.counts[name] += 1
            self.seconds += seconds
            if getattr(self._pending, "hit", False):
                self.cache_hits[name] += 1
                self._pending.hit = False


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




# ## Every batch shape's steps compiled at once, before the first batch (JAX)

def distinct_shapes(batches):
    """One batch of each distinct input shape of `batches` (a `BucketedBatches`; none
    for other inputs, whose shapes are not known ahead)."""
    order, make = getattr(batches, "order", None), getattr(batches, "make", None)
    if order is None or make is None:
        return []
    first = {}
    for bucket, rows in order:
        first.setdefault(bucket, rows)
    return [make(bucket, rows) for bucket, rows in first.items()]


class AheadOfTime:
    """The train and test steps of a Keras model on JAX, compiled for every batch shape
    at once instead of one after another as the batches first reach them.

    `start(model, train_batches, test_batches)` traces each train step's program in
    turn (Python holds its lock there), hands each to a thread to compile (XLA lets go
    of it: the programs compile side by side, `workers` at a time), waits for them,
    then has one background thread trace and compile the test steps while the first
    batches train. It installs the same jitted steps as the model's `train_function`
    and `test_function`, whose caches hold the programs (a test step still compiling
    is waited for when a batch needs it). The programs are those
    Keras compiles (`jax.jit(model.train_step, donate_argnums=0)`), so the persistent
    cache serves them to later runs, and a shape nobody foresaw compiles as in Keras.
    Nothing happens on other backends, under a `keras.distribution` (its shardings are
    Keras's to choose), when the model runs eagerly, or for a model already started.
    """

    def __init__(self, workers=None):
        # half the cores: XLA compiles each program on several threads already (a 2-core
        # CPU compiles one at a time fastest: benchmarks/results/compile_ahead.json)
        self.workers = workers or max(1, min(8, (os.cpu_count() or 1) // 2))
        self.steps = ()  # the train and test `_Dispatch` of the model started

    def wait(self):
        """Returns once every program started is compiled."""
        for step in self.steps:
            step.wait()

    def start(self, model, train_batches, test_batches=None):
        import keras

        if (keras.backend.backend() != "jax" or model in _started or model.run_eagerly
                or not model.jit_compile or keras.distribution.distribution() is not None):
            return
        _started.add(model)
        pool = concurrent.futures.ThreadPoolExecutor(self.workers)
        train = _Dispatch(model.train_step, model._get_jax_state(True, True, True, True))
        test = _Dispatch(model.test_step, model._get_jax_state(True, True, False, True))
        train.compile(distinct_shapes(train_batches), pool.submit)
        pool.shutdown(wait=False)
        train.wait()
        # the test steps, needed at the epoch's end: traced and compiled one after another
        # in the background while the first batches train (their compiling would slow
        # the train steps' on a machine of few cores)
        background = concurrent.futures.ThreadPoolExecutor(1)
        test.compile(distinct_shapes(test_batches), background.submit, trace_later=True)
        background.shutdown(wait=False)
        model.train_function = model._make_function(train)
        model.test_function = model._make_function(test)
        self.steps = (train, test)


_started = weakref.WeakSet()  # models whose steps `AheadOfTime` compiled


def build_before_tracing(model, batches):
    """Builds a compiled model's optimizer and metrics on TensorFlow from the shapes of
    `batches` (a `tf.data.Dataset`), so that `fit` or `evaluate` traces its step once.

    Without a distribution strategy Keras builds them while it traces the first train
    step, and `tf.function` traces a function again when its first trace created
    variables: every TensorFlow `fit` traced its train step twice (half its compiling).
    Under a strategy Keras builds them itself first (`_maybe_symbolic_build`), as JAX's
    trainer always does; `tests/workflows/test_compilation.py` counts the traces. A model
    that cannot be built from shapes alone is left to Keras, as before.
    """
    import keras

    if (keras.backend.backend() != "tensorflow" or model.run_eagerly
            or getattr(model, "_distribute_strategy", None) is not None
            or not hasattr(batches, "element_spec")):
        return
    try:
        model._symbolic_build(data_batch=batches.element_spec)
    except (ValueError, RuntimeError):  # Keras's words for "build me from a batch"
        pass


def signature(data):
    """What picks a compiled program: the data's structure, shapes and dtypes."""
    import jax

    leaves, structure = jax.tree.flatten(data)
    return structure, tuple((np.shape(leaf), str(leaf.dtype)) for leaf in leaves)


class _Dispatch:
    """`step` jitted as Keras jits it, with its programs compiled ahead for given batches
    (`compile`); called, it waits for the data's program if that is still compiling."""

    def __init__(self, step, state):
        import jax

        self.jitted = jax.jit(step, donate_argnums=0)
        self.state = _abstract(state)  # read now: `fit` empties the variables it trains
        self.pending = {}

    def compile(self, examples, submit, trace_later=False):
        """Per distinct signature of `examples`, its program traced here (or, with
        `trace_later`, where `submit` runs it) and compiled by `submit`."""
        for example in examples:
            key = signature(example)
            if key in self.pending:
                continue
            if trace_later:
                self.pending[key] = submit(self._lower_and_compile, _abstract(example))
            else:
                self.pending[key] = submit(self.jitted.lower(self.state,
                                                             _abstract(example)).compile)

    def _lower_and_compile(self, data):
        return self.jitted.lower(self.state, data).compile()

    def wait(self):
        for future in list(self.pending.values()):
            future.result()

    def __call__(self, state, data):
        if self.pending:
            future = self.pending.pop(signature(data), None)
            if future is not None:
                future.result()
        return self.jitted(state, data)


def _abstract(tree):
    """Shapes and dtypes only: what a program is compiled for."""
    import jax

    return jax.tree.map(lambda array: jax.ShapeDtypeStruct(np.shape(array), array.dtype), tree)
