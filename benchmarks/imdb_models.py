"""Every IMDB model's measured figures, from the MLflow store, beside the classical anchors.

For each config of the `imdb_sentiment` experiment (a model and the fields it changed
from that model's defaults), its newest run that has test metrics
(`python -m workflows.imdb_sentiment evaluate --run-id ...`): test accuracy,
ROC AUC and macro F1 on all 25,000 test reviews, training minutes (an ensemble: its
members' sum), test reviews scored per second, the expected calibration error, and
accuracy and calibration error on the short out-of-domain reviews of `--texts` (scored
here when a run lacks them or scored another version of the file). Rows of an
earlier results file
whose runs are not in this store (measured on another machine or store) are kept, each
with the machine it was measured on.

    MLFLOW_TRACKING_URI=sqlite:///work/mlflow.db python benchmarks/imdb_models.py

Writes `benchmarks/results/imdb_models.json` and prints the README's table.
"""

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere
sys.path.insert(0, str(Path(__file__).resolve().parent))
from data_prep import cache  # noqa: E402  (after the path is set)
from workflows.core.metric_groups import ungrouped  # noqa: E402

RESULTS = Path(__file__).with_name("results")
SHORT_REVIEWS = Path(__file__).with_name("data") / "short_reviews.tsv"
ANCHORS = {  # test accuracy on IMDB, trained on IMDB data only
    "NBSVM-bi (Wang & Manning 2012)": 0.9122,
    "NBSVM-uni+bi+tri (Mesnil et al. 2014)": 0.9187,
    "RNNLM + paragraph vectors + NBSVM ensemble (Mesnil et al. 2014)": 0.9257,
    "ULMFiT without external pretraining (Howard & Ruder 2018)": 0.944,
}


def texts_key(path):
    return "texts_" + re.sub(r"[^0-9a-zA-Z]+", "_", Path(path).stem).strip("_").lower()


def label(run, workflow, runs, shared=()):
    """The run's model, with the config fields it changed from that model's defaults; an
    ensemble: its members' labels, with the validation share they have in common once."""
    params = run.data.params
    model = params.get("model")
    if model == "ensemble":
        default_share = workflow.CATALOG.base("nbsvm").val_fraction
        share = float(params.get("val_fraction", default_share))
        members = [label(runs[m], workflow, runs, {"val_fraction"}) if m in runs else m[:8]
                   for m in params["members"].split(",")]
        if params.get("lexicon", "none") != "none":
            members.append(f"{params['lexicon']} lexicon")
        name = "ensemble" if share == default_share else f"ensemble (val_fraction={share})"
        fitted = params.get("fit_on", "reviews")
        calibrated = params.get("calibrated_on", "none")
        return f"{name} of " + " + ".join(members) + (
            f", weights fitted on {fitted}" if fitted != "reviews" else "") + (
            f", confidence by length fitted on {calibrated.split(':')[0][:24]}"
            if calibrated != "none" else "")
    defaults = workflow.CATALOG.base(model)
    changed = [f"{k}={v}" for k, v in params.items() if k not in IGNORED and k not in shared
               and hasattr(defaults, k) and str(getattr(defaults, k)) != v]
    return model + (f" ({', '.join(changed)})" if changed else "")


# an lm_classifier's source, and a round-trip augmentation's translators (their ids)
IGNORED = {"init_from", "translator", "back_translator", "distribution", "vocabulary_size",
           "sequence_length", "embed_dim", "dense_dim", "num_heads", "num_layers",
           "dtype_policy"}


def training_minutes(metrics):
    """A run's training minutes, with the work it did before `fit` (`doc2vec`: training
    Doc2Vec and inferring the train and val vectors)."""
    if "train_minutes" not in metrics:
        return None
    return metrics["train_minutes"] + sum(metrics.get(name, 0) for name in (
        "doc2vec_train_minutes", "train_inference_minutes", "val_inference_minutes"))


