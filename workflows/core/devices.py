"""Where and how a run computes: its devices and processes, its precision, what XLA
compiled, and the batches of few fixed shapes that `fit` reads.

Data parallelism runs on Keras' own engines, chosen per run (`--distribution`):

- `none`: the default device.
- `mirrored`: TensorFlow's `MirroredStrategy` over this machine's GPUs (or its logical
  CPUs, where there are several and no GPU): the model is built, compiled and fitted in
  the strategy's scope and Keras splits each `tf.data` batch across the replicas.
- `data_parallel`: `keras.distribution.DataParallel` over every device of every JAX
  process: the GPUs of a machine, or of several machines when
  `KERAS_DISTRIBUTION_NUM_PROCESSES` > 1 (with `KERAS_DISTRIBUTION_JOB_ADDRESSES`, the
  coordinator's `host:port`, and `KERAS_DISTRIBUTION_PROCESS_ID`; see
  `keras.distribution.initialize`). On one device it is the plain path (see
  `_data_parallel`).

`batch_size` is always the global batch (all devices together), so a distributed run
takes the same optimizer steps on the same examples as a single-device one and the
learning rate (and its schedule) is left as it is. With several processes each one
reads the same global batch and keeps its own rows (`Placement.batches`). Every
process runs every computation (training, evaluation, decoding, even saving weights,
which joins a collective); only process 0, the chief, writes the run folder and
the MLflow store (`training`). TensorFlow's `MultiWorkerMirroredStrategy` does not
work with Keras 3 `fit` (keras-team/keras#20585): several machines on the TensorFlow
backend are refused.
"""

import collections
import contextlib
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import keras
import numpy as np

from data_prep import cache
from data_prep.commands import UserError
from data_prep.text import EMPTY, BucketPlan, boundaries_up_to


class DistributionError(UserError):
    """A distribution this backend or machine cannot run."""


@dataclass(frozen=True)
class Processes:
    """The processes of one run: this one's index and how many there are."""

    index: int = 0
    count: int = 1

    @property
    def is_chief(self):
        """Whether this process writes the run folder and logs to MLflow (process 0)."""
        return self.index == 0

    def barrier(self, name):
        """Waits until every process gets here (no-op with one process)."""
        if self.count > 1:
            from jax.experimental import multihost_utils

            multihost_utils.sync_global_devices(name)

    def leave(self):
        """Disconnects from the others once all are done (no-op with one process): what
        follows (a chief's evaluation) runs alone."""
        if self.count > 1:
            import jax

            jax.distributed.shutdown()

    def chiefs_word(self, flag):
        """The chief's `flag` on every process: a decision all of them must share."""
        if self.count == 1:
            return flag
        from jax.experimental import multihost_utils

        return bool(multihost_utils.broadcast_one_to_all(np.asarray(flag)))

    def chief_first(self, work):
        """`work()` on the chief, then on the other processes: what it caches on disk is
        written once, by the chief. If it fails on the chief, every process raises."""
        if self.count == 1:
            return work()
        result, failure = None, None
        if self.is_chief:
            try:
                result = work()
            except Exception as error:  # re-raised below, once the others know
                failure = error
        if not self.chiefs_word(failure is None):
            raise failure or DistributionError(
                "Process 0 (the chief) stopped before training; its output says why.")
        return result if self.is_chief else work()


@dataclass(frozen=True)
class Placement:
    """Where a run trains: the choice, its devices, the engine (a `tf.distribute`
    strategy or a `keras.distribution.Distribution`; None for one device) and the
    processes that share it."""

    choice: str
    devices: tuple
    engine: object = None
    processes: Processes = Processes()

    def scope(self):
        """Re-enters the engine: what runs inside builds or trains on these devices."""
        return self.engine.scope() if self.engine else contextlib.nullcontext()

    def batches(self, batches):
        """`batches` as this placement needs them: on JAX data parallelism, each batch
        made a multiple of the device count, then cut to this process's rows;
        otherwise (one device included) unchanged."""
        if self.choice != "data_parallel" or self.engine is None:
            return batches
        share = (self.processes.index, self.processes.count)
        if isinstance(batches, keras.utils.PyDataset):

            return EvenBatches(batches, len(self.devices), share)
        return _even_dataset(batches, len(self.devices), share)


