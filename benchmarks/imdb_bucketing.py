"""Length bucketing for the IMDB BiLSTM: seconds per epoch with and without, in one run.

Both variants train the same `bilstm_glove` model (same initial weights, same
reviews, GloVe frozen) for the same number of steps; only the batching differs:
every batch padded to 600 tokens, or reviews of similar length batched together and
padded to the longest in their batch. The variants take turns (`--rounds` rounds of
`--steps` batches each) so machine noise hits both alike; seconds per epoch are the
median seconds per step times the batches in an epoch. Validation accuracy is then
measured the same way for both (600-token padding): the comparison is at equal
accuracy.

    python benchmarks/imdb_bucketing.py --imdb-path ../shared/data/aclImdb_v1.tar.gz

Writes `benchmarks/results/imdb_bucketing.json`.
"""

import argparse
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

RESULTS = Path(__file__).with_name("results") / "imdb_bucketing.json"


def prepared_batches(config, prepared, split, epoch=None):
    """The batches the RNN family trains on (`sentiment/token_ids.py`)."""
    from workflows.core.batches import token_batches
    from workflows.sentiment.family import REVIEW_LENGTHS

    return token_batches(prepared.token_ids(split), prepared.labels(split), REVIEW_LENGTHS,
                         config.batch_size, config.batch_tokens,
                         None if epoch is None else config.seed + epoch, config.bucketing)


def interleaved_runs(config, prepared, matrix, rounds, steps):
    """Per-variant seconds per step (one entry per round) and the trained models."""
    import keras

    from workflows.sentiment import rnn

    variants = {"padded_to_600": False, "bucketed": True}
    models, seconds = {}, {name: [] for name in variants}
    for name in variants:
        keras.utils.set_random_seed(config.seed)  # the same initial weights for both
        models[name] = rnn.build_model(config, len(prepared.vocabulary()), matrix)
    for round_index in range(rounds + 1):  # round 0 traces the graphs; it is not timed
        for name, bucketing in variants.items():
            variant = dataclasses.replace(config, bucketing=bucketing)
            batches = prepared_batches(variant, prepared, "train", round_index)
            started = time.perf_counter()
            models[name].fit(batches.take(steps if round_index else 20), verbose=0,
                             shuffle=False)
            if round_index:
                seconds[name].append((time.perf_counter() - started) / steps)
                print(f"  round {round_index} {name}: {seconds[name][-1] * 1000:.0f} ms/step",
                      flush=True)
    return seconds, models


def main(argv=None):
    from data_prep import glove, imdb
    from workflows import imdb_sentiment as workflow
    from workflows.sentiment import family
    from workflows.sentiment.sources import ImdbReviews

    parser = argparse.ArgumentParser(prog="python benchmarks/imdb_bucketing.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument(imdb.ACL_IMDB.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200, help="batches per variant per round")
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)
    config = workflow.CATALOG.make("bilstm_glove", overrides={  # the recorded variant
        "fine_tune_embeddings": False, "units": 32, "batch_size": 32})
    source = ImdbReviews(args.imdb_path)
    prepared = source.prepare(workflow.data_settings(source, config), args.work_dir)
    matrix, _ = glove.build_embedding_matrix(prepared.vocabulary(), glove.load_word_vectors())
    seconds, models = interleaved_runs(config, prepared, matrix, args.rounds, args.steps)
    padded = dataclasses.replace(config, bucketing=False)
    validation = prepared_batches(padded, prepared, "val")
    results = {}
    for name, bucketing in (("padded_to_600", False), ("bucketed", True)):
        variant = dataclasses.replace(config, bucketing=bucketing)
        steps_per_epoch = len(prepared_batches(variant, prepared, "train", 0))
        _, accuracy = models[name].evaluate(validation, verbose=0)
        results[name] = {"ms_per_step": [round(s * 1000, 1) for s in seconds[name]],
                         "steps_per_epoch": steps_per_epoch,
                         "seconds_per_epoch": statistics.median(seconds[name]) * steps_per_epoch,
                         "val_accuracy": accuracy}
    ratio = results["padded_to_600"]["seconds_per_epoch"] / results["bucketed"]["seconds_per_epoch"]
    report = {"benchmark": "imdb_bucketing", "model": "bilstm_glove (GloVe 6B 50d, frozen)",
              "rounds": args.rounds, "steps_per_round": args.steps,
              "bucket_lengths": list(family.REVIEW_LENGTHS),
              "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
              **results, "speedup": ratio}
    for name in ("padded_to_600", "bucketed"):
        print(f"{name:>14}: {results[name]['seconds_per_epoch']:.1f} s/epoch, "
              f"val accuracy {results[name]['val_accuracy']:.4f} after "
              f"{args.rounds * args.steps} steps")
    print(f"Bucketing speedup: {ratio:.2f}x")
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(json.dumps(report, indent=2) + "\n")
    print(f"Wrote {args.output}")


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
