"""An ensemble of text classifiers: their class probabilities combined by a multinomial
stacking (a softmax over the members' log-probabilities) fitted on validation texts.

Of two classes it is a logistic regression on each member's log-probabilities, of more
the same with a weight per (member, class) and class. `fit_weights` sees only the
probabilities and labels it is given; the lesson gives it the validation split, never
the test split.
"""

import numpy as np
from scipy.optimize import minimize

from .calibration import EPSILON, softmax


def combine(probabilities, weights, bias):
    """Class probabilities from `probabilities` `(texts, members, classes)`:
    softmax(members' log-probabilities, flattened, @ W + b), W `(members x classes,
    classes)`."""
    return softmax(_log_features(probabilities) @ np.asarray(weights) + np.asarray(bias))


def fit_weights(probabilities, labels, l2=1e-3, label_weights=None):
    """(W, b) minimizing the mean log loss of `combine` on these labels (each text's loss
    weighed by its class's entry of `label_weights`, if given), with a small L2 penalty
    on W; it starts from the mean of the members' log-probabilities."""
    texts, members, classes = np.shape(probabilities)
    logs, labels = _log_features(probabilities), np.asarray(labels)
    truth = np.eye(classes)[labels]
    start = np.tile(np.eye(classes) / members, (members, 1))
    rows = np.ones(texts) if label_weights is None else np.asarray(label_weights)[labels]
    rows = rows / rows.mean()

    def loss_and_gradient(parameters):
        weights = parameters[:-classes].reshape(members * classes, classes)
        scores = logs @ weights + parameters[-classes:]
        loss = np.mean(rows * (np.logaddexp.reduce(scores, axis=1)
                               - np.sum(scores * truth, axis=1)))
        error = rows[:, None] * (softmax(scores) - truth) / texts
        gradient = np.concatenate([(logs.T @ error + 2 * l2 * weights).ravel(),
                                   error.sum(axis=0)])
        return loss + l2 * np.sum(weights ** 2), gradient

    fitted = minimize(loss_and_gradient, np.concatenate([start.ravel(), np.zeros(classes)]),
                      jac=True, method="L-BFGS-B", options={"gtol": 1e-9}).x
    return (fitted[:-classes].reshape(members * classes, classes).tolist(),
            fitted[-classes:].tolist())


def crossval_predictions(probabilities, labels, folds=5, seed=0, label_weights=None):
    """Each text's class probabilities from a stacking fitted on the other folds (`folds`
    seeded, stratified by class): how the stacking scores texts it was not fitted on, so
    an ensemble's validation score compares with its members' own."""
    labels = np.asarray(labels)
    rng = np.random.default_rng(seed)
    fold_of = np.zeros(len(labels), "int64")
    for label in np.unique(labels):
        rows = rng.permutation(np.flatnonzero(labels == label))
        fold_of[rows] = np.arange(len(rows)) % folds
    predicted = np.zeros(np.shape(probabilities)[::2])
    for fold in range(folds):
        held = fold_of == fold
        if held.all() or not held.any():
            continue
        weights, bias = fit_weights(probabilities[~held], labels[~held],
                                    label_weights=label_weights)
        predicted[held] = combine(probabilities[held], weights, bias)
    return predicted


def _log_features(probabilities):
    return np.log(np.clip(probabilities, EPSILON, 1)).reshape(len(probabilities), -1)
