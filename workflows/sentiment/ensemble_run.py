"""The IMDB lesson's `ensemble` step: member runs (and a sentiment lexicon, if asked)
scored on validation reviews, stacking weights fitted there, and the result logged as a
run of its own whose pyfunc carries every member's model.

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

from data_prep import cache
from data_prep.labelled_texts import read_labelled_texts
from data_prep.text import sentence_slices
from workflows.core import models, runs, store, tracking
from workflows.core.config import ConfigError
from workflows.sentiment.calibration import LengthTemperature
from workflows.sentiment.ensemble import combine, fit_weights
from workflows.sentiment.lexicon import LEXICON_PACKAGES, lexicon_probabilities
from workflows.sentiment.metrics import binary_metrics, calibration

PYFUNC_FILE = Path(__file__).with_name("ensemble_pyfunc.py")  # any members' classes
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
    so, and its confidence by length fitted on `calibration_texts` = (texts, labels,
    a name that changes with their content), if given; members of a user's classes may
    weigh the validation texts by `class_weight` (`family.CLASS_WEIGHTS`) in the fit. An
    ensemble of the same members and settings is reused."""
    member_runs = [runs.find_run(experiment, run_id) for run_id in run_ids or ()]
    members = sorted({run.info.run_id for run in member_runs})
    if len(members) + (lexicon != "none") + (calibration_texts is not None) < 2:
        raise ConfigError("An ensemble needs the models of at least two different runs (or "
                          "one and --lexicon vader, or one and --calibrate-on): give "
                          "--run-id twice or more (ids from the compare step).")
    for run in member_runs:
        runs.check_has_model(run)
    classes = members_classes(member_runs, lexicon, fit_on, calibration_texts, class_weight)
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
    reviews = len(texts)
    if fit_on == "reviews+slices":
        texts, labels = texts + sentence_slices(texts), np.concatenate([labels, labels])
    fitted_rows = len(texts)
    if calibration_texts:  # scored with the rest, kept out of the weights' fit
        texts = texts + list(calibration_texts[0])
        labels = np.concatenate([labels, np.asarray(calibration_texts[1], labels.dtype)])
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
        if classes:
            return _class_ensemble(experiment, member_runs, names, columns, labels, classes,
                                   folder, (fingerprint, params, settings), texts[:1],
                                   class_weight)
        if lexicon != "none":
            names.append(f"lexicon_{lexicon}")
            columns.append(lexicon_probabilities(lexicon, texts))
        probabilities = np.stack(columns, axis=1)
        weights, bias = fit_weights(probabilities[:fitted_rows], labels[:fitted_rows])
        ensemble_settings = {"members": names[:len(members)], "run_ids": members,
                             "lexicon": lexicon, "weights": weights, "bias": bias}
        metrics = _validation_metrics(names, probabilities[:fitted_rows],
                                      labels[:fitted_rows], (weights, bias), reviews)
        if calibration_texts:
            temperature, calibration_metrics = _fit_temperature(
                combine(probabilities, weights, bias), labels, texts, reviews, fitted_rows)
            ensemble_settings["length_temperature"] = asdict(temperature)
            metrics.update(calibration_metrics)
        (folder / "ensemble.json").write_text(json.dumps(ensemble_settings))
        return _log(experiment, member_runs, names, metrics, (weights, bias), folder,
                    (fingerprint, params, settings), input_example)


def members_classes(member_runs, lexicon, fit_on, calibration_texts, class_weight="none"):
    """The classes of members trained on a user's texts (None: IMDB's members); refuses
    members of different texts or classes, IMDB's options with them, or a class weight
    with IMDB's."""
    found = {(run.data.params.get("texts"), run.data.params.get("classes")) if
             "texts" in run.data.params else (None, None) for run in member_runs}
    if len(found) > 1:
        raise ConfigError("The runs were trained on different texts or classes: an ensemble "
                          "combines runs of the same --texts file (or all of IMDB).")
    (_, classes), = found
    if classes and (lexicon != "none" or fit_on != "reviews" or calibration_texts):
        raise ConfigError("--lexicon, --fit-on and --calibrate-on read English sentiment; "
                          "an ensemble of your own classes takes none of them.")
    if not classes and class_weight != "none":
        raise ConfigError("--class-weight weighs a user's classes (members trained with "
                          "--texts); IMDB's two classes are balanced already.")
    return json.loads(classes) if classes else None


