"""Length bucketing for the IMDB BiLSTM: seconds per epoch with and without, in one run.

Both variants train the same `bilstm_glove` model (same initial weights, same
reviews, GloVe frozen) for the same number of epochs; only the batching differs:
every batch padded to 600 tokens, or reviews of similar length batched together and
padded to the longest in their batch. Validation accuracy is measured the same way
for both (600-token padding), so the comparison is at equal accuracy.

    python -m benchmarks.imdb_bucketing --imdb-path ../shared/data/aclImdb_v1.tar.gz

Writes `benchmarks/results/imdb_bucketing.json`.
"""

import argparse
import dataclasses
import json
import os
import platform
import time
from pathlib import Path

RESULTS = Path(__file__).with_name("results") / "imdb_bucketing.json"


def measure(config, prepared, matrix, bucketing, epochs):
    import keras

    from workflows import imdb_sentiment as workflow

    keras.utils.set_random_seed(config.seed)
    model = workflow.build_model(config, len(prepared.vocabulary()), matrix)
    variant = dataclasses.replace(config, bucketing=bucketing)
    validation = workflow.batches(dataclasses.replace(config, bucketing=False), prepared, "val")
    seconds = []
    for epoch in range(epochs):
        dataset = workflow.batches(variant, prepared, "train", epoch=epoch)
        started = time.perf_counter()
        model.fit(dataset, epochs=1, verbose=0, shuffle=False)
        seconds.append(time.perf_counter() - started)
        print(f"  bucketing={bucketing} epoch {epoch + 1}: {seconds[-1]:.1f} s", flush=True)
    _, accuracy = model.evaluate(validation, verbose=0)
    # The first epoch includes tracing; report the mean of the others when there are any.
    steady = seconds[1:] or seconds
    return {"seconds_per_epoch": sum(steady) / len(steady), "epoch_seconds": seconds,
            "val_accuracy": accuracy}


def main(argv=None):
    from data_prep import glove, imdb
    from workflows import imdb_sentiment as workflow

    parser = argparse.ArgumentParser(prog="python -m benchmarks.imdb_bucketing",
                                     description=__doc__.split("\n")[0])
    parser.add_argument(imdb.ACL_IMDB.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    config = workflow.make_config("bilstm_glove")
    prepared = imdb.prepare(args.imdb_path, workflow.data_settings(config), args.work_dir)
    vectors = glove.load_word_vectors()
    matrix, _ = glove.build_embedding_matrix(prepared.vocabulary(), vectors)
    results = {}
    for bucketing in (False, True):
        results["bucketed" if bucketing else "padded_to_600"] = measure(
            config, prepared, matrix, bucketing, args.epochs)
    ratio = results["padded_to_600"]["seconds_per_epoch"] / results["bucketed"]["seconds_per_epoch"]
    report = {"benchmark": "imdb_bucketing", "model": "bilstm_glove (GloVe 6B 50d, frozen)",
              "epochs_each": args.epochs, "bucket_boundaries": list(workflow.BUCKET_BOUNDARIES),
              "machine": f"{platform.processor() or platform.machine()}, "
                         f"{os.cpu_count()} cores",
              **results, "speedup": ratio}
    for name in ("padded_to_600", "bucketed"):
        print(f"{name:>14}: {results[name]['seconds_per_epoch']:.1f} s/epoch, "
              f"val accuracy {results[name]['val_accuracy']:.4f}")
    print(f"Bucketing speedup: {ratio:.2f}x")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    from data_prep.runtime import quiet_tensorflow

    quiet_tensorflow()
    main()
