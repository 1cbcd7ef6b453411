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


def confidently_wrong(texts, labels, probabilities, count):
    """The `count` texts the model got wrong with the most confidence."""
    error = np.abs(np.asarray(probabilities) - np.asarray(labels))
    worst = [i for i in np.argsort(-error)[:count] if error[i] > 0.5]
    return {"label": [int(labels[i]) for i in worst],
            "probability_positive": [round(float(probabilities[i]), 4) for i in worst],
            "review": [texts[i][:1000] for i in worst]}