def join_processes(choice):
    """Connects this process to the run's others (`data_parallel` with
    `KERAS_DISTRIBUTION_NUM_PROCESSES` > 1; it waits for all of them); returns its
    `Processes`."""
    if choice != "data_parallel" or process_count() == 1:
        return Processes()
    import jax  # only on its backend

    if not jax.distributed.is_initialized():
        keras.distribution.initialize()  # reads KERAS_DISTRIBUTION_*
    return Processes(jax.process_index(), jax.process_count())


def process_count():
    """The number of processes of one run, from `KERAS_DISTRIBUTION_NUM_PROCESSES`."""
    value = os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1") or "1"
    try:
        return int(value)
    except ValueError:
        raise DistributionError("KERAS_DISTRIBUTION_NUM_PROCESSES must be a whole number, got "
                                f"{value!r}.") from None


def process_index():
    """This process's index among the run's, from `KERAS_DISTRIBUTION_PROCESS_ID`."""
    index = os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "0") or "0"
    return int(index) if index.isdigit() else 0


def check(choice):
    """Raises `DistributionError` (one line: what to do instead) if `choice` cannot run
    here."""
    backend = keras.backend.backend()
    several_processes = process_count() > 1
    several_machines = several_processes or "TF_CONFIG" in os.environ
    if choice == "mirrored" and backend != "tensorflow":
        raise DistributionError(f"--distribution mirrored is TensorFlow's MirroredStrategy; "
                                f"on the {backend} backend use --distribution data_parallel.")
    if choice == "mirrored" and several_machines:
        raise DistributionError(
            "Several machines on the TensorFlow backend are not supported: Keras 3 `fit` does "
            "not work with MultiWorkerMirroredStrategy (keras-team/keras#20585). Train with "
            "several GPUs of one machine with --distribution mirrored (README: Scale out).")
    if choice == "data_parallel" and backend != "jax":
        raise DistributionError(f"--distribution data_parallel is keras.distribution on JAX; "
                                f"set KERAS_BACKEND=jax (on {backend}, use "
                                "--distribution mirrored for several GPUs).")
    if choice == "none" and several_processes:
        raise DistributionError(
            "KERAS_DISTRIBUTION_NUM_PROCESSES > 1 needs --distribution data_parallel (on "
            "KERAS_BACKEND=jax); unset it to train in one process.")
    if several_processes:
        _check_process_settings()


def _check_process_settings():
    missing = [name for name in ("KERAS_DISTRIBUTION_JOB_ADDRESSES",
                                 "KERAS_DISTRIBUTION_PROCESS_ID") if not os.environ.get(name)]
    if missing:
        raise DistributionError(
            f"Several processes need {' and '.join(missing)} too: the coordinator's host:port "
            "(the same on every process) and this process's id, 0 to "
            f"{process_count() - 1} (README: Scale out).")
    index = os.environ["KERAS_DISTRIBUTION_PROCESS_ID"]
    if not index.isdigit() or int(index) >= process_count():
        raise DistributionError(f"KERAS_DISTRIBUTION_PROCESS_ID must be 0 to "
                                f"{process_count() - 1}, got {index!r}.")


@contextlib.contextmanager
def placed(choice):
    """Builds, compiles and trains what runs inside on the chosen devices; yields the
    `Placement`."""
    check(choice)
    if choice == "mirrored":
        with _mirrored() as placement:
            yield placement
    elif choice == "data_parallel":
        with _data_parallel() as placement:
            yield placement
    else:
        yield Placement("none", (keras.distribution.list_devices()[0],))


@contextlib.contextmanager
def _mirrored():
    import tensorflow as tf  # only on its backend

    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    strategy = tf.distribute.MirroredStrategy([device.name for device in devices])
    with strategy.scope():
        yield Placement("mirrored", tuple(strategy.extended.worker_devices), strategy)


