"""Scoring a sentiment model on labelled texts, and logging what it scored back to its
run: metrics, calibration before and after the model's own, figures and the texts it
got most confidently wrong (the IMDB lesson's `evaluate` step)."""

import hashlib
import json
import math
import tempfile
import time

import mlflow
import numpy as np
from mlflow.exceptions import MlflowException

from workflows.core import figures, models, runs
from workflows.sentiment import metrics as classification

ANSWERS = "_probabilities.npz"  # `<name>_probabilities.npz`: the answers to those texts


def score_and_log(run, model, scored, classes, top_wrong=20):
    """The metrics of `model` (the pyfunc of `run`) on `scored` = (texts, labels, name,
    source), logged to `run` under names that start with `name_`, with its answers
    (`<name>_probabilities.npz`, which an ensemble of it reuses); `classes`: the label
    of each class index. Any number of classes: accuracy, each class's precision, recall
    and F1, their macro, micro and weighted F1, the calibration of the most probable
    class (of two: of P(class 1), with ROC AUC) before and after the model's own."""
    texts, labels, name, _ = scored
    started = time.perf_counter()
    probabilities, seconds = ensemble_probabilities(model, texts, name), None
    if probabilities is None:  # (an ensemble of members' answers has no speed of its own)
        answers = models.predict_in_chunks(model, texts, f"Scoring {len(texts)} texts")
        probabilities = classification.answer_matrix(answers, classes)
        seconds = time.perf_counter() - started
    metrics = classification.class_metrics(labels, probabilities, classes)
    two = len(classes) == 2
    if two:
        metrics.update(classification.binary_metrics(labels, probabilities[:, 1]))
    curve = _calibration(labels, probabilities)
    metrics["expected_calibration_error"] = curve["expected_calibration_error"]
    curves = {f"{name}_calibration.json": curve}
    diagrams = {f"{name}_calibration.png": figures.reliability_diagram(
        curve, name, classes[1] if two else "top class")}
    fitted = getattr(model.unwrap_python_model(), "calibration", None)
    if fitted is not None:  # before the model's own calibration (Platt, a temperature)
        undone = fitted.undo(probabilities[:, 1], texts) if two else fitted.undo(probabilities)
        before = _calibration(labels, np.column_stack([1 - undone, undone]) if two else undone)
        metrics["uncalibrated_expected_calibration_error"] = before["expected_calibration_error"]
        curves[f"{name}_calibration_before.json"] = before
        diagrams[f"{name}_calibration_before.png"] = figures.reliability_diagram(
            before, f"{name}, before calibration", classes[1] if two else "top class")
    if math.isnan(metrics.get("roc_auc", 0.0)):  # needs texts of both classes to rank
        print(f"ROC AUC not logged: every text of {name} has the same label.")
        del metrics["roc_auc"]
    _log(run, scored, metrics, seconds, curves, diagrams, classification.confidently_wrong(
        texts, labels, probabilities, classes, top_wrong), classes, probabilities)
    return metrics


def ensemble_probabilities(model, texts, name):
    """An ensemble's `(texts, classes)` probabilities of `texts` combined from its
    members' own logged answers to these very texts (`<name>_probabilities.npz`: each
    member scored once, not again inside the ensemble), or None where `model` is no
    ensemble or a member has no such answers."""
    ensemble = model.unwrap_python_model()
    if not hasattr(ensemble, "run_ids"):
        return None
    digest, columns = texts_digest(texts), []
    for run_id in ensemble.run_ids:
        with tempfile.TemporaryDirectory() as folder:
            try:
                path = mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=f"{name}{ANSWERS}", dst_path=folder)
            except (MlflowException, OSError):  # not evaluated on these texts
                return None
            with np.load(path, allow_pickle=False) as logged:
                if str(logged["texts_sha256"]) != digest:
                    return None
                columns.append(logged["probabilities"])
    print(f"Combining the {len(columns)} members' own answers to these {len(texts)} texts")
    return ensemble.probabilities(texts, columns)


def texts_digest(texts):
    """A SHA-256 of `texts` that tells any two lists apart (any characters, any order)."""
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()


def _calibration(labels, probabilities):
    """The reliability of P(class 1) for two classes, of the top class for more."""
    if probabilities.shape[1] == 2:
        return classification.calibration(labels, probabilities[:, 1])
    return classification.top_label_calibration(labels, probabilities)


def _log(run, scored, metrics, seconds, curves, diagrams, wrong, classes, probabilities):
    """Logs `metrics` (each as `<name>_<metric>`), the curves, figures and table."""
    texts, _, name, source = scored
    results = {f"{name}_{key}": value for key, value in metrics.items()
               if key != "confusion_matrix"}
    if seconds:
        results[f"{name}_reviews_per_second"] = len(texts) / seconds
    runs.log_evaluation(
        run.info.run_id, results,
        dicts={f"{name}_metrics.json": {**metrics, **source}, **curves},
        figures={f"{name}_confusion_matrix.png": figures.confusion_matrix(
                     metrics["confusion_matrix"], classes), **diagrams},
        tables={f"{name}_confidently_wrong.json": wrong},
        arrays={f"{name}{ANSWERS}": {"probabilities": probabilities,
                                     "texts_sha256": np.array(texts_digest(texts))}})
    print(json.dumps({"run_id": run.info.run_id, "texts": name, **metrics}, indent=2,
                     ensure_ascii=False))
    if seconds:
        print(f"Scored {len(texts)} texts in {seconds:.1f} s")