def measured_runs(texts):
    """{config label: figures} for the newest evaluated run of each config."""
    import mlflow

    from workflows import imdb_sentiment as workflow
    from workflows.core import store

    experiment = store.use_experiment(workflow.EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], "metrics.test_accuracy > 0",
                              order_by=["attributes.start_time DESC"], output_format="list")
    every = mlflow.search_runs([experiment.experiment_id], output_format="list")
    by_id = {run.info.run_id: run for run in every}
    newest = {}
    for run in runs:
        newest.setdefault(label(run, workflow, by_id), run)
    minutes = {run.info.run_id: training_minutes(ungrouped(run.data.metrics)) for run in every}
    key = texts_key(texts)
    rows = {}
    digest = cache.sha256_of(texts)
    for model, run in newest.items():
        if scored_file_digest(run, key) != digest:  # never scored, or on another version
            workflow.evaluate(run.info.run_id, texts_file=texts)
            run = mlflow.get_run(run.info.run_id)
        metrics = ungrouped(run.data.metrics)
        members = run.data.params["members"].split(",") if "members" in run.data.params \
            else []
        rows[model] = {
            "run_id": run.info.run_id, "device": run.data.tags.get("device"),
            "test_accuracy": metrics["test_accuracy"], "test_roc_auc": metrics["test_roc_auc"],
            "test_macro_f1": metrics.get("test_macro_f1"),
            "train_minutes": sum(minutes.get(m) or 0 for m in members) if members
            else training_minutes(metrics),
            "test_reviews_per_second": metrics.get("test_reviews_per_second"),
            "test_calibration_error": metrics.get("test_expected_calibration_error"),
            "short_reviews_accuracy": metrics[f"{key}_accuracy"],
            "short_reviews_macro_f1": metrics[f"{key}_macro_f1"],
            "short_reviews_calibration_error": metrics.get(f"{key}_expected_calibration_error"),
            "short_reviews_sha256": digest,
            **({"augment": run.data.params["augment"]} if run.data.params.get(
                "augment", "none") != "none" else {}),
            **({"members": members, "weights": run.data.params.get("weights")} if members
               else {}),
            **({"temperature_at_10_words": metrics["temperature_at_10_words"],
                "short_reviews_calibration_error_before": metrics.get(
                    f"{key}_uncalibrated_expected_calibration_error")}
               if "temperature_at_10_words" in metrics else {})}
    return rows


def scored_file_digest(run, key):
    """The SHA-256 of the texts file the run's `key` metrics were scored on (None if it
    has none, or was scored before evaluate recorded it)."""
    import mlflow

    if f"{key}_accuracy" not in run.data.metrics:
        return None
    try:
        scored = json.loads(mlflow.artifacts.load_text(
            f"runs:/{run.info.run_id}/{key}_metrics.json"))
    except Exception:  # noqa: BLE001  an artifact store without the file: score again
        return None
    return scored.get("sha256")


def earlier_rows(output, measured):
    """The rows of an earlier `output` whose runs this store does not hold, each with
    its machine (older files name one machine for all rows)."""
    path = Path(output)
    if not path.exists():
        return {}
    earlier = json.loads(path.read_text())
    run_ids = {row["run_id"] for row in measured.values()}
    return {model: {"machine": earlier.get("machine"), **row}
            for model, row in earlier["models"].items()
            if "run_id" in row and row["run_id"] not in run_ids and model not in measured}


def measured_on(row):
    machine = row.get("machine") or {}
    return machine.get("device") or machine.get("cpu", "-")


def markdown(rows, texts_digest):
    """The table; short-review figures only of rows scored on the file `texts_digest`."""
    lines = ["| model | test accuracy | ROC AUC | macro F1 | test ECE | train min | reviews/s | "
             "short reviews acc. | short ECE | measured on |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for model, row in sorted(rows.items(), key=lambda item: -item[1]["test_accuracy"]):
        short = row.get("short_reviews_sha256") == texts_digest  # else: another probe
        cells = [row.get(k) for k in ("test_accuracy", "test_roc_auc", "test_macro_f1",
                                      "test_calibration_error", "train_minutes",
                                      "test_reviews_per_second")]
        cells += [row.get(k) if short else None for k in ("short_reviews_accuracy",
                                                           "short_reviews_calibration_error")]
        formats = ["{:.4f}", "{:.4f}", "{:.4f}", "{:.3f}", "{:.1f}", "{:.0f}", "{:.3f}",
                   "{:.3f}"]
        lines.append(f"| {model} | " + " | ".join(
            "-" if cell is None else fmt.format(cell)
            for cell, fmt in zip(cells, formats, strict=True)) + f" | {measured_on(row)} |")
    lines += [f"| *{name}* | *{value}* | | | | | | | | |" for name, value in ANCHORS.items()]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--texts", default=str(SHORT_REVIEWS),
                        help="labelled short reviews (text<TAB>label per line)")
    parser.add_argument("--output", default=str(RESULTS / "imdb_models.json"))
    args = parser.parse_args(argv)
    from reporting import machine, write_results

    here = {model: {**row, "machine": machine()} for model, row in
            measured_runs(args.texts).items()}
    rows = {**earlier_rows(args.output, here), **here}
    write_results({"texts": args.texts, "anchors": ANCHORS, "models": rows}, args.output)
    print(markdown(rows, cache.sha256_of(args.texts)))


if __name__ == "__main__":
    main()
