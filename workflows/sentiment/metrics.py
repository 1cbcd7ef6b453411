"""Metrics of a classifier from labels and predicted probabilities: of two classes
(P(class 1) per text) and of any number (a row of class probabilities per text)."""

import re

import numpy as np
from scipy.stats import rankdata


def binary_metrics(labels, probabilities, threshold=0.5):
    """Accuracy, ROC AUC, precision, recall, F1 and the confusion matrix [[TN, FP], [FN, TP]]."""
    labels = np.asarray(labels).astype(bool)
    predicted = np.asarray(probabilities) >= threshold
    tp, fp = int(np.sum(predicted & labels)), int(np.sum(predicted & ~labels))
    fn, tn = int(np.sum(~predicted & labels)), int(np.sum(~predicted & ~labels))
    positives, negatives = labels.sum(), (~labels).sum()
    ranks = rankdata(probabilities)  # Mann-Whitney U: AUC = P(score(pos) > score(neg))
    auc = (ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives) \
        if positives and negatives else float("nan")
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"accuracy": (tp + tn) / len(labels), "roc_auc": float(auc), "precision": precision,
            "recall": recall, "f1": f1, "confusion_matrix": [[tn, fp], [fn, tp]]}


def calibration(labels, probabilities, bins=10):
    """Reliability of the probabilities: per equal-width bin, the mean predicted
    probability, the fraction of positives and the count; and the expected calibration
    error (ECE), the count-weighted mean gap between the two."""
    labels, probabilities = np.asarray(labels, float), np.asarray(probabilities, float)
    which = np.minimum((probabilities * bins).astype(int), bins - 1)
    rows = [(float(probabilities[which == b].mean()), float(labels[which == b].mean()),
             int(np.sum(which == b))) for b in range(bins) if np.any(which == b)]
    predicted, observed, counts = (list(column) for column in zip(*rows, strict=True))
    gaps = np.abs(np.array(predicted) - np.array(observed))
    return {"mean_predicted": predicted, "fraction_positive": observed, "count": counts,
            "expected_calibration_error": float(np.sum(gaps * counts) / len(labels))}


def class_metrics(labels, probabilities, classes):
    """Accuracy, each class's precision, recall and F1 (`f1_<class>`), their macro,
    micro and weighted (by support) F1, and the `(classes, classes)` confusion matrix
    (rows: true class); `probabilities`: P(class 1) of two classes, or rows of all."""
    labels, predicted = np.asarray(labels), predicted_classes(probabilities)
    confusion = np.zeros((len(classes), len(classes)), "int64")
    np.add.at(confusion, (labels, predicted), 1)
    hits, support, guessed = np.diag(confusion), confusion.sum(axis=1), confusion.sum(axis=0)
    precision = np.divide(hits, guessed, out=np.zeros(len(classes)), where=guessed > 0)
    recall = np.divide(hits, support, out=np.zeros(len(classes)), where=support > 0)
    both = precision + recall
    f1 = np.divide(2 * precision * recall, both, out=np.zeros(len(classes)), where=both > 0)
    metrics = {"accuracy": float(hits.sum() / len(labels))}
    for i, name in enumerate(classes):
        key = metric_name(name)
        metrics.update({f"precision_{key}": float(precision[i]),
                        f"recall_{key}": float(recall[i]), f"f1_{key}": float(f1[i])})
    present = support > 0  # a class absent from these texts has no recall to average
    metrics.update({"macro_f1": float(f1[present].mean()), "micro_f1": metrics["accuracy"],
                    "weighted_f1": float(np.sum(f1 * support) / support.sum()),
                    "confusion_matrix": confusion.tolist()})
    return metrics


def predicted_classes(probabilities):
    """The class of each text: P(class 1) >= 0.5 of two, else the most probable."""
    probabilities = np.asarray(probabilities)
    if probabilities.ndim == 1:
        return (probabilities >= 0.5).astype("int64")
    return np.argmax(probabilities, axis=1)


def metric_name(label):
    """`label` as MLflow accepts it in a metric name (other characters become `_`)."""
    return re.sub(r"[^\w.\- /]", "_", str(label)) or "_"


def top_label_calibration(labels, probabilities, bins=10):
    """`calibration` of the most probable class: its probability against how often it
    is the true one (the top-label reliability of several classes)."""
    probabilities = np.asarray(probabilities)
    correct = np.argmax(probabilities, axis=1) == np.asarray(labels)
    return calibration(correct, probabilities.max(axis=1), bins)


def confidently_wrong(texts, labels, probabilities, classes, count):
    """Per true class, the `count` texts the model got wrong with the most confidence,
    each with the class it chose and that class's probability."""
    probabilities, labels = np.asarray(probabilities), np.asarray(labels)
    chosen = np.argmax(probabilities, axis=1)
    confidence = probabilities.max(axis=1)
    table = {"label": [], "predicted": [], "probability": [], "text": []}
    for index, name in enumerate(classes):
        wrong = np.flatnonzero((labels == index) & (chosen != index))
        for i in wrong[np.argsort(-confidence[wrong], kind="stable")][:count]:
            table["label"].append(name)
            table["predicted"].append(classes[chosen[i]])
            table["probability"].append(round(float(confidence[i]), 4))
            table["text"].append(texts[i][:1000])
    return table


def answer_matrix(answers, classes):
    """`(texts, classes)` probabilities of a classifier pyfunc's answers: P(class 1) of
    each text (IMDB's model), or dicts with their `probabilities` by class name."""
    if len(answers) and not isinstance(answers[0], dict):
        positive = np.asarray(answers, "float64")
        return np.column_stack([1 - positive, positive])
    return class_matrix(answers, classes)


def class_matrix(answers, classes):
    """`(texts, classes)` probabilities of a classes pyfunc's answers (dicts with their
    `probabilities` by class name)."""
    return np.array([[answer["probabilities"][label] for label in classes]
                     for answer in answers], "float64").reshape(len(answers), len(classes))
