"""TensorFlow's first train step of the `gpu` translator (3+3 blocks of 256 here), traced
as Keras does by default and with the lifecycle's `compilation.build_before_tracing`.

Without a distribution strategy, Keras on TensorFlow builds the optimizer's and the
metrics' variables while it traces the first train step, and `tf.function` then traces
the step a second time (a first trace that created variables is not reused). The
lifecycle builds them first, from the batches' shapes. Each variant runs in a fresh
process: a model, then one `fit` epoch over 400 of `host_step.py`'s synthetic pairs at
1 step a call; it records the build's seconds, the first step's (its tracing) and the
median step's.

    python benchmarks/tensorflow_tracing.py        # results/tensorflow_tracing.json
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def first_steps(built, scan_blocks):
    """One variant, in this process: its timings as a dict."""
    import keras
    import numpy as np

    from benchmarks.host_step import synthetic_pairs
    from workflows.core import compilation
    from workflows.core.batches import for_backend
    from workflows.seq2seq.batching import PairBatches, pair_plan
    from workflows.seq2seq.presets import make_config
    from workflows.translation import build_model

    config = make_config("transformer", "gpu", {
        "encoder_layers": 3, "decoder_layers": 3, "embed_dim": 256, "dense_dim": 512,
        "dtype_policy": "float32", "steps_per_execution": 1, "scan_blocks": scan_blocks})
    model = build_model(config, 8000, 8000)
    plan = pair_plan(40, 1024, bucket_width=16)
    batches = for_backend(PairBatches(*synthetic_pairs(400), plan))
    seconds = []

    class Clock(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.started = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            seconds.append(time.perf_counter() - self.started)

    started = time.perf_counter()
    if built:
        compilation.build_before_tracing(model, batches)
    build_seconds = time.perf_counter() - started
    model.fit(batches, epochs=1, verbose=0, callbacks=[Clock()])
    return {"scan_blocks": scan_blocks, "built_before_tracing": built,
            "build_seconds": round(build_seconds, 2), "first_step_seconds": round(seconds[0], 2),
            "median_step_seconds": round(float(np.median(seconds)), 3), "steps": len(seconds),
            "fit_seconds": round(time.perf_counter() - started, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--variant", nargs=2, metavar=("BUILT", "SCAN"), help=argparse.SUPPRESS)
    parser.add_argument("--output", default="benchmarks/results/tensorflow_tracing.json")
    args = parser.parse_args(argv)
    if args.variant:
        print(json.dumps(first_steps(args.variant[0] == "1", args.variant[1] == "1")))
        return
    from benchmarks.reporting import machine, write_results

    rows = []
    for scan in ("0", "1"):
        for built in ("0", "1"):
            done = subprocess.run([sys.executable, __file__, "--variant", built, scan],
                                  capture_output=True, text=True, check=True, cwd=ROOT,
                                  env={**os.environ, "KERAS_BACKEND": "tensorflow"})
            rows.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(rows[-1], flush=True)
    write_results({"title": "TensorFlow's first train step, traced once or twice",
                   "machine": machine(), "rows": rows}, args.output)


if __name__ == "__main__":
    main()
