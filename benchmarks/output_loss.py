"""The loss over the tied output projection, alone: what computing it from the logits'
log-sum-exp saves against going through a tensor of log-probabilities.

`layers.MaskedCrossentropy` used to take `log_softmax` of the logits, then the label's
entry and, for label smoothing, their mean: one more `(tokens, vocabulary)` float32
tensor beside the logits, forward and backward. It now takes the log-sum-exp of the
logits and subtracts the label's logit (and, for smoothing, the logits' mean), which is
the same number. Here both are compiled with JAX as the `gpu` translator's step uses
them: hidden states of a batch of `--tokens` tokens and width 512, projected on the
transposed embedding of the joint vocabulary (8,000 pieces), the loss with smoothing
0.1 and its gradients for both. For each: XLA's temporary memory of the compiled
program (`memory_analysis`, for float32 and for bfloat16 inputs, as under mixed
precision) and the milliseconds of a call on this CPU (float32; a CPU without bfloat16
units emulates it).

    KERAS_BACKEND=jax python benchmarks/output_loss.py     # results/output_loss.json
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402

SMOOTHING = 0.1


def through_log_probabilities(labels, logits):
    """The former formulation: a tensor of log-probabilities, then its entries."""
    from keras import ops

    log_probs = ops.log_softmax(ops.cast(logits, "float32"), axis=-1)
    nll = -ops.squeeze(ops.take_along_axis(log_probs, labels[..., None], axis=-1), -1)
    return (1.0 - SMOOTHING) * nll - SMOOTHING * ops.mean(log_probs, axis=-1)


def from_log_sum_exp(labels, logits):
    import layers

    return layers.MaskedCrossentropy(SMOOTHING).call(labels, logits)


def loss_and_gradients(token_loss):
    import jax
    import jax.numpy as jnp

    def loss(hidden, embedding, labels):
        logits = jnp.einsum("btd,vd->btv", hidden, embedding)
        return jnp.mean(token_loss(labels, logits))

    return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))


def inputs(tokens, vocabulary, width, dtype, seed=0):
    import jax
    import jax.numpy as jnp

    keys = jax.random.split(jax.random.key(seed), 3)
    shape = (tokens // 32, 32)
    return (jax.random.normal(keys[0], (*shape, width), dtype),
            (jax.random.normal(keys[1], (vocabulary, width)) * width ** -0.5).astype(dtype),
            jax.random.randint(keys[2], shape, 1, vocabulary, jnp.int32))


def milliseconds(function, arguments, calls):
    import jax

    jax.block_until_ready(function(*arguments))
    started = time.perf_counter()
    for _ in range(calls):
        result = function(*arguments)
    jax.block_until_ready(result)
    return (time.perf_counter() - started) / calls * 1000


def measure(name, token_loss, args):
    import jax.numpy as jnp

    function = loss_and_gradients(token_loss)
    row = {"formulation": name}
    for dtype in (jnp.float32, jnp.bfloat16):
        arguments = inputs(args.tokens, args.vocabulary, args.width, dtype)
        memory = function.lower(*arguments).compile().memory_analysis()
        row[f"temp_mb_{jnp.dtype(dtype).name}"] = round(memory.temp_size_in_bytes / 2**20, 1)
    arguments = inputs(args.tokens, args.vocabulary, args.width, jnp.float32)
    row["ms_per_call_float32"] = round(milliseconds(function, arguments, args.calls), 1)
    row["loss"] = float(function(*arguments)[0])
    print(row, flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--vocabulary", type=int, default=8000)
    parser.add_argument("--width", type=int, default=512)
    parser.add_argument("--calls", type=int, default=10)
    parser.add_argument("--output", default="benchmarks/results/output_loss.json")
    args = parser.parse_args(argv)
    import keras

    if keras.backend.backend() != "jax":
        sys.exit("Run with KERAS_BACKEND=jax: this reads XLA's memory analysis.")
    rows = [measure("log_softmax, then the label's entry and the mean",
                    through_log_probabilities, args),
            measure("log-sum-exp minus the label's logit (MaskedCrossentropy)",
                    from_log_sum_exp, args)]
    write_results({"title": "The loss over the tied output projection, alone (JAX)",
                   "machine": machine(tokens=args.tokens, vocabulary=args.vocabulary,
                                      width=args.width, label_smoothing=SMOOTHING),
                   "rows": rows}, args.output)


if __name__ == "__main__":
    main()
