"""The IMDB lesson's `ensemble` step: member runs of any classes (and a sentiment
lexicon, if asked) scored on their validation texts, a stacking fitted there
(`ensemble.py`), and the result logged as a run of its own whose pyfunc carries every
member's model.

The stacking is the ensemble's calibration. Fitted on whole reviews only, it learns how
far to trust each member on 230-word film reviews; `fit_on="reviews+slices"` fits it on
the validation reviews and a slice of one or two sentences of each too (labelled as
its review), so the weights and the confidence also suit short text.

IMDB slices are labelled as their whole review, so they teach a short text to be unsure;
labelled texts of the domain the ensemble will serve (`calibration_texts`) teach it how
sure to be at their lengths: a `LengthTemperature` fitted on them and the validation
reviews, which keeps every decision and the reviews' confidence.
"""

import json
import re
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path

import mlflow
import numpy as np

from data_prep import cache, imdb
from data_prep.labelled_texts import read_labelled_texts
from data_prep.text import sentence_slices
from workflows.core import models, runs, store, tracking
from workflows.core.config import ConfigError
from workflows.sentiment.calibration import LengthTemperature
from workflows.sentiment.ensemble import combine, crossval_predictions, fit_weights
from workflows.sentiment.family import weights_of_classes
from workflows.sentiment.lexicon import LEXICON_PACKAGES, lexicon_probabilities
from workflows.sentiment.metrics import answer_matrix, binary_metrics, calibration, class_metrics
from workflows.sentiment.reviews import PROBABILITY
from workflows.sentiment.sources import classes_of_run

PYFUNC_FILE = Path(__file__).with_name("ensemble_pyfunc.py")  # any members' classes
SETTINGS_FILE = "ensemble.json"  # (as the pyfunc reads it)
MIN_CALIBRATION_TEXTS = 20  # fewer say little about how sure to be


def calibration_texts(path, text_column=None, label_column=None):
    """(texts, labels, a name that changes with the file's content) of the labelled
    texts in `path` (`data_prep.labelled_texts`), for `ensemble`'s `calibration_texts`."""
    texts, labels = read_labelled_texts(path, text_column, label_column)
    if len(texts) < MIN_CALIBRATION_TEXTS or len(set(labels.tolist())) < 2:
        raise ConfigError(f"{path} holds {len(texts)} texts: --calibrate-on needs at least "
                          f"{MIN_CALIBRATION_TEXTS}, positive and negative.")
    name = re.sub(r"[^\w.-]+", "_", Path(path).name)  # safe in a search filter
    return texts, labels, f"{name}:{cache.sha256_of(path)[:12]}"