@contextlib.contextmanager
def _data_parallel():
    processes = join_processes("data_parallel")
    devices = keras.distribution.list_devices()
    if len(devices) == 1:
        # Keras' DataParallel over one device leaves the variables' values uncommitted
        # and the step's outputs committed, so JAX compiles the train step again for
        # each mix of the two (the first batch of every `fit`, per batch shape): one
        # device trains on the plain path, which is the same computation.
        yield Placement("data_parallel", tuple(devices), None, processes)
        return
    previous = keras.distribution.distribution()
    engine = keras.distribution.DataParallel(devices=devices)
    engine.auto_shard_dataset = False  # `Placement.batches` gives each process its rows
    keras.distribution.set_distribution(engine)
    try:
        yield Placement("data_parallel", tuple(devices), engine, processes)
    finally:
        keras.distribution.set_distribution(previous)


@contextlib.contextmanager
def on_this_process():
    """What runs inside ignores `keras.distribution`: a model loaded there lives on this
    process's default device, so one process can use it without the others."""
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(previous)


def _even_dataset(dataset, devices, share=(0, 1)):
    """A `tf.data` dataset of batches cut to a multiple of `devices` rows (batches of
    fewer rows are left out), then to the rows of process `share[0]` of `share[1]`."""
    import tensorflow as tf  # tf.data input: TensorFlow is installed

    index, count = share

    def rows(*batch):
        return tf.shape(tf.nest.flatten(batch)[0])[0]

    def cut(*batch):
        even = rows(*batch) // devices * devices
        block = even // count
        return tf.nest.map_structure(lambda t: t[index * block:(index + 1) * block], batch)

    return dataset.filter(lambda *batch: rows(*batch) >= devices).map(cut)


# ## Mixed precision for the device at hand: `dtype_policy="auto"`



def policy_for(platform, compute_capability=None):
    """The dtype policy for a device: `platform` "gpu" or "cpu" (or "tpu"), and a GPU's
    compute capability as "major.minor"."""
    if platform == "tpu":
        return "mixed_bfloat16"
    if platform != "gpu":
        return "float32"
    major = int(str(compute_capability or "0").split(".")[0])
    return "mixed_bfloat16" if major >= 8 else "mixed_float16"


def resolve_precision(policy):
    """`policy`, or for "auto" the policy of the first device of this backend."""
    return policy_for(*first_device()) if policy == "auto" else policy


def use_precision(policy):
    """Sets Keras' global dtype policy (resolving "auto"); returns the name set."""
    keras.config.set_dtype_policy(resolve_precision(policy))
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


# ## Compile once per machine: JAX's persistent compilation cache, and a count of compilations

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


# ## Bucketed batches of fixed shapes for `fit`, `evaluate` and `predict`, on any backend

class BucketedBatches(keras.utils.PyDataset):
    """Batches `make(bucket, row indices)` in the order `plan.batches(lengths, seed)`.

    Subclasses set `self.plan` and implement `make`; `order` (a list of
    `(bucket, indices)`) replaces the plan's order (resuming, a subset).
    """

    def __init__(self, plan, lengths, seed=None, order=None):
        super().__init__()
        self.plan, self.seed = plan, seed
        self.order = plan.batches(lengths, seed) if order is None else order

    def __len__(self):
        return len(self.order)

    def __getitem__(self, index):
        bucket, rows = self.order[index]
        return self.make(bucket, rows)

    def make(self, bucket, rows):
        raise NotImplementedError

    def with_order(self, order):
        """The same rows, batched as `order` says."""
        raise NotImplementedError

    def skip(self, count):
        """The same batches without the first `count` (resuming mid-epoch)."""
        return self.with_order(self.order[count:])

    def rows(self):
        """Every real row index, in batch order (top-up rows left out)."""
        indices = [rows[rows != EMPTY] for _, rows in self.order]
        return np.concatenate(indices) if indices else np.zeros(0, "int64")

    @property
    def shapes(self):
        """The distinct input shapes these batches reach a compiler with."""
        return sorted({self.plan.shapes[bucket] for bucket, _ in self.order})


