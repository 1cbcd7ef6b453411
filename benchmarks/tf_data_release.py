"""What an epoch waits for at its end on TensorFlow: a tf.data pipeline with autotuning on
(tf.data's default) against the kit's untuned one (`data_prep/pipelines.py`).

The lessons call `fit` once per epoch and `evaluate` after it, as here; each call makes
a new iterator, and deleting one whose autotuning thread runs waits for that thread's
current interval (doubling up to a minute). A callback stretches each training batch to
`--epoch-seconds` over the epoch, as a larger model's steps would. The wait shows on a
busy machine (a lost wake-up of the tuning thread): `--busy` processes spin beside the
measurement, as a second test worker or data preparation would.

    python benchmarks/tf_data_release.py --busy 2
"""

import argparse
import contextlib
import multiprocessing
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "tf_data_release.json"
BATCHES = 100


def epochs(pipeline, epoch_seconds, count):
    """Wall seconds of each epoch's `fit` and `evaluate` calls beyond its batches' time."""
    import keras
    import numpy as np
    import tensorflow as tf

    rng = np.random.default_rng(0)
    features = rng.normal(size=(BATCHES * 8, 16)).astype("float32")
    labels = (features.sum(axis=1) > 0).astype("float32")
    train = pipeline(tf.data.Dataset.from_tensor_slices((features, labels))).batch(8)
    validation = pipeline(tf.data.Dataset.from_tensor_slices((features, labels))).batch(64)
    model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(1, activation="sigmoid")])
    model.compile(optimizer="adam", loss="binary_crossentropy")

    class StepTime(keras.callbacks.Callback):  # a larger model's step, without its work
        def on_train_batch_end(self, batch, logs=None):
            time.sleep(epoch_seconds / BATCHES)

    waits = []
    for _ in range(count):
        started = time.perf_counter()
        model.fit(train, epochs=1, verbose=0, callbacks=[StepTime()])
        model.evaluate(validation, verbose=0)
        waits.append(time.perf_counter() - started - epoch_seconds)
    return waits


def spin():
    while True:
        pass


@contextlib.contextmanager
def busy(processes):
    """`processes` CPU-bound processes running while the block runs."""
    spinners = [multiprocessing.Process(target=spin, daemon=True) for _ in range(processes)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.terminate()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/tf_data_release.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--epoch-seconds", type=float, nargs="+", default=[5.0, 12.0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--busy", type=int, default=0, help="CPU-bound processes beside it")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    from data_prep.pipelines import untuned
    from process.commands import import_backend

    import_backend()
    rows = []
    for seconds in args.epoch_seconds:
        for name, pipeline in (("autotuned (tf.data default)", lambda dataset: dataset),
                               ("untuned (the kit)", untuned)):
            with busy(args.busy):
                waits = epochs(pipeline, seconds, args.epochs)
            later = waits[1:] or waits  # the first epoch also traces its steps
            rows.append({"epoch_seconds": seconds, "pipeline": name,
                         "first_epoch_overhead_seconds": round(waits[0], 2),
                         "later_epochs_mean_overhead_seconds": round(sum(later) / len(later),
                                                                     2)})
            print(rows[-1], flush=True)
    write_results({"machine": machine(), "busy_processes": args.busy,
                   "batches_per_epoch": BATCHES,
                   "epochs_each": args.epochs, "results": rows}, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
