"""The checkpoint work an epoch of the `gpu` translator costs, as the training loop did it
before issue 53 and as it does now, on this machine's CPU and disk.

Before, every epoch wrote three full weight files with `save_weights` (the checkpoint
with Adam's state, the best epoch's, the epoch's own for averaging) and hashed each.
Now an epoch copies the best and the epoch's weights to memory, and a checkpoint (all
three, `.npz`) is written only once the time since the last is 20 times its cost
(`workflows/core/training.py`). The per-epoch cost of the new scheme is that copy plus
the checkpoint spread over the epochs between two of them, for an epoch of
`--epoch-seconds` of training (3.7 s: the H100 measured in ../shared/gpu/README.md).

    KERAS_BACKEND=jax python benchmarks/epoch_end.py
"""

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "epoch_end.json"


def timed(work, repeats=3):
    """The median seconds of `repeats` runs of `work()`."""
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        seconds.append(time.perf_counter() - started)
    return sorted(seconds)[len(seconds) // 2]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/epoch_end.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--epoch-seconds", type=float, default=3.7,
                        help="an epoch's training batches (default: the H100's)")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    from data_prep.cache import sha256_of
    from workflows.core.checkpoints import (
        CHECKPOINT_SHARE,
        TrainingFolder,
        TrainingState,
    )
    from workflows.core.weight_files import weight_values
    from workflows.seq2seq.presets import make_config
    from workflows.translation import build_model

    config = make_config("transformer", "gpu")
    model = build_model(config, 8000, 8000)  # the joint vocabulary's size
    model.optimizer.build(model.trainable_variables)
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)

        def three_h5_files():  # the loop before: checkpoint, best, epoch weights
            for name in ("checkpoint.weights.h5", "best.weights.h5", "epoch-1.weights.h5"):
                model.save_weights(scratch / name)
                sha256_of(scratch / name)

        def snapshots():  # now, every epoch: the best and the epoch's weights to memory
            weight_values(model)
            weight_values(model)

        folder = TrainingFolder(scratch / "run")

        def checkpoint():  # now, when due: the held weights and the checkpoint
            folder.keep_best_weights(model)
            folder.unwritten["epoch-1.weights.npz"] = weight_values(model)
            folder.checkpoint(model, TrainingState())

        before = timed(three_h5_files)
        snapshot = timed(snapshots)
        write = timed(checkpoint)
        sizes = {path.name: round(path.stat().st_size / 2**20)
                 for path in (scratch / "run").glob("*.npz")}
    # a checkpoint waits until 20 times its cost has passed: that many seconds of epochs
    epochs_between = max(1, math.ceil(write / CHECKPOINT_SHARE / (args.epoch_seconds
                                                                  + snapshot)))
    now = snapshot + write / epochs_between
    results = {
        "machine": machine(), "parameters": model.count_params(), "file_megabytes": sizes,
        "epoch_training_seconds": args.epoch_seconds,
        "before": {"per_epoch_seconds": round(before, 3),
                   "share_of_epoch_wall": round(before / (args.epoch_seconds + before), 3)},
        "now": {"snapshot_seconds": round(snapshot, 3), "checkpoint_seconds": round(write, 3),
                "epochs_between_checkpoints": epochs_between,
                "per_epoch_seconds": round(now, 3),
                "share_of_epoch_wall": round(now / (args.epoch_seconds + now), 3)},
    }
    write_results(results, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
