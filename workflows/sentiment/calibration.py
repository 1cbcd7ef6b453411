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
    def fit(cls, labels, probabilities, steps=100):
        """The slope and intercept of least log-loss on (`labels`, `probabilities`):
        Newton's method with a backtracking line search (a convex problem in two
        parameters: a few steps)."""
        x, y = logit(probabilities), np.asarray(labels, "float64")

        def loss(slope, intercept):
            z = slope * x + intercept
            return np.sum(np.logaddexp(0, z) - y * z)

        slope, intercept = 1.0, 0.0
        for _ in range(steps):
            p = sigmoid(slope * x + intercept)
            gradient = np.array([np.sum((p - y) * x), np.sum(p - y)])
            weight = p * (1 - p)
            hessian = np.array([[np.sum(weight * x * x), np.sum(weight * x)],
                                [np.sum(weight * x), np.sum(weight)]]) + 1e-9 * np.eye(2)
            step, size, current = np.linalg.solve(hessian, gradient), 1.0, loss(slope, intercept)
            while loss(slope - size * step[0], intercept - size * step[1]) > current \
                    and size > 1e-6:
                size /= 2
            slope, intercept = slope - size * step[0], intercept - size * step[1]
            if np.max(np.abs(size * step)) < 1e-9:
                break
        if not slope > 0:  # a scorer no better than chance: keep the scores' order anyway
            return cls()
        return cls(float(slope), float(intercept))

    def save(self, folder):
        (Path(folder) / FILE).write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, folder):
        """The calibration saved in `folder`, or the identity (models saved before)."""
        path = Path(folder) / FILE
        return cls(**json.loads(path.read_text())) if path.exists() else cls()


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
        texts)."""
        from scipy.optimize import minimize

        def loss(parameters):
            fitted = cls(*parameters)
            total = 0.0
            for labels, probabilities, texts in groups:
                x = fitted.temperatures(texts) * logit(probabilities)
                total += np.mean(np.logaddexp(0, x) - np.asarray(labels, "float64") * x)
            return total

        return cls(*(float(value) for value in
                     minimize(loss, np.zeros(2), method="Nelder-Mead").x))


def logit(probabilities):
    """log(p / (1 - p)) of probabilities clipped away from 0 and 1."""
    p = np.clip(np.asarray(probabilities, "float64"), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed without overflow."""
    return np.exp(-np.logaddexp(0, -np.asarray(x, "float64")))
