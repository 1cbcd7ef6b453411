"""Where a run computes: its devices and processes (its precision and random generator:
`precision.py`; what XLA compiles: `compilation.py`; the batches `fit` reads:
`batches.py`).

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

import contextlib
import os
from dataclasses import dataclass

import keras
import numpy as np

from process.errors import UserError


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


def list_devices():
    """The devices Keras trains on (`cpu:0`, `gpu:0`, ...); on PyTorch, which Keras's
    distribution API does not cover, torch's own."""
    if keras.backend.backend() == "torch":
        import torch

        count = torch.cuda.device_count()
        return [f"cuda:{index}" for index in range(count)] or ["cpu:0"]
    return keras.distribution.list_devices()


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
        yield Placement("none", (list_devices()[0],))


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
    devices = list_devices()
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
