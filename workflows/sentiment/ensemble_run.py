"""The IMDB lesson's `ensemble` step: member runs scored on validation reviews, stacking
weights fitted there, and the result logged as a run of its own whose pyfunc carries
every member's model."""

import json
import shutil
import tempfile
from pathlib import Path

import mlflow
import numpy as np

from workflows.core import models, runs, store
from workflows.core.config import ConfigError
from workflows.sentiment.ensemble import combine, fit_weights
from workflows.sentiment.metrics import binary_metrics

PYFUNC_FILE = Path(__file__).with_name("ensemble_pyfunc.py")


def ensemble(experiment, run_ids, validation, input_example):
    """The run id of the ensemble of `run_ids` (runs of `experiment`), fitted on
    `validation(runs)` = (texts, labels, data fingerprint, params to log), read only once
    the runs are checked; an ensemble of the same members is reused."""
    member_runs = [runs.find_run(experiment, run_id) for run_id in run_ids or ()]
    members = sorted({run.info.run_id for run in member_runs})
    if len(members) < 2:
        raise ConfigError("An ensemble needs the models of at least two different runs: "
                          "give --run-id twice or more (ids from the compare step).")
    for run in member_runs:
        runs.check_has_model(run)
    previous = [run for run in mlflow.search_runs(
        [store.use_experiment(experiment).experiment_id], output_format="list",
        filter_string=f"tags.ensemble_members = '{','.join(members)}'")
        if run.data.tags.get("model_logged") == "true"]
    if previous:
        print(f"This ensemble exists: run {previous[0].info.run_id}")
        return previous[0].info.run_id
    member_runs = [next(run for run in member_runs if run.info.run_id == member)
                   for member in members]
    texts, labels, fingerprint, params = validation(member_runs)
    with tempfile.TemporaryDirectory() as staging:
        folder, names, columns = Path(staging) / "ensemble", [], []
        for index, run in enumerate(member_runs):
            # the run's id in the name: two members of one model kind stay apart
            names.append(f"member_{index}_{run.data.params.get('model')}_{run.info.run_id[:8]}")
            with models.verified_model(run) as local:
                columns.append(models.predict_in_chunks(
                    mlflow.pyfunc.load_model(str(local)), texts,
                    f"Scoring the validation reviews with {names[-1]}"))
                shutil.copytree(local, folder / names[-1])
        probabilities = np.stack(columns, axis=1)
        weights, bias = fit_weights(probabilities, labels)
        (folder / "ensemble.json").write_text(json.dumps(
            {"members": names, "run_ids": members, "weights": weights, "bias": bias}))
        return _log(experiment, member_runs, names, probabilities, labels, (weights, bias),
                    folder, (fingerprint, params), input_example)


def _log(experiment, member_runs, names, probabilities, labels, fitted, folder, data,
         input_example):
    weights, bias = fitted
    fingerprint, params = data
    members = [run.info.run_id for run in member_runs]
    val = {f"{name}_val_accuracy": binary_metrics(labels, column)["accuracy"]
           for name, column in zip(names, probabilities.T, strict=True)}
    combined = binary_metrics(labels, combine(probabilities, weights, bias))
    experiment_id = store.use_experiment(experiment).experiment_id
    with mlflow.start_run(run_name="ensemble", experiment_id=experiment_id) as run:
        mlflow.log_params({"model": "ensemble", "members": ",".join(members),
                           "weights": json.dumps([round(w, 4) for w in weights]),
                           "bias": round(bias, 4), **params})
        mlflow.set_tags(store.run_tags(fingerprint, model_family="ensemble",
                                       ensemble_members=",".join(members)))
        mlflow.log_metrics({**val, "best_val_accuracy": combined["accuracy"],
                            "best_val_roc_auc": combined["roc_auc"]})
        models.log_pyfunc_model(PYFUNC_FILE, {"ensemble": folder}, input_example,
                                  models.model_requirements(),
                                  packages=("sentiment", "causal_lm"))
        mlflow.set_tag("model_logged", "true")
    print(json.dumps({"run_id": run.info.run_id, "weights": dict(zip(names, weights,
                                                                     strict=True)),
                      "bias": bias, **val, "ensemble_val_accuracy": combined["accuracy"]},
                     indent=2))
    return run.info.run_id
