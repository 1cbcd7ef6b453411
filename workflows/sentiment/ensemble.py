"""An ensemble of sentiment models: their probabilities combined by weights fitted on
validation reviews (stacking with logistic regression over each model's log-odds).

`fit_weights` sees only the probabilities and labels it is given; the lesson gives it
the validation split, never the test split.
"""

import numpy as np

from .calibration import EPSILON, logit, sigmoid

# what the weights are fitted on: the validation reviews, or them and a slice of one or
# two sentences of each (labelled as its review: weights and confidence for short text)
FIT_ON = ("reviews", "reviews+slices")


def combine(probabilities, weights, bias):
    """P(positive) from `probabilities` `(texts, models)`: sigmoid(log-odds @ w + b)."""
    return sigmoid(logit(probabilities) @ np.asarray(weights) + bias)


def fit_weights(probabilities, labels, l2=1e-3):
    """(weights, bias) minimizing the mean log loss of `combine` on these labels, with a
    small L2 penalty on the weights."""
    from scipy.optimize import minimize

    features, labels = logit(probabilities), np.asarray(labels, "float64")

    def loss_and_gradient(parameters):
        weights, bias = parameters[:-1], parameters[-1]
        predicted = sigmoid(features @ weights + bias)
        predicted = np.clip(predicted, EPSILON, 1 - EPSILON)
        loss = -np.mean(labels * np.log(predicted) + (1 - labels) * np.log1p(-predicted))
        error = (predicted - labels) / len(labels)
        gradient = np.append(features.T @ error + 2 * l2 * weights, error.sum())
        return loss + l2 * weights @ weights, gradient

    start = np.append(np.full(features.shape[1], 1 / features.shape[1]), 0.0)
    result = minimize(loss_and_gradient, start, jac=True, method="L-BFGS-B")
    return result.x[:-1].tolist(), float(result.x[-1])
