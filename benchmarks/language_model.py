"""The language-model lesson measured: training speed, perplexity, cached generation.

One trained run (the latest `language_model` run, or `--run-id`):

- training tokens/s and the perplexity reached (validation and test, per token and per
  word) within the run's budget, read from its MLflow metrics;
- generation of `--tokens` new tokens for `--prompts` prompts of one length, greedy:
  cached (one token per step through the layers' key/value cache, compiled step) against
  uncached (the whole sequence re-run for every token), ms per generated token, and
  whether both give the same tokens.

    python benchmarks/language_model.py --run-id <id>

Writes `benchmarks/results/language_model.json`. The anchor: keras-hub's "GPT text
generation from scratch" example reaches a validation perplexity of about 52 on
SimpleBooks-92 (5k WordPiece vocabulary, 3.3M parameters).
"""

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from reporting import machine, write_results  # noqa: E402  (benchmarks/, beside this file)

from workflows.core.metric_groups import ungrouped  # noqa: E402

RESULTS = Path(__file__).with_name("results") / "language_model.json"
PROMPTS = ["The movie was", "The film is", "This movie was", "The acting was"]


def timed(function):
    started = time.perf_counter()
    result = function()
    return result, time.perf_counter() - started


def generation_speed(generator, rows, tokens):
    """(figures, cached texts) of greedy generation of `tokens` new tokens after prompt id
    `rows` (one length): cached (the compiled sampling loop) against uncached (the model
    re-run for every token), each compiled before it is timed."""
    from workflows.causal_lm.sampling import Sampling

    sampling = Sampling(max_new_tokens=tokens)
    generator.continue_ids(rows, sampling)
    generator.generate_uncached(rows, tokens)
    cached, cached_seconds = timed(lambda: generator.continue_ids(rows, sampling))
    uncached, uncached_seconds = timed(lambda: generator.generate_uncached(rows, tokens))
    return {"prompts": len(rows), "new_tokens": tokens,
            "ms_per_token_cached": round(1000 * cached_seconds / tokens, 2),
            "ms_per_token_uncached": round(1000 * uncached_seconds / tokens, 2),
            "speedup": round(uncached_seconds / cached_seconds, 1),
            "same_tokens": cached == uncached}, cached


def main(argv=None):
    from workflows import language_model as workflow
    from workflows.causal_lm.source import load_generator
    from workflows.core import runs

    parser = argparse.ArgumentParser(prog="python benchmarks/language_model.py",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--run-id", help="language_model run (default: the latest with a model)")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--output", default=str(RESULTS))
    args = parser.parse_args(argv)

    run = runs.find_run(workflow.EXPERIMENT, args.run_id)
    generator = load_generator(run)
    by_length = {}  # the uncached baseline takes prompts of one length
    for prompt in PROMPTS:
        by_length.setdefault(len(generator.tokenizer([prompt])[0]), []).append(prompt)
    prompts = max(by_length.values(), key=len)[:args.prompts]
    generation, cached = generation_speed(generator, generator.tokenize(prompts), args.tokens)
    metrics, params = ungrouped(run.data.metrics), run.data.params
    results = {
        "run_id": run.info.run_id, "preset": params.get("preset"),
        "parameters": int(params.get("parameters", 0)),
        "vocabulary_size": len(generator.vocabulary),
        "training": {name: round(metrics[key], 2) for name, key in (
            ("minutes", "train_minutes"), ("epochs", "trained_epochs"),
            ("tokens_per_second", "mean_tokens_per_second"),
            ("best_val_perplexity", "best_val_perplexity"),
            ("best_val_word_perplexity", "best_val_word_perplexity"),
            ("test_perplexity", "test_perplexity"),
            ("test_word_perplexity", "test_word_perplexity")) if key in metrics},
        "generation": generation,
        "anchor": "keras-hub GPT from scratch: validation perplexity ~52 on SimpleBooks-92 "
                  "(5k WordPiece, 3.3M parameters)",
        "samples": dict(zip(prompts, cached, strict=True)),
        "machine": machine(),
    }
    write_results(results, args.output)


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
