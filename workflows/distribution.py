"""Data parallelism on Keras' own engines, chosen per run (`--distribution`).

- `none`: the default device.
- `mirrored`: TensorFlow's `MirroredStrategy` over this machine's GPUs (or its logical
  CPUs, where there are several and no GPU): the model is built, compiled and fitted in
  the strategy's scope and Keras splits each `tf.data` batch across the replicas.
- `data_parallel`: `keras.distribution.DataParallel` over every device of one JAX
  process (the GPUs of a machine).

`batch_size` is always the global batch (all devices together), so a distributed run
takes the same optimizer steps on the same examples as a single-device one and the
learning rate (and its schedule) is left as it is. TensorFlow's
`MultiWorkerMirroredStrategy` does not work with Keras 3 `fit` (keras-team/keras#20585):
several machines on the TensorFlow backend are refused. Several JAX processes
(`KERAS_DISTRIBUTION_NUM_PROCESSES` > 1) are refused too, for now: saving weights
gathers them with a collective that every process must join, and only the first
process may write the run folder (README: Scale out).
"""

import contextlib
import os
from dataclasses import dataclass

import keras
import numpy as np

from data_prep.errors import UserError

CHOICES = ("none", "mirrored", "data_parallel")
HELP = ("none | mirrored (TensorFlow: every GPU of this machine) | data_parallel (JAX: every "
        "device of this machine); batch_size is the global batch, split across devices")


class DistributionError(UserError):
    """A distribution this backend or machine cannot run."""


@dataclass(frozen=True)
class Placement:
    """Where a run trains: the choice, its devices and the engine (a `tf.distribute`
    strategy or a `keras.distribution.Distribution`; None for one device)."""

    choice: str
    devices: tuple
    engine: object = None

    def scope(self):
        """Re-enters the engine: what runs inside builds or trains on these devices."""
        return self.engine.scope() if self.engine else contextlib.nullcontext()

    def batches(self, batches):
        """`batches` as this placement needs them: on JAX data parallelism, each batch
        made a multiple of the device count; otherwise unchanged."""
        if self.choice != "data_parallel":
            return batches
        if isinstance(batches, keras.utils.PyDataset):
            return EvenBatches(batches, len(self.devices))
        return _even_dataset(batches, len(self.devices))


def check(choice):
    """Raises `DistributionError` (one line: what to do instead) if `choice` cannot run
    here."""
    backend = keras.backend.backend()
    several_machines = int(os.environ.get("KERAS_DISTRIBUTION_NUM_PROCESSES", "1") or 1) > 1 \
        or "TF_CONFIG" in os.environ
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
    if choice == "data_parallel" and several_machines:
        raise DistributionError(
            "Several JAX processes are not supported yet: train on the devices of one "
            "machine (--distribution data_parallel, one process) (README: Scale out).")


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
    devices = keras.distribution.list_devices()
    previous = keras.distribution.distribution()
    engine = keras.distribution.DataParallel(devices=devices)
    keras.distribution.set_distribution(engine)
    try:
        yield Placement("data_parallel", tuple(devices), engine)
    finally:
        keras.distribution.set_distribution(previous)


class EvenBatches(keras.utils.PyDataset):
    """Batches of a `PyDataset` padded to a multiple of `devices` rows (the sharding of
    `DataParallel` needs that).

    Padding rows are zeros with sample weight 0, so they change no loss or gradient;
    only a final, smaller batch of an epoch has any. A batch without sample weights
    gets weights of 1 for its real rows.
    """

    def __init__(self, batches, devices):
        super().__init__()
        self.inner, self.devices = batches, devices

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

        return keras.tree.map_structure(pad, (inputs, labels, weights))

    def skip(self, count):
        return EvenBatches(self.inner.skip(count), self.devices)


def _even_dataset(dataset, devices):
    """A `tf.data` dataset of batches cut to a multiple of `devices` rows (batches of
    fewer rows are left out)."""
    import tensorflow as tf  # tf.data input: TensorFlow is installed

    def rows(*batch):
        return tf.shape(tf.nest.flatten(batch)[0])[0]

    def cut(*batch):
        even = rows(*batch) // devices * devices
        return tf.nest.map_structure(lambda t: t[:even], batch)

    return dataset.filter(lambda *batch: rows(*batch) >= devices).map(cut)

