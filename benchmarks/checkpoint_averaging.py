"""Checkpoint averaging: test BLEU of a run's best epoch against the mean of its last epochs.

A `translation` run trained with `--average-epochs N` keeps the weights of its last N
epochs in its run folder. This decodes the same test sentences (beam search) with the
best epoch's weights and with the mean of the last k epochs for each k from 2 to N,
so the gain of averaging is measured on one model:

    python benchmarks/checkpoint_averaging.py --run-id RUN_ID

Writes `benchmarks/results/checkpoint_averaging_<direction>.json`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
from reporting import machine, translation_run_parser, write_results  # noqa: E402  (benchmarks/, beside this file)

RESULTS = Path(__file__).with_name("results")


def main(argv=None):
    from workflows import translation as workflow
    from workflows.core import runs
    from workflows.core.checkpoints import TrainingFolder
    from workflows.core.weight_files import average_weights
    from workflows.seq2seq import evaluation
    from workflows.seq2seq.metrics import bleu_scores

    parser = translation_run_parser("checkpoint_averaging.py", __doc__.split("\n")[0])
    parser.add_argument("--limit", type=int, help="only the first N test sentences")
    parser.add_argument("--output", help="default: results/checkpoint_averaging_<dir>.json")
    args = parser.parse_args(argv)

    run, translator = workflow.load_run_translator(args.run_id)
    config = runs.config_of(workflow.LESSON, run)
    folder = TrainingFolder(run.data.tags["run_folder"])
    state = folder.load_state()
    kept = [epoch for epoch in range(1, state.epoch + 1) if folder.epoch_weights(epoch).exists()]
    if len(kept) < 2:
        raise SystemExit(f"{folder.directory} keeps {len(kept)} epoch(s) of weights; train "
                         "with --average-epochs N (N > 1) to measure averaging.")
    _, sources, refs = workflow.split_references(config, "test", args.spa_eng_path,
                                                 args.work_dir, args.limit)
    variants = {f"best_epoch_{state.best_epoch}": [folder.best_weights]}
    for count in range(2, len(kept) + 1):
        epochs = kept[-count:]
        variants[f"average_epochs_{epochs[0]}-{epochs[-1]}"] = [
            folder.epoch_weights(epoch) for epoch in epochs]
    scores = {}
    for name, paths in variants.items():
        average_weights(translator.model, paths)
        outputs = evaluation.translate_in_batches(translator, sources, config.beam_width, name)
        scores[name] = {key: round(value, 2) for key, value in
                        bleu_scores(outputs, refs).items()}
        print(f"{name}: {scores[name]}", flush=True)
    best = scores[f"best_epoch_{state.best_epoch}"]["bleu"]
    results = {
        "run_id": run.info.run_id, "direction": config.direction, "preset": config.preset,
        "trained_epochs": state.epoch, "train_minutes": round(state.train_seconds / 60, 1),
        "exported_weights": run.data.tags.get("exported_weights"),
        "test_sentences": len(sources), "beam_width": config.beam_width,
        "test_beam": scores,
        "bleu_gain_over_best_epoch": {name: round(score["bleu"] - best, 2)
                                      for name, score in scores.items()},
        "machine": machine(),
    }
    write_results(results, args.output or
                  RESULTS / f"checkpoint_averaging_{config.direction}.json")


if __name__ == "__main__":
    from process.commands import import_backend

    import_backend()
    main()