def _class_ensemble(experiment, member_runs, names, answers, labels, classes, folder, data,
                    input_example, class_weight="none"):
    """The ensemble of members of a user's classes: a multinomial stacking of their
    class probabilities fitted on the validation texts (weighed by `class_weight`),
    logged with its own pyfunc."""
    from workflows.sentiment.ensemble import (
        combine_classes,
        crossval_class_predictions,
        fit_class_weights,
    )
    from workflows.sentiment.family import weights_of_classes
    from workflows.sentiment.metrics import class_matrix, class_metrics

    stacked = np.stack([class_matrix(column, classes) for column in answers], axis=1)
    weights, bias = fit_class_weights(
        stacked, labels, label_weights=weights_of_classes(class_weight, labels, len(classes)))
    (folder / "ensemble.json").write_text(json.dumps(
        {"members": names, "run_ids": [run.info.run_id for run in member_runs],
         "classes": classes, "weights": weights, "bias": bias}, ensure_ascii=False))
    metrics = {f"{name}_val_accuracy": class_metrics(labels, stacked[:, i], classes)["accuracy"]
               for i, name in enumerate(names)}
    combined = class_metrics(labels, combine_classes(stacked, weights, bias), classes)
    unseen = class_metrics(labels, crossval_class_predictions(
        stacked, labels, label_weights=weights_of_classes(class_weight, labels, len(classes))),
        classes)
    metrics.update(best_val_accuracy=combined["accuracy"],
                   best_val_macro_f1=combined["macro_f1"],
                   crossval_val_accuracy=unseen["accuracy"],
                   crossval_val_macro_f1=unseen["macro_f1"])
    fingerprint, params, settings = data
    params = {**params, "classes": json.dumps(classes, ensure_ascii=False)}
    return _log(experiment, member_runs, names, metrics, (np.ravel(weights).tolist(), bias),
                folder, (fingerprint, params, settings), input_example)


def members_packages(member_runs):
    """What the members need beyond the backend: gensim where one is a paragraph-vector
    classifier, or an ensemble that may hold one."""
    models = {run.data.params.get("model") for run in member_runs}
    return ("gensim",) if models & {"doc2vec", "ensemble"} else ()


def _validation_metrics(names, probabilities, labels, fitted, reviews):
    """Each column's and the ensemble's accuracy on the validation reviews (the first
    `reviews` rows), and the ensemble's on their slices (the rest), if any."""
    combined = combine(probabilities, *fitted)
    metrics = {f"{name}_val_accuracy": binary_metrics(labels[:reviews], column)["accuracy"]
               for name, column in zip(names, probabilities[:reviews].T, strict=True)}
    on_reviews = binary_metrics(labels[:reviews], combined[:reviews])
    metrics.update(best_val_accuracy=on_reviews["accuracy"],
                   best_val_roc_auc=on_reviews["roc_auc"])
    if len(labels) > reviews:
        metrics["best_val_slice_accuracy"] = binary_metrics(labels[reviews:],
                                                            combined[reviews:])["accuracy"]
    return metrics


def _fit_temperature(combined, labels, texts, reviews, fitted_rows):
    """The `LengthTemperature` fitted on the validation reviews (the first `reviews`
    rows) and the calibration texts (from `fitted_rows` on), and how it changed the
    calibration error on those texts."""
    calibration_rows = slice(fitted_rows, None)
    temperature = LengthTemperature.fit(
        (labels[:reviews], combined[:reviews], texts[:reviews]),
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
    experiment_id = store.use_experiment(experiment).experiment_id
    with mlflow.start_run(run_name="ensemble", experiment_id=experiment_id) as run:
        mlflow.log_params({"model": "ensemble", "members": ",".join(members),
                           "lexicon": settings["ensemble_lexicon"],
                           "fit_on": settings["ensemble_fit_on"],
                           "calibrated_on": settings["ensemble_calibrated_on"],
                           "weights": json.dumps([round(w, 4) for w in weights]),
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
    shown = dict(zip(names, weights, strict=True)) if len(weights) == len(names) else weights
    print(json.dumps({"run_id": run.info.run_id, "weights": shown,
                      "bias": bias, **metrics}, indent=2))
    return run.info.run_id
