"""One training step of each lesson's small model on TensorFlow, JAX and PyTorch: the
same networks (the lessons' own builders), the same batches, on this machine's CPU.

    python benchmarks/backends.py [--steps 30]     # results/backends.json

Each backend runs in a process of its own (`KERAS_BACKEND`); each model is built and
compiled as its lesson compiles it, trained `--warmup` steps (compiling or tracing),
then timed over `--steps` calls of `train_on_batch` on one fixed batch: the median
milliseconds a step. Small models, 2 cores: what a learner on a laptop meets, not what
a GPU does.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).with_name("results") / "backends.json"
BACKENDS = ("tensorflow", "jax", "torch")
VOCABULARY, BATCH = 2000, 32


def models():
    """{name: (compiled model, inputs, labels)}: the sentiment BiLSTM, the translation
    Transformer and the language model's GPT, small, on random token ids."""
    import dataclasses

    import numpy as np

    from workflows import translation
    from workflows.causal_lm import models as lm_models
    from workflows.causal_lm.presets import CATALOG as LM_CATALOG
    from workflows.sentiment import rnn

    rng = np.random.default_rng(0)

    def ids(*shape):
        return rng.integers(1, VOCABULARY, shape).astype("int32")

    bilstm = rnn.build_model(dataclasses.replace(rnn.MODELS["bilstm"], embed_dim=32, units=32),
                             VOCABULARY)
    transformer = translation.build_model(translation.make_config("transformer", "cpu", {
        "embed_dim": 64, "dense_dim": 128, "num_heads": 2, "sequence_length": 20,
        "dtype_policy": "float32"}), VOCABULARY, VOCABULARY)
    gpt = lm_models.build_model(dataclasses.replace(
        LM_CATALOG.base("gpt", "cpu"), sequence_length=64, embed_dim=64, dense_dim=128,
        num_heads=2, num_layers=2, dtype_policy="float32"), VOCABULARY)
    return {
        "sentiment bilstm": (bilstm, ids(BATCH, 128), rng.integers(0, 2, BATCH)),
        "translation transformer": (transformer, {"source": ids(BATCH, 20),
                                                  "target": ids(BATCH, 20)}, ids(BATCH, 20)),
        "language model gpt": (gpt, ids(BATCH, 64), ids(BATCH, 64)),
    }


def measure(steps, warmup):
    """Rows of this process's backend: each model's parameters and median ms a step."""
    import keras

    rows = []
    for name, (model, inputs, labels) in models().items():
        for _ in range(warmup):
            model.train_on_batch(inputs, labels)
        seconds = []
        for _ in range(steps):
            started = time.perf_counter()
            model.train_on_batch(inputs, labels)
            seconds.append(time.perf_counter() - started)
        rows.append({"backend": keras.backend.backend(), "model": name,
                     "parameters": model.count_params(),
                     "ms_per_step": round(statistics.median(seconds) * 1e3, 2)})
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python benchmarks/backends.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    if args.measure:  # (one backend: this process's)
        print(json.dumps(measure(args.steps, args.warmup)))
        return
    from benchmarks.reporting import machine, write_results

    rows = []
    for backend in BACKENDS:
        done = subprocess.run(
            [sys.executable, __file__, "--measure", "--steps", str(args.steps),
             "--warmup", str(args.warmup)], capture_output=True, text=True,
            env={**os.environ, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu"})
        if done.returncode:
            errors = [line for line in done.stderr.splitlines() if "Error" in line]
            rows.append({"backend": backend, "failed": (errors or ["?"])[-1][:300]})
            continue
        rows += json.loads(done.stdout.strip().splitlines()[-1])
    write_results({"machine": {**machine(), "backend": "each"}, "steps": args.steps,
                   "warmup": args.warmup, "batch": BATCH, "rows": rows}, args.output)


if __name__ == "__main__":
    main()
