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
