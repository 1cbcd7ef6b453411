"""Seconds before the first batch of the `gpu` translator's training: its blocks
unrolled (six encoder and six decoder blocks in every program) or scanned (each stack
one `ScannedBlocks`, compiled once), its programs compiled one after another (as Keras
does as each batch shape first comes) or side by side (`compilation.AheadOfTime`), with
Keras's threefry dropout masks or rbg ones.

Measured on the CPU with JAX (a GPU machine's compiler takes several times longer per
program, so what carries over is the count of programs and whether they compile one
after another or side by side): the model is built, `fit` starts on the real batch
shapes of the en-es training split, and the clock stops at the first batch.

    KERAS_BACKEND=jax python benchmarks/compile_ahead.py --work-dir .gpu/work \\
        --spa-eng-path .gpu/spa-eng.zip              # results/compile_ahead.json
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.reporting import machine, write_results  # noqa: E402


class FirstBatch(Exception):
    """Raised at the first batch: the clock stops there."""


def seconds_to_first_batch(data, random_generator, workers, scan_blocks):
    import keras

    from workflows import translation
    from workflows.core import batches, compilation
    from workflows.seq2seq.presets import make_config

    config = make_config("transformer", "gpu", {"dtype_policy": "mixed_bfloat16",
                                                "random_generator": random_generator,
                                                "scan_blocks": scan_blocks})
    model = translation.build_model(config, *data.tokenizer.vocabulary_sizes)
    train = batches.for_backend(data.batches(config, "train", 0))
    validation = batches.for_backend(data.batches(config, "val", limit=config.validation_pairs))
    ahead = compilation.AheadOfTime(workers)

    class Clock(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            ahead.start(self.model, train, validation)

        def on_train_batch_begin(self, batch, logs=None):
            raise FirstBatch

    started = time.perf_counter()
    with compilation.Compilations() as compiled:
        try:
            model.fit(train, epochs=1, verbose=0, callbacks=[Clock()])
        except FirstBatch:
            first_batch = time.perf_counter() - started
        ahead.wait()
    return {"scan_blocks": scan_blocks, "random_generator": random_generator,
            "compile_workers": ahead.workers,
            "train_step_programs": compiled.of("jit(train_step"),
            "test_step_programs": compiled.of("jit(test_step"),
            "seconds_to_first_batch": round(first_batch, 1),
            "seconds_to_every_program": round(time.perf_counter() - started, 1),
            "compile_seconds_summed": round(compiled.seconds, 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work-dir")
    parser.add_argument("--spa-eng-path")
    parser.add_argument("--compile-workers", type=int,
                        help="programs compiled at once (default: half the cores)")
    parser.add_argument("--output", default="benchmarks/results/compile_ahead.json")
    args = parser.parse_args(argv)
    import os

    os.environ["NLPKIT_COMPILATION_CACHE"] = "0"  # a fresh machine's: nothing cached
    from workflows import translation
    from workflows.seq2seq.presets import make_config

    data = translation.load_data(make_config("transformer", "gpu"), args.spa_eng_path,
                                 args.work_dir)
    rows = []
    for scan_blocks in (False, True):
        rows.append(seconds_to_first_batch(data, "rbg", args.compile_workers, scan_blocks))
        print(rows[-1], flush=True)
    write_results({"title": "Compiling the gpu translator's programs before its first batch",
                   "machine": machine(), "rows": rows}, args.output)


if __name__ == "__main__":
    main()
