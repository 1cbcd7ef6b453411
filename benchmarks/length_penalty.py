"""Length penalty chosen on validation: beam BLEU of one translator for several alphas.

Decodes the first `--sentences` validation sources of a `translation` run (never the
test split) with its beam width, re-ranked by log-likelihood / ((5 + length) / 6) **
alpha (Wu et al. 2016) for each `--alphas` value, and names the best; use that alpha
with `evaluate --length-penalty` on the test split:

    python benchmarks/length_penalty.py --run-id RUN_ID --alphas 0,0.6,1.0

Alphas already scored in the results file for the same run are kept, so a later call
with more alphas adds to it.

Writes `benchmarks/results/length_penalty_<direction>.json`.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from reporting import machine, translation_run_parser, write_results  # noqa: E402  (benchmarks/, beside this file)

RESULTS = Path(__file__).with_name("results")


def main(argv=None):
    from workflows import translation as workflow
    from workflows.core import runs
    from workflows.seq2seq import evaluation
    from workflows.seq2seq.metrics import bleu_scores
    from workflows.seq2seq.presets import check_length_penalty

    parser = translation_run_parser("length_penalty.py", __doc__.split("\n")[0])
    parser.add_argument("--sentences", type=int, default=2000,
                        help="the first N validation sources")
    parser.add_argument("--alphas", default="0,0.6,1.0", help="comma-separated alphas")
    parser.add_argument("--output", help="default: results/length_penalty_<direction>.json")
    args = parser.parse_args(argv)
    alphas = [float(alpha) for alpha in args.alphas.split(",")]
    for alpha in alphas:
        check_length_penalty(alpha)

    run, translator = workflow.load_run_translator(args.run_id)
    config = runs.config_of(workflow.LESSON, run)
    _, sources, refs = workflow.split_references(config, "val", args.spa_eng_path, args.work_dir,
                                                 args.sentences)
    output = Path(args.output or RESULTS / f"length_penalty_{config.direction}.json")
    scores = earlier_scores(output, run.info.run_id, len(sources), config.beam_width)
    for alpha in alphas:
        if str(alpha) in scores:
            print(f"alpha {alpha}: {scores[str(alpha)]} (from {output})")
            continue
        outputs = evaluation.translate_in_batches(translator, sources, config.beam_width,
                                                f"alpha {alpha}", alpha)
        scores[str(alpha)] = {key: round(value, 2) for key, value in
                              bleu_scores(outputs, refs).items()}
        print(f"alpha {alpha}: {scores[str(alpha)]}", flush=True)
    results = {
        "run_id": run.info.run_id, "direction": config.direction, "preset": config.preset,
        "validation_sentences": len(sources), "beam_width": config.beam_width,
        "validation_beam": scores,
        "best_alpha": float(max(scores, key=lambda alpha: scores[alpha]["bleu"])),
        "machine": machine(),
    }
    write_results(results, output)


def earlier_scores(output, run_id, sentences, beam_width):
    """The alphas an earlier call already scored into `output` for the same run, sentences
    and beam width (decoding is deterministic, so they are kept, not decoded again)."""
    if not output.exists():
        return {}
    earlier = json.loads(output.read_text())
    same = (earlier.get("run_id"), earlier.get("validation_sentences"),
            earlier.get("beam_width")) == (run_id, sentences, beam_width)
    return dict(earlier.get("validation_beam", {})) if same else {}


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
