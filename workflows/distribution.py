"""Data parallelism on Keras' own engines, chosen per run (`--distribution`).

- `none`: the default device.
- `mirrored`: TensorFlow's `MirroredStrategy` over this machine's GPUs (or its logical
  CPUs, where there are several and no GPU): the model is built, compiled and fitted in
  the strategy's scope and Keras splits each `tf.data` batch across the replicas.
- `data_parallel`: `keras.distribution.DataParallel` over every JAX device, on one
  machine or several. Several machines (processes) are joined with
  `keras.distribution.initialize()`, configured by `KERAS_DISTRIBUTION_JOB_ADDRESSES`,
  `KERAS_DISTRIBUTION_NUM_PROCESSES` and `KERAS_DISTRIBUTION_PROCESS_ID`; each process
  feeds its own slice of every batch.

`batch_size` is always the global batch (all devices together), so a distributed run
takes the same optimizer steps on the same examples as a single-device one and the
learning rate (and its schedule) is left as it is. TensorFlow's
`MultiWorkerMirroredStrategy` does not work with Keras 3 `fit` (keras-team/keras#20585):
several machines on the TensorFlow backend are refused, pointing to the JAX path.
"""

import contextlib
import os
from dataclasses import dataclass

import keras
import numpy as np

from data_prep.errors import UserError

CHOICES = ("none", "mirrored", "data_parallel")
HELP = ("none | mirrored (TensorFlow: every GPU of this machine) | data_parallel (JAX: every "
        "device, on one machine or several, see README: Scale out); batch_size is the global "
        "batch, split across devices")
PROCESS_VARIABLES = ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                     "KERAS_DISTRIBUTION_PROCESS_ID")


class DistributionError(UserError):
    """A distribution this backend or machine cannot run."""


@dataclass(frozen=True)
class Placement:
    """Where a run trains: its devices and this process's place among the processes."""

    choice: str
    devices: tuple
    process_id: int = 0
    processes: int = 1

    @property
    def is_chief(self):
        """Only process 0 logs, checkpoints, exports and prints the summary."""
        return self.process_id == 0

    def batches(self, batches):
        """`batches` as this placement needs them: on JAX data parallelism, each batch
        made a multiple of the device count and cut to this process's slice; otherwise
        unchanged."""
        if self.choice != "data_parallel":
            return batches
        if isinstance(batches, keras.utils.PyDataset):
            return EvenBatches(batches, len(self.devices), self.process_id, self.processes)
        return _even_dataset(batches, len(self.devices), self.process_id, self.processes)

    def barrier(self, name):
        """Waits until every process gets here (several processes only)."""
        if self.processes > 1:
            from jax.experimental import multihost_utils  # only with several JAX processes

            multihost_utils.sync_global_devices(name)


@contextlib.contextmanager
def placed(choice):
    """Builds, compiles and trains what runs inside on the chosen devices; yields the
    `Placement`."""
    backend = keras.backend.backend()
    several_machines = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1")) > 1 \
        or "TF_CONFIG" in os.environ
    if choice == "none":
        yield Placement("none", (_default_device(backend),))
    elif choice == "mirrored":
        with _mirrored(backend, several_machines) as placement:
            yield placement
    elif choice == "data_parallel":
        with _data_parallel(backend, several_machines) as placement:
            yield placement
    else:
        raise DistributionError(f"distribution must be one of {', '.join(CHOICES)}, "
                                f"got {choice!r}.")


@contextlib.contextmanager
def _mirrored(backend, several_machines):
    if backend != "tensorflow":
        raise DistributionError(f"--distribution mirrored is TensorFlow's MirroredStrategy; "
                                f"on the {backend} backend use --distribution data_parallel.")
    if several_machines:
        raise DistributionError(
            "Several machines on the TensorFlow backend are not supported: Keras 3 `fit` does "
            "not work with MultiWorkerMirroredStrategy (keras-team/keras#20585). Train with "
            "KERAS_BACKEND=jax and --distribution data_parallel (README: Scale out).")
    import tensorflow as tf  # only on its backend

    devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
    strategy = tf.distribute.MirroredStrategy([device.name for device in devices])
    with strategy.scope():
        yield Placement("mirrored", tuple(strategy.extended.worker_devices))


@contextlib.contextmanager
def _data_parallel(backend, several_machines):
    if backend != "jax":
        raise DistributionError(f"--distribution data_parallel is keras.distribution on JAX; "
                                f"set KERAS_BACKEND=jax (on {backend}, use "
                                "--distribution mirrored for several GPUs).")
    import jax  # only on its backend

    if several_machines:
        missing = [name for name in PROCESS_VARIABLES if not os.environ.get(name)]
        if missing:
            raise DistributionError(f"Several processes need {', '.join(missing)} as well "
                                    "(README: Scale out).")
        if not jax.distributed.is_initialized():
            keras.distribution.initialize()
    devices = keras.distribution.list_devices()
    previous = keras.distribution.distribution()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    try:
        yield Placement("data_parallel", tuple(devices), jax.process_index(),
                        jax.process_count())
    finally:
        keras.distribution.set_distribution(previous)


def _default_device(backend):
    if backend == "jax":
        import jax  # only on its backend

        return str(jax.devices()[0])
    if backend == "tensorflow":
        import tensorflow as tf  # only on its backend

        gpus = tf.config.list_logical_devices("GPU")
        return gpus[0].name if gpus else tf.config.list_logical_devices("CPU")[0].name
    return "cpu"


class EvenBatches(keras.utils.PyDataset):
    """Batches of a `PyDataset` padded to a multiple of `devices` rows (the sharding of
    `DataParallel` needs that), then cut to process `process_id`'s contiguous slice.

    Padding rows are zeros with sample weight 0, so they change no loss or gradient;
    only a final, smaller batch of an epoch has any. A batch without sample weights
    gets weights of 1 for its real rows.
    """

    def __init__(self, batches, devices, process_id=0, processes=1):
        super().__init__()
        self.inner, self.devices = batches, devices
        self.process_id, self.processes = process_id, processes

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

        share = padded // self.processes
        start = self.process_id * share
        return keras.tree.map_structure(lambda array: pad(array)[start:start + share],
                                        (inputs, labels, weights))

    def skip(self, count):
        return EvenBatches(self.inner.skip(count), self.devices, self.process_id,
                           self.processes)


def _even_dataset(dataset, devices, process_id, processes):
    """`EvenBatches` for a `tf.data` dataset of batches."""
    import tensorflow as tf  # tf.data input: TensorFlow is installed

    def rows(*batch):
        return tf.shape(tf.nest.flatten(batch)[0])[0]

    def cut(*batch):
        share = rows(*batch) // devices * devices // processes
        return tf.nest.map_structure(lambda t: t[process_id * share:(process_id + 1) * share],
                                     batch)

    return dataset.filter(lambda *batch: rows(*batch) >= devices).map(cut)

