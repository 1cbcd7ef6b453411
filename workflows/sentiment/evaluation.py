"""Scoring a sentiment model on labelled texts, and logging what it scored back to its
run: metrics, calibration before and after the model's own, figures and the texts it
got most confidently wrong (the IMDB lesson's `evaluate` step)."""

import json
import math
import time

from workflows.core import figures, models, runs
from workflows.sentiment import metrics as classification


def score_and_log(run, model, scored, top_wrong=20, classes=None):
    """The metrics of `model` (the pyfunc of `run`) on `scored` = (texts, labels, name,
    source), logged to `run` under names that start with `name_`. `classes`: the label
    of each class index, for a model that answers with a label and class probabilities
    (None: P(positive) of each review)."""
    texts, labels, name, source = scored
    started = time.perf_counter()
    answers = models.predict_in_chunks(model, texts, f"Scoring {len(texts)} texts")
    seconds = time.perf_counter() - started
    if classes is not None and len(classes) > 2:
        return _log_classes(run, model, scored, classification.class_matrix(answers, classes),
                            classes, seconds, top_wrong)
    probabilities = answers if classes is None else \
        classification.class_matrix(answers, classes)[:, 1]
    metrics = {**classification.binary_metrics(labels, probabilities),
               **classification.class_metrics(labels, probabilities,
                                              classes or classification_classes()),
               **classification.class_f1_scores(labels, probabilities)}
    curve = classification.calibration(labels, probabilities)
    metrics["expected_calibration_error"] = curve["expected_calibration_error"]
    curves, diagrams = {f"{name}_calibration.json": curve}, {}
    fitted = getattr(model.unwrap_python_model(), "calibration", None)
    if fitted is not None:  # before the model's own calibration (Platt, or by length)
        before = classification.calibration(labels, fitted.undo(probabilities, texts))
        metrics["uncalibrated_expected_calibration_error"] = before["expected_calibration_error"]
        curves[f"{name}_calibration_before.json"] = before
        diagrams[f"{name}_calibration_before.png"] = figures.reliability_diagram(
            before, f"{name}, before calibration")
    if math.isnan(metrics["roc_auc"]):  # needs texts of both classes to rank
        print(f"ROC AUC not logged: every text of {name} has the same label.")
        del metrics["roc_auc"]
    _log(run, scored, metrics, seconds, curves, {
        f"{name}_calibration.png": figures.reliability_diagram(curve, name), **diagrams},
        classification.confidently_wrong(texts, labels, probabilities, top_wrong),
        classes or classification_classes())
    return metrics


def classification_classes():
    """The classes of a model that answers P(positive): IMDB's."""
    from data_prep.imdb import CLASSES

    return list(CLASSES)


def _log_classes(run, model, scored, probabilities, classes, seconds, top_wrong):
    """`score_and_log` of more than two classes: class metrics, top-label calibration
    before and after the model's temperature, the confidently wrong texts per class."""
    texts, labels, name, _ = scored
    metrics = classification.class_metrics(labels, probabilities, classes)
    curve = classification.top_label_calibration(labels, probabilities)
    metrics["expected_calibration_error"] = curve["expected_calibration_error"]
    curves = {f"{name}_calibration.json": curve}
    diagrams = {f"{name}_calibration.png": figures.reliability_diagram(curve, name, "top class")}
    fitted = getattr(model.unwrap_python_model(), "calibration", None)  # (an ensemble: none)
    if fitted is not None:
        before = classification.top_label_calibration(labels, fitted.undo(probabilities))
        metrics["uncalibrated_expected_calibration_error"] = before["expected_calibration_error"]
        curves[f"{name}_calibration_before.json"] = before
        diagrams[f"{name}_calibration_before.png"] = figures.reliability_diagram(
            before, f"{name}, before calibration", "top class")
    _log(run, scored, metrics, seconds, curves, diagrams,
         classification.confidently_wrong_per_class(texts, labels, probabilities, classes,
                                                    top_wrong),
         classes)
    return metrics


def _log(run, scored, metrics, seconds, curves, diagrams, wrong, classes):
    """Logs `metrics` (each as `<name>_<metric>`), the curves, figures and table."""
    texts, _, name, source = scored
    results = {f"{name}_{key}": value for key, value in metrics.items()
               if key != "confusion_matrix"}
    runs.log_evaluation(
        run.info.run_id, {**results, f"{name}_reviews_per_second": len(texts) / seconds},
        dicts={f"{name}_metrics.json": {**metrics, **source}, **curves},
        figures={f"{name}_confusion_matrix.png": figures.confusion_matrix(
                     metrics["confusion_matrix"], classes), **diagrams},
        tables={f"{name}_confidently_wrong.json": wrong})
    print(json.dumps({"run_id": run.info.run_id, "texts": name, **metrics}, indent=2,
                     ensure_ascii=False))
    print(f"Scored {len(texts)} texts in {seconds:.1f} s")