def ensemble(experiment, run_ids, validation, input_example, lexicon="none",
             fit_on="reviews", calibration_texts=None, class_weight="none"):
    """The run id of the ensemble of `run_ids` (runs of `experiment`) and `lexicon`,
    fitted on `validation(runs)` = (texts, labels, data fingerprint, params to log), read
    only once the runs are checked, with a sentence slice of each text if `fit_on` says
    so, each text weighed by `class_weight` (`family.CLASS_WEIGHTS`), and its confidence
    by length fitted on `calibration_texts` = (texts, labels, a name that changes with
    their content), if given. An ensemble of the same members and settings is reused."""
    member_runs = [runs.find_run(experiment, run_id) for run_id in run_ids or ()]
    members = sorted({run.info.run_id for run in member_runs})
    if len(members) + (lexicon != "none") + (calibration_texts is not None) < 2:
        raise ConfigError("An ensemble needs the models of at least two different runs (or "
                          "one and --lexicon vader, or one and --calibrate-on): give "
                          "--run-id twice or more (ids from the compare step).")
    for run in member_runs:
        runs.check_has_model(run)
    classes = members_classes(member_runs, lexicon, calibration_texts)
    settings = {"ensemble_members": ",".join(members), "ensemble_lexicon": lexicon,
                "ensemble_fit_on": fit_on,
                "ensemble_calibrated_on": calibration_texts[2] if calibration_texts else "none"}
    previous = [run for run in mlflow.search_runs(
        [store.use_experiment(experiment).experiment_id], output_format="list",
        filter_string=" and ".join(f"tags.{name} = '{value}'"
                                   for name, value in settings.items()))
        if run.data.tags.get("model_logged") == "true"  # (ensembles before the weights had
        and run.data.tags.get("ensemble_class_weight", "none") == class_weight]  # no tag)
    settings["ensemble_class_weight"] = class_weight
    if previous:
        print(f"This ensemble exists: run {previous[0].info.run_id}")
        return previous[0].info.run_id
    member_runs = [next(run for run in member_runs if run.info.run_id == member)
                   for member in members]
    texts, labels, fingerprint, params = validation(member_runs)
    rows = {"reviews": len(texts)}
    if fit_on == "reviews+slices":
        texts, labels = texts + sentence_slices(texts), np.concatenate([labels, labels])
    rows["fitted"] = len(texts)
    if calibration_texts:  # scored with the rest, kept out of the weights' fit
        texts = texts + list(calibration_texts[0])
        labels = np.concatenate([labels, np.asarray(calibration_texts[1], labels.dtype)])
    with tempfile.TemporaryDirectory() as staging:
        folder = Path(staging) / "ensemble"
        names, columns, answers = _members_answers(member_runs, texts, classes, folder)
        if lexicon != "none":
            names.append(f"lexicon_{lexicon}")
            columns.append(answer_matrix(lexicon_probabilities(lexicon, texts), classes))
        stacked = np.stack(columns, axis=1)
        label_weights = weights_of_classes(class_weight, labels, len(classes))
        fitted = fit_weights(stacked[:rows["fitted"]], labels[:rows["fitted"]],
                             label_weights=label_weights)
        combined = combine(stacked, *fitted)
        metrics = _validation_metrics(names, stacked, combined, labels, rows, classes,
                                      label_weights)
        ensemble_settings = {"members": names[:len(members)], "run_ids": members,
                             "classes": classes, "answers": answers, "lexicon": lexicon,
                             "weights": fitted[0], "bias": fitted[1]}
        if calibration_texts:
            temperature, calibration_metrics = _fit_temperature(combined[:, 1], labels,
                                                                texts, rows)
            ensemble_settings["length_temperature"] = asdict(temperature)
            metrics.update(calibration_metrics)
        (folder / SETTINGS_FILE).write_text(json.dumps(ensemble_settings, ensure_ascii=False))
        params = {**params, "classes": json.dumps(classes, ensure_ascii=False)}
        return _log(experiment, member_runs, names, metrics, fitted, folder,
                    (fingerprint, params, settings), input_example)


def members_classes(member_runs, lexicon, calibration_texts):
    """The classes the members answer; refuses members of different texts or classes,
    and the lexicon or `calibration_texts` beside classes other than IMDB's."""
    found = {(run.data.params.get("texts"), tuple(classes_of_run(run))) for run in member_runs}
    if len(found) > 1:
        raise ConfigError("The runs were trained on different texts or classes: an ensemble "
                          "combines runs of the same --texts file (or all of IMDB).")
    (_, classes), = found
    if list(classes) != list(imdb.CLASSES) and (lexicon != "none" or calibration_texts):
        raise ConfigError("--lexicon and --calibrate-on read English sentiment: they suit "
                          "members whose classes are negative and positive, as IMDB's are.")
    return list(classes)


def _members_answers(member_runs, texts, classes, folder):
    """Each member's name, its `(texts, classes)` answers, and how the members answer
    (`reviews.PROBABILITY` where all answer P(class 1), as IMDB's do); their pyfunc
    models copied into `folder`."""
    names, columns, kinds = [], [], set()
    for index, run in enumerate(member_runs):
        # the run's id in the name: two members of one model kind stay apart
        names.append(f"member_{index}_{run.data.params.get('model')}_{run.info.run_id[:8]}")
        with models.verified_model(run) as local:
            answers = models.predict_in_chunks(mlflow.pyfunc.load_model(str(local)), texts,
                                               f"Scoring the validation texts with {names[-1]}")
            shutil.copytree(local, folder / names[-1])
        kinds.add("classes" if isinstance(answers[0], dict) else PROBABILITY)
        columns.append(answer_matrix(answers, classes))
    return names, columns, kinds.pop() if len(kinds) == 1 else "classes"


def members_packages(member_runs):
    """What the members need beyond the backend: gensim where one is a paragraph-vector
    classifier, or an ensemble that may hold one."""
    models = {run.data.params.get("model") for run in member_runs}
    return ("gensim",) if models & {"doc2vec", "ensemble"} else ()


