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
EPSILON = 1e-7


@dataclass(frozen=True)
class Calibration:
    slope: float = 1.0
    intercept: float = 0.0

    def apply(self, probabilities):
        """Calibrated probabilities of raw ones."""
        return _sigmoid(self.slope * _logit(probabilities) + self.intercept)

    def undo(self, calibrated):
        """The raw probabilities that `apply` turned into `calibrated`."""
        return _sigmoid((_logit(calibrated) - self.intercept) / self.slope)

    @classmethod
    def fit(cls, labels, probabilities, steps=100):
        """The slope and intercept of least log-loss on (`labels`, `probabilities`):
        Newton's method with a backtracking line search (a convex problem in two
        parameters: a few steps)."""
        x, y = _logit(probabilities), np.asarray(labels, "float64")

        def loss(slope, intercept):
            z = slope * x + intercept
            return np.sum(np.logaddexp(0, z) - y * z)

        slope, intercept = 1.0, 0.0
        for _ in range(steps):
            p = _sigmoid(slope * x + intercept)
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


def _logit(probabilities):
    p = np.clip(np.asarray(probabilities, "float64"), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def _sigmoid(x):
    return np.exp(-np.logaddexp(0, -np.asarray(x, "float64")))  # no overflow
