"""Platt scaling: a classifier's probabilities made to mean what they say.

A model trained on whole IMDB reviews is over- or under-confident elsewhere; fitting
`sigmoid(slope * logit(p) + intercept)` on the validation reviews (never test) turns
its scores into probabilities that match how often it is right, without changing
their order (so accuracy at 0.5 may move, ROC AUC cannot). Saved as
`calibration.json` beside a classifier; plain NumPy, so it ships with every pyfunc.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

FILE = "calibration.json"
EPSILON = 1e-7  # probabilities clipped to [EPSILON, 1 - EPSILON] before their logit


@dataclass(frozen=True)
class Calibration:
    slope: float = 1.0
    intercept: float = 0.0

    def apply(self, probabilities):
        """Calibrated probabilities of raw ones."""
        return sigmoid(self.slope * logit(probabilities) + self.intercept)

    def undo(self, calibrated, texts=None):
        """The raw probabilities that `apply` turned into `calibrated` (the same scaling
        at every length: `texts` is not needed)."""
        return sigmoid((logit(calibrated) - self.intercept) / self.slope)

    @classmethod
    def fit(cls, labels, probabilities):
        """The slope and intercept of least log loss on (`labels`, `probabilities`): a
        logistic regression on the logit (`fit_logistic`)."""
        (slope,), intercept = fit_logistic(logit(probabilities)[:, None], labels)
        if not slope > 0:  # a scorer no better than chance: keep the scores' order anyway
            return cls()
        return cls(float(slope), float(intercept))

    def save(self, folder):
        (Path(folder) / FILE).write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, folder):
        """The calibration saved in `folder`."""
        return cls(**json.loads((Path(folder) / FILE).read_text()))


@dataclass(frozen=True)
class Temperature:
    """Temperature scaling of several classes (Guo et al., 2017): each row of class
    probabilities `p` becomes `softmax(log p / T)`, with the `T` of least log loss on
    the validation texts; the top class never changes. Saved in `calibration.json` too."""

    temperature: float = 1.0

    def apply(self, probabilities):
        return softmax(np.log(np.clip(probabilities, EPSILON, 1)) / self.temperature)

    def undo(self, calibrated, texts=None):
        return softmax(np.log(np.clip(calibrated, EPSILON, 1)) * self.temperature)

    @classmethod
    def fit(cls, labels, probabilities):
        """The temperature (between 0.05 and 20) of least mean log loss."""
        from scipy.optimize import minimize_scalar

        logs, labels = np.log(np.clip(probabilities, EPSILON, 1)), np.asarray(labels)

        def loss(log_temperature):
            scaled = logs / np.exp(log_temperature)
            return np.mean(np.logaddexp.reduce(scaled, axis=1)
                           - scaled[np.arange(len(labels)), labels])

        fitted = minimize_scalar(loss, bounds=(np.log(0.05), np.log(20)), method="bounded")
        return cls(float(np.exp(fitted.x)))

    def save(self, folder):
        (Path(folder) / FILE).write_text(json.dumps(asdict(self)))


def load_calibration(folder):
    """The calibration saved in `folder`: Platt scaling (two classes) or a temperature."""
    saved = json.loads((Path(folder) / FILE).read_text())
    return Temperature(**saved) if "temperature" in saved else Calibration(**saved)


def fit_calibration(labels, probabilities):
    """Platt scaling of P(class 1) of two classes, or the temperature of rows of several."""
    probabilities = np.asarray(probabilities)
    return (Calibration if probabilities.ndim == 1 else Temperature).fit(labels, probabilities)


def softmax(logits):
    """Each row's softmax, computed without overflow."""
    logits = np.asarray(logits, "float64")
    return np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))


@dataclass(frozen=True)
class LengthTemperature:
    """Confidence that depends on a text's length: `p -> sigmoid(T(n) logit(p))`, with
    `log T(n) = log_temperature + per_log_length * log(n / 100)` for a text of `n` words.

    Fitted on the validation reviews and on labelled texts of the domain a model will
    serve (short product reviews, say), it sharpens or softens the scores of texts of
    those lengths where a calibration fitted on 230-word reviews cannot know how sure to
    be, and keeps the reviews' scores as they were. A temperature never moves a score
    across 0.5: every decision is kept.
    """
    log_temperature: float = 0.0
    per_log_length: float = 0.0
    LIMIT = 3.0  # |log T| at most: scores sharpened or softened 20 times at most

    def temperatures(self, texts):
        lengths = np.log(np.maximum([len(text.split()) for text in texts], 1) / 100)
        return np.exp(np.clip(self.log_temperature + self.per_log_length * lengths,
                              -self.LIMIT, self.LIMIT))

    def apply(self, probabilities, texts):
        return sigmoid(self.temperatures(texts) * logit(probabilities))

    def undo(self, calibrated, texts):
        return sigmoid(logit(calibrated) / self.temperatures(texts))

    @classmethod
    def fit(cls, *groups):
        """The temperature of least log loss on `groups` of (labels, probabilities,
        texts), each group's mean counting equally (5,000 reviews do not drown 150 short
        texts); minimized as `fit_logistic` minimizes."""
        from scipy.optimize import minimize

        def loss(parameters):
            fitted = cls(*parameters)
            total = 0.0
            for labels, probabilities, texts in groups:
                x = fitted.temperatures(texts) * logit(probabilities)
                total += np.mean(np.logaddexp(0, x) - np.asarray(labels, "float64") * x)
            return total

        return cls(*(float(value) for value in
                     minimize(loss, np.zeros(2), method="L-BFGS-B").x))


def fit_logistic(features, labels, l2=0.0, start=None):
    """`(weights, bias)` of the logistic regression of `labels` on `features` `(rows,
    columns)`: least mean log loss plus `l2` times the squared weights, by L-BFGS (the
    one fit behind Platt scaling and the ensembles' stacking weights)."""
    from scipy.optimize import minimize

    features, labels = np.asarray(features, "float64"), np.asarray(labels, "float64")

    def loss_and_gradient(parameters):
        weights, bias = parameters[:-1], parameters[-1]
        z = features @ weights + bias
        loss = np.mean(np.logaddexp(0, z) - labels * z) + l2 * weights @ weights
        error = (sigmoid(z) - labels) / len(labels)
        return loss, np.append(features.T @ error + 2 * l2 * weights, error.sum())

    start = np.append(np.ones(features.shape[1]) if start is None else start, 0.0)
    fitted = minimize(loss_and_gradient, start, jac=True, method="L-BFGS-B",
                      options={"gtol": 1e-9}).x
    return fitted[:-1], float(fitted[-1])


def logit(probabilities):
    """log(p / (1 - p)) of probabilities clipped away from 0 and 1."""
    p = np.clip(np.asarray(probabilities, "float64"), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed without overflow."""
    return np.exp(-np.logaddexp(0, -np.asarray(x, "float64")))
