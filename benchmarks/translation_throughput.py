"""Training throughput of the translation presets on the same sentence pairs, in one run.

Each preset (`tutorial` and `cpu` by default) trains on the same `--pairs` training
pairs, batched its own way (the tutorial: word tokens, batches of 64 padded to 20;
cpu: WordPiece, length buckets every 4 tokens with 1,536-token batches). The presets take turns
(`--rounds` passes each; one untimed pass first traces the graphs) so machine noise
hits them alike. Throughput is counted in the same unit for every preset: sentence
pairs per second and target words per second (the Spanish words of each pair plus
its end marker, the tutorial's tokens), with each preset's own target tokens per
second alongside.

    python benchmarks/translation_throughput.py --spa-eng-path ../shared/data/spa-eng.zip

Writes `benchmarks/results/translation_throughput.json`.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from reporting import machine, write_results  # noqa: E402  (benchmarks/, beside this file)

RESULTS = Path(__file__).with_name("results") / "translation_throughput.json"


def subset_data(config, indices, spa_eng_path, work_dir):
    """The preset's tokenized data restricted to the training pairs `indices`."""
    from workflows import translation as workflow

    data = workflow.load_data(config, spa_eng_path, work_dir)
    source, target = data.arrays["train"]
    data.arrays = {"train": ([source[i] for i in indices], [target[i] for i in indices])}
    return data


def main(argv=None):
    import keras
    import numpy as np

    from data_prep import spa_eng
    from data_prep.pair_tokens import normalize
    from workflows import translation as workflow
    from workflows.core.batches import for_backend
    from workflows.translation import build_model

    parser = argparse.ArgumentParser(prog="python benchmarks/translation_throughput.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument(spa_eng.SPA_ENG.flag)
    parser.add_argument("--work-dir")
    parser.add_argument("--presets", nargs="+", default=["tutorial", "cpu"])
    parser.add_argument("--pairs", type=int, default=5120, help="training pairs per pass")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    prepared = spa_eng.prepare(args.spa_eng_path, spa_eng.SpaEngSettings(), args.work_dir,
                               verbose=False)
    train_pairs = prepared.pairs("train")
    indices = np.random.default_rng(0).permutation(len(train_pairs))[:args.pairs]
    target_words = sum(len(normalize(train_pairs[i][1]).split()) + 1 for i in indices)
    runs = {}
    for preset in args.presets:
        config = workflow.make_config("transformer", preset)
        data = subset_data(config, indices, args.spa_eng_path, args.work_dir)
        keras.utils.set_random_seed(config.seed)
        model = build_model(config, *data.tokenizer.vocabulary_sizes)
        runs[preset] = {"config": config, "data": data, "model": model, "seconds": [],
                        "parameters": model.count_params()}
    for round_index in range(args.rounds + 1):
        for preset, run in runs.items():
            batches = run["data"].batches(run["config"], "train", epoch=round_index)
            dataset = for_backend(batches)
            if not round_index:  # trace the graphs on a few batches, untimed
                run["model"].fit(dataset.take(8), verbose=0)
                continue
            started = time.perf_counter()
            run["model"].fit(dataset, verbose=0)
            run["seconds"].append(time.perf_counter() - started)
            run["steps"], run["target_tokens"] = len(batches), batches.target_tokens()
            print(f"  round {round_index} {preset}: {run['seconds'][-1]:.1f} s for "
                  f"{args.pairs} pairs ({len(batches)} steps)", flush=True)
    results = {}
    for preset, run in runs.items():
        seconds = statistics.median(run["seconds"])
        results[preset] = {
            "seconds_per_pass": [round(s, 2) for s in run["seconds"]],
            "median_seconds": round(seconds, 2), "steps": run["steps"],
            "ms_per_step": round(1000 * seconds / run["steps"], 1),
            "parameters": run["parameters"],
            "pairs_per_second": round(args.pairs / seconds, 1),
            "target_words_per_second": round(target_words / seconds, 1),
            "own_target_tokens_per_second": round(run["target_tokens"] / seconds, 1),
            "tokenization": run["config"].tokenization,
            "batch_shapes": run["data"].batches(run["config"], "train").shapes,
            "dtype_policy": run["config"].dtype_policy}
    baseline = results[args.presets[0]]
    for preset in args.presets[1:]:
        results[f"{preset}_speedup_over_{args.presets[0]}"] = round(
            results[preset]["pairs_per_second"] / baseline["pairs_per_second"], 2)
    results["machine"] = machine(pairs=args.pairs, rounds=args.rounds,
                                 target_words=target_words)
    write_results(results, args.output)


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
