"""The host's own time per training step on JAX: what the training loop costs beside
the model, measured with a translator too small to cost anything.

A GPU computes a step of the `gpu` translator in about 20 ms; whatever the host does
per step that the device waits for (making the batch, Keras's loop and callbacks,
reading the metrics, which waits for the device) is lost from it. Here every variant
trains the same tiny Transformer on the same synthetic pairs, on the CPU, in batches of
256 tokens (buckets of 16, 32 and 40 tokens, as the `gpu` preset's), so that the
model costs next to nothing:

- `device_ms`: the compiled train step called back to back on one batch already on
  the device: the model's own cost, the floor;
- `batch_ms`: making one batch of the `gpu` preset's 8,192 tokens (`PairBatches[i]`),
  nothing else;
- `fit_ms` per step, steady (the first epoch, which compiles, left out): Keras's
  `fit` alone, and through the lessons' `fit_resumably` (checkpoints, stops, the
  budget), with 1 and with 16 steps a call (`steps_per_execution`), threefry or rbg
  dropout masks. `fit_ms - device_ms` is the host's cost per step.

    KERAS_BACKEND=jax python benchmarks/host_step.py       # results/host_step.json
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

TINY = {"embed_dim": 8, "dense_dim": 16, "num_heads": 2, "encoder_layers": 1,
        "decoder_layers": 1, "dtype_policy": "float32", "schedule": "constant",
        "sequence_length": 40, "batch_tokens": 256}
VOCABULARY = 64


def synthetic_pairs(count, seed=0):
    """Source and target id rows of 1-38 tokens, as the en-es pairs' lengths spread."""
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.gamma(4.0, 3.0, count).astype(int) + 1, 1, 38)
    source = [rng.integers(4, VOCABULARY, n).astype("int32") for n in lengths]
    target = [np.concatenate([[2], row[::-1], [3]]).astype("int32") for row in source]
    return source, target


def tiny_model(steps_per_execution, random_generator, **changes):
    from workflows import translation
    from workflows.seq2seq.presets import make_config

    config = make_config("transformer", "gpu", {
        **TINY, "steps_per_execution": steps_per_execution,
        "random_generator": random_generator, **changes})
    return config, translation.build_model(config, VOCABULARY, VOCABULARY)


def epochs_of(config, pairs):
    from workflows.core.batches import for_backend
    from workflows.seq2seq.batching import PairBatches, pair_plan

    plan = pair_plan(config.sequence_length, config.batch_tokens,
                     bucket_width=config.bucket_width)
    return lambda epoch: for_backend(PairBatches(*pairs, plan, seed=epoch))


def device_ms(model, batch, calls=50):
    """The compiled train step on one device-resident batch, called back to back."""
    import jax

    model.optimizer.build(model.trainable_variables)
    model.make_train_function()
    state = jax.tree.map(lambda v: jax.numpy.array(v.value, copy=True), (
        model.trainable_variables, model.non_trainable_variables,
        model.optimizer.variables, model.metrics_variables))  # donated: copies
    step = jax.jit(model.train_step, donate_argnums=0)
    data = jax.device_put(batch)
    for _ in range(2):  # the second call's state may differ in form from the first's
        _, state = step(state, data)
    jax.block_until_ready(state)
    started = time.perf_counter()
    for _ in range(calls):
        _, state = step(state, data)
    jax.block_until_ready(state)
    return (time.perf_counter() - started) / calls * 1000


def batch_ms(epochs):
    batches = epochs(0)
    started = time.perf_counter()
    for index in range(len(batches)):
        batches[index]
    return (time.perf_counter() - started) / len(batches) * 1000


class EpochClock:
    """A Keras callback: the seconds of each epoch's batches."""

    def __init__(self):
        import keras

        clock = self

        class Callback(keras.callbacks.Callback):
            def on_epoch_begin(self, epoch, logs=None):
                clock.started = time.perf_counter()

            def on_epoch_end(self, epoch, logs=None):
                clock.seconds.append(time.perf_counter() - clock.started)

        self.seconds, self.callback = [], Callback()


def fit_ms(pairs, steps_per_execution, random_generator, loop, epochs=3):
    """Steady ms per step of `epochs` epochs, the first left out."""
    from workflows.core.fitting import Checkpointing, fit_resumably
    from workflows.core.stopping import Stopping

    config, model = tiny_model(steps_per_execution, random_generator)
    batches = epochs_of(config, pairs)
    steps = len(batches(0))
    if loop == "keras_fit":
        clock = EpochClock()
        for epoch in range(epochs):
            model.fit(batches(epoch), epochs=1, verbose=0, callbacks=[clock.callback])
        seconds = clock.seconds[1:]
    else:
        state = fit_resumably(model, batches, None, tempfile.mkdtemp(), Stopping(epochs),
                              checkpointing=Checkpointing(every_steps=0), verbose=0)
        seconds = [epoch["epoch_seconds"] for epoch in state.history[1:]]
    return {"loop": loop, "steps_per_execution": steps_per_execution,
            "random_generator": random_generator, "steps_per_epoch": steps,
            "fit_ms_per_step": round(sum(seconds) / len(seconds) / steps * 1000, 2)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=20000)
    parser.add_argument("--output", default="benchmarks/results/host_step.json")
    args = parser.parse_args(argv)
    import os

    os.environ["NLPKIT_COMPILATION_CACHE"] = "0"
    import keras

    if keras.backend.backend() != "jax":
        sys.exit("Run with KERAS_BACKEND=jax: this measures JAX's training loop.")
    pairs = synthetic_pairs(args.pairs)
    config, model = tiny_model(1, "rbg")
    epochs = epochs_of(config, pairs)
    full_batches = epochs_of(tiny_model(1, "rbg", batch_tokens=8192)[0], pairs)
    floor = {"device_ms_per_step": round(device_ms(model, epochs(0)[0]), 2),
             "batch_ms": round(batch_ms(full_batches), 2)}
    print(floor, flush=True)
    rows = []
    for loop, steps, generator in (("keras_fit", 1, "rbg"), ("keras_fit", 16, "rbg"),
                                   ("fit_resumably", 1, "rbg"), ("fit_resumably", 16, "rbg"),
                                   ("fit_resumably", 16, "threefry")):
        rows.append({**fit_ms(pairs, steps, generator, loop)})
        rows[-1]["host_ms_per_step"] = round(rows[-1]["fit_ms_per_step"]
                                             - floor["device_ms_per_step"], 2)
        print(rows[-1], flush=True)
    write_results({"title": "The host's own time per training step (JAX, a tiny translator)",
                   "machine": machine(pairs=args.pairs), **floor, "rows": rows}, args.output)


if __name__ == "__main__":
    main()