def token_batches(ids, labels, lengths, batch_size, batch_tokens=None, seed=None,
                  bucketing=True):
    """Labelled token id batches in a few fixed shapes, for this backend: with
    `bucketing`, rows padded to the first of `lengths` (up to the longest) that holds
    them, `batch_tokens // length` (or `batch_size`) rows a batch; else every batch
    `batch_size` rows of the full length."""
    longest = ids.shape[1]
    if bucketing:
        plan = BucketPlan(boundaries_up_to(longest, lengths), batch_tokens,
                          None if batch_tokens else batch_size)
    else:
        plan = BucketPlan.single(longest, batch_size)
    return for_backend(LabelledBatches(ids, labels, plan, seed))


def for_backend(batches):
    """`batches` as the fastest input of the current backend: on TensorFlow a `tf.data`
    pipeline with unknown sizes (one trace) and without the top-up rows (a replica of
    `MirroredStrategy` given only top-up rows would average its loss in as 0); the
    `PyDataset` itself elsewhere."""
    if keras.backend.backend() != "tensorflow":
        return batches
    import tensorflow as tf  # only on its backend: the JAX path runs where TF is absent

    def spec(array):
        array = np.asarray(array)
        return tf.TensorSpec((None,) * array.ndim, tf.as_dtype(array.dtype))

    signature = tf.nest.map_structure(spec, batches[0])
    dataset = tf.data.Dataset.from_generator(
        lambda: (real_rows(batches, i) for i in range(len(batches))),
        output_signature=signature)
    return dataset.apply(tf.data.experimental.assert_cardinality(len(batches))).prefetch(2)


def real_rows(batches, index):
    """Batch `index` without its top-up rows (as it is if `batches` has none)."""
    batch = batches[index]
    order = getattr(batches, "order", None)
    if order is None:
        return batch
    real = order[index][1] != EMPTY
    return keras.tree.map_structure(lambda array: np.asarray(array)[real], batch)


class LabelledBatches(BucketedBatches):
    """`(ids, labels, weights)` batches of 0-padded id rows with one label each (a review
    and its sentiment): rows cut to their bucket's length, top-up rows repeating a
    real row of the batch with weight 0. Compile the model with `weighted_metrics` so
    the top-up rows count in no metric."""

    def __init__(self, ids, labels, plan, seed=None, order=None):
        self.ids, self.labels = np.asarray(ids), np.asarray(labels)
        lengths = np.maximum((self.ids != 0).sum(axis=1), 1)
        super().__init__(plan, lengths, seed, order)

    def make(self, bucket, rows):
        real = rows != EMPTY
        rows = np.where(real, rows, rows[real][0])
        return (self.ids[rows, :self.plan.boundaries[bucket]], self.labels[rows],
                real.astype("float32"))

    def with_order(self, order):
        return LabelledBatches(self.ids, self.labels, self.plan, order=order)


class EvenBatches(keras.utils.PyDataset):
    """Batches of a `PyDataset` padded to a multiple of `devices` rows (the sharding of
    `DataParallel` needs that), then cut to one process's share of them.

    Padding rows are zeros with sample weight 0, so they change no loss or gradient;
    only a final, smaller batch of an epoch has any. A batch without sample weights
    gets weights of 1 for its real rows. `share` is `(process index, process count)`:
    each process keeps an equal, contiguous block of every padded batch.
    """

    def __init__(self, batches, devices, share=(0, 1)):
        super().__init__()
        self.inner, self.devices, self.share = batches, devices, share

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        inputs, labels, *weights = self.inner[index]
        rows = len(keras.tree.flatten(inputs)[0])
        weights = np.asarray(weights[0], "float32") if weights else np.ones(rows, "float32")
        padded = -(-rows // self.devices) * self.devices

        def pad(array):
            array = np.asarray(array)
            return np.concatenate([array, np.zeros((padded - rows, *array.shape[1:]),
                                                   array.dtype)])

        index, count = self.share
        block = slice(index * padded // count, (index + 1) * padded // count)
        return keras.tree.map_structure(lambda array: pad(array)[block],
                                        (inputs, labels, weights))

    def skip(self, count):
        return EvenBatches(self.inner.skip(count), self.devices, self.share)
