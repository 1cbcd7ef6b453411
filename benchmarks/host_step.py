"""The host's own time per training step of the `gpu` translator's batches, measured with
a model too small to cost anything (8-wide, one block each, 64 tokens): what a GPU
waits for between steps whatever its speed. One epoch of 83,275 synthetic pairs with
the lengths of the en-es training split, batched as the `gpu` preset batches them,
through the kit's own `fit_resumably`, after a first epoch that compiles.

Variants: `steps_per_execution` (the steps dispatched back to back between two reads
of the metrics, which wait for the device) and the token budget of a batch.

    KERAS_BACKEND=jax python benchmarks/host_step.py     # results/host_step.json
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.reporting import machine, write_results  # noqa: E402

PAIRS = 83_275  # the en-es training split
# en-es joint WordPiece lengths (max of source and target input): median 9, p90 15,
# p99 22, max 40 after truncation
LENGTH_MEDIAN, LENGTH_SIGMA = 9.0, 0.42


def synthetic_pairs(count, seed=0):
    rng = np.random.default_rng(seed)
    lengths = np.clip(np.rint(rng.lognormal(np.log(LENGTH_MEDIAN), LENGTH_SIGMA, count)), 2, 40)
    source = [rng.integers(4, 64, int(n)).astype("int32") for n in lengths]
    target = [np.concatenate([[2], rng.integers(4, 64, int(n) - 1), [3]]).astype("int32")
              for n in lengths]
    return source, target


def measure(steps_per_execution, batch_tokens, source, target):
    from workflows import translation
    from workflows.core import batches
    from workflows.core.fitting import fit_resumably
    from workflows.seq2seq.presets import make_config
    from workflows.seq2seq.translator import PairBatches, batch_plan

    config = make_config("transformer", "gpu", {
        "embed_dim": 8, "dense_dim": 8, "num_heads": 1, "encoder_layers": 1,
        "decoder_layers": 1, "dtype_policy": "float32", "batch_tokens": batch_tokens,
        "steps_per_execution": steps_per_execution})
    model = translation.build_model(config, 64, 64)
    plan = batch_plan(config)

    def epoch(number):
        return batches.for_backend(PairBatches(source, target, plan, seed=number))

    validation = batches.for_backend(PairBatches(source[:512], target[:512], plan))
    with tempfile.TemporaryDirectory() as folder:
        fit_resumably(model, epoch, validation, folder, 1, verbose=0, checkpoint_every_steps=0)
        started = time.perf_counter()
        state = fit_resumably(model, epoch, validation, folder, 2, verbose=0,
                              checkpoint_every_steps=0)
        wall = time.perf_counter() - started
    seconds = state.history[-1]["epoch_seconds"]
    steps = len(epoch(1))
    return {"steps_per_execution": steps_per_execution, "batch_tokens": batch_tokens,
            "steps": steps, "host_ms_per_step": round(1000 * seconds / steps, 2),
            "pairs_per_second": round(len(source) / seconds),
            "epoch_wall_seconds": round(wall, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps-per-execution", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--batch-tokens", type=int, nargs="+", default=[8192, 16384])
    parser.add_argument("--output", default="benchmarks/results/host_step.json")
    args = parser.parse_args(argv)
    source, target = synthetic_pairs(PAIRS)
    rows = [measure(k, tokens, source, target) for tokens in args.batch_tokens
            for k in args.steps_per_execution]
    for row in rows:
        print(row, flush=True)
    write_results({"title": "The host's time per training step of the gpu translator's batches",
                   "machine": machine(), "rows": rows}, args.output)


if __name__ == "__main__":
    main()
