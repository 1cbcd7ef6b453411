"""Metrics of a binary classifier from labels and predicted probabilities."""

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


def class_f1_scores(labels, probabilities, threshold=0.5):
    """F1 of each class (negative, positive), their mean (macro) and the micro F1,
    which for one label per text equals the accuracy."""
    labels = np.asarray(labels).astype(bool)
    predicted = np.asarray(probabilities) >= threshold
    scores = []
    for positive in (False, True):
        truth, guess = labels == positive, predicted == positive
        hits = np.sum(truth & guess)
        scores.append(float(2 * hits / (truth.sum() + guess.sum())) if truth.sum() + guess.sum()
                      else 0.0)
    return {"f1_negative": scores[0], "f1_positive": scores[1],
            "macro_f1": float(np.mean(scores)), "micro_f1": float(np.mean(predicted == labels))}


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


def confidently_wrong(texts, labels, probabilities, count):
    """The `count` texts the model got wrong with the most confidence."""
    error = np.abs(np.asarray(probabilities) - np.asarray(labels))
    worst = [i for i in np.argsort(-error)[:count] if error[i] > 0.5]
    return {"label": [int(labels[i]) for i in worst],
            "probability_positive": [round(float(probabilities[i]), 4) for i in worst],
            "review": [texts[i][:1000] for i in worst]}
