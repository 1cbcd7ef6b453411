"""An ensemble of sentiment models: their probabilities combined by weights fitted on
validation reviews (stacking with logistic regression over each model's log-odds).

`fit_weights` sees only the probabilities and labels it is given; the lesson gives it
the validation split, never the test split.
"""

import numpy as np

from .calibration import fit_logistic, logit, sigmoid


def combine(probabilities, weights, bias):
    """P(positive) from `probabilities` `(texts, models)`: sigmoid(log-odds @ w + b)."""
    return sigmoid(logit(probabilities) @ np.asarray(weights) + bias)


def fit_weights(probabilities, labels, l2=1e-3):
    """(weights, bias) minimizing the mean log loss of `combine` on these labels, with a
    small L2 penalty on the weights (starting from their mean)."""
    count = np.shape(probabilities)[1]
    weights, bias = fit_logistic(logit(probabilities), labels, l2, np.full(count, 1 / count))
    return weights.tolist(), bias


# ## Several classes: a multinomial stacking of the members' class probabilities


def combine_classes(probabilities, weights, bias):
    """Class probabilities from `probabilities` `(texts, members, classes)`:
    softmax(members' log-probabilities, flattened, @ W + b), W `(members x classes,
    classes)`."""
    from .calibration import EPSILON, softmax

    logs = np.log(np.clip(probabilities, EPSILON, 1)).reshape(len(probabilities), -1)
    return softmax(logs @ np.asarray(weights) + np.asarray(bias))


def fit_class_weights(probabilities, labels, l2=1e-3, label_weights=None):
    """(W, b) minimizing the mean log loss of `combine_classes` on these labels (each
    text's loss weighed by its class's entry of `label_weights`, if given), with a small
    L2 penalty on W; it starts from the mean of the members' log-probabilities."""
    from scipy.optimize import minimize

    from .calibration import EPSILON, softmax

    texts, members, classes = np.shape(probabilities)
    logs = np.log(np.clip(probabilities, EPSILON, 1)).reshape(texts, -1)
    labels = np.asarray(labels)
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


def crossval_class_predictions(probabilities, labels, folds=5, seed=0, label_weights=None):
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
        weights, bias = fit_class_weights(probabilities[~held], labels[~held],
                                          label_weights=label_weights)
        predicted[held] = combine_classes(probabilities[held], weights, bias)
    return predicted