def _validation_metrics(names, stacked, combined, labels, rows, classes, label_weights):
    """Each member's and the ensemble's accuracy on the validation texts (the first
    `rows["reviews"]`), the ensemble's macro-F1 there and that of a stacking fitted on
    other folds (`crossval_`: texts it did not see), and its accuracy on their slices
    (up to `rows["fitted"]`), if any."""
    texts, slices = slice(None, rows["reviews"]), slice(rows["reviews"], rows["fitted"])
    truth = labels[texts]
    metrics = {f"{name}_val_accuracy": class_metrics(truth, stacked[texts, i], classes)[
        "accuracy"] for i, name in enumerate(names)}
    seen = class_metrics(truth, combined[texts], classes)
    unseen = class_metrics(truth, crossval_predictions(stacked[texts], truth,
                                                       label_weights=label_weights), classes)
    metrics.update(best_val_accuracy=seen["accuracy"], best_val_macro_f1=seen["macro_f1"],
                   crossval_val_accuracy=unseen["accuracy"],
                   crossval_val_macro_f1=unseen["macro_f1"])
    if len(classes) == 2:
        metrics["best_val_roc_auc"] = binary_metrics(truth, combined[texts, 1])["roc_auc"]
    if rows["fitted"] > rows["reviews"]:
        metrics["best_val_slice_accuracy"] = class_metrics(
            labels[slices], combined[slices], classes)["accuracy"]
    return metrics


def _fit_temperature(combined, labels, texts, rows):
    """The `LengthTemperature` of P(class 1) fitted on the validation texts (the first
    `rows["reviews"]`) and the calibration texts (after `rows["fitted"]`), and how it
    changed the calibration error on the latter."""
    reviews, calibration_rows = slice(None, rows["reviews"]), slice(rows["fitted"], None)
    temperature = LengthTemperature.fit(
        (labels[reviews], combined[reviews], texts[reviews]),
        (labels[calibration_rows], combined[calibration_rows], texts[calibration_rows]))
    calibrated = temperature.apply(combined[calibration_rows], texts[calibration_rows])
    short_text, review = temperature.temperatures(["word " * 10, "word " * 230])
    print(f"Confidence by length: scores sharpened {short_text:.2f} times at 10 words, "
          f"{review:.2f} times at 230 (the median review)")
    return temperature, {
        "calibration_texts_ece_before": calibration(
            labels[calibration_rows], combined[calibration_rows])["expected_calibration_error"],
        "calibration_texts_ece_after": calibration(
            labels[calibration_rows], calibrated)["expected_calibration_error"],
        "temperature_at_10_words": float(short_text), "temperature_at_230_words": float(review)}


def _log(experiment, member_runs, names, metrics, fitted, folder, data, input_example):
    weights, bias = fitted
    fingerprint, params, settings = data
    members = [run.info.run_id for run in member_runs]
    shares = member_shares(names, weights)
    experiment_id = store.use_experiment(experiment).experiment_id
    with mlflow.start_run(run_name="ensemble", experiment_id=experiment_id) as run:
        mlflow.log_params({"model": "ensemble", "members": ",".join(members),
                           "lexicon": settings["ensemble_lexicon"],
                           "fit_on": settings["ensemble_fit_on"],
                           "calibrated_on": settings["ensemble_calibrated_on"],
                           "weights": json.dumps(shares),
                           "bias": json.dumps(np.round(bias, 4).tolist()), **params})
        mlflow.set_tags(tracking.run_tags(fingerprint, model_family="ensemble", **settings))
        tracking.log_metrics(metrics)
        lexicon = settings["ensemble_lexicon"]
        requirements = models.model_requirements(
            *members_packages(member_runs),
            *([LEXICON_PACKAGES[lexicon]] if lexicon != "none" else []))
        models.log_pyfunc_model(PYFUNC_FILE, {"ensemble": folder}, input_example,
                                requirements, packages=("sentiment", "causal_lm"))
        mlflow.set_tag("model_logged", "true")
    print(json.dumps({"run_id": run.info.run_id, "weights": shares, **metrics}, indent=2))
    return run.info.run_id


def member_shares(names, weights):
    """How much the stacking leans on each column (member or lexicon): its share of the
    weights' absolute sum (the weights themselves are in the model's `ensemble.json`)."""
    size = np.abs(np.asarray(weights)).reshape(len(names), -1).sum(axis=1)
    return {name: round(float(share), 4)
            for name, share in zip(names, size / max(size.sum(), 1e-12), strict=True)}
