"""The calibration of every classifier: its probabilities made to mean what they say.

A model trained on whole IMDB reviews is over- or under-confident elsewhere; fitting
`softmax(slope * log p + bias)` of each row `p` of class probabilities on the validation
texts (never test) turns its scores into probabilities that match how often it is right.
The slope sharpens or softens every score alike; the bias (one per class, the first 0)
moves them towards the classes the model under-predicts. Of two classes it is Platt
scaling, `sigmoid(slope * logit(p) + bias)` of P(class 1); with no bias it is temperature
scaling (Guo et al., 2017), `T = 1 / slope`. Saved as `calibration.json` beside a
classifier; plain NumPy, so it ships with every pyfunc.
"""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

FILE = "calibration.json"
EPSILON = 1e-7  # probabilities clipped to at least EPSILON before their log
SLOPES = (0.05, 20.0)  # never turned round (the scores keep their order), nor flattened


@dataclass(frozen=True)
class Calibration:
    slope: float = 1.0
    bias: tuple = ()  # one per class (the first 0); empty: none

    def apply(self, probabilities, texts=None):
        """Calibrated class probabilities of raw ones: rows `(texts, classes)`, or P(class
        1) of two classes (a 1-D array, answered the same way); `texts` is not needed."""
        rows = class_rows(probabilities)
        calibrated = softmax(self.slope * np.log(np.clip(rows, EPSILON, 1))
                             + self.biases(rows.shape[1]))
        return calibrated[:, 1] if np.ndim(probabilities) == 1 else calibrated

    def undo(self, calibrated, texts=None):
        """The raw probabilities that `apply` turned into `calibrated`."""
        rows = class_rows(calibrated)
        raw = softmax((np.log(np.clip(rows, EPSILON, 1)) - self.biases(rows.shape[1]))
                      / self.slope)
        return raw[:, 1] if np.ndim(calibrated) == 1 else raw

    def biases(self, classes):
        return np.asarray(self.bias, "float64") if self.bias else np.zeros(classes)

    @classmethod
    def fit(cls, labels, probabilities):
        """The slope and biases of least mean log loss on (`labels`, `probabilities`)."""
        from scipy.optimize import minimize

        logs = np.log(np.clip(class_rows(probabilities), EPSILON, 1))
        truth = np.eye(logs.shape[1])[np.asarray(labels).astype("int64")]

        def loss_and_gradient(parameters):
            scores = parameters[0] * logs + np.append(0.0, parameters[1:])
            error = (softmax(scores) - truth) / len(logs)
            loss = np.mean(np.logaddexp.reduce(scores, axis=1) - np.sum(scores * truth, 1))
            return loss, np.append(np.sum(error * logs), error.sum(axis=0)[1:])

        start = np.append(1.0, np.zeros(logs.shape[1] - 1))
        fitted = minimize(loss_and_gradient, start, jac=True, method="L-BFGS-B",
                          bounds=[SLOPES] + [(None, None)] * (logs.shape[1] - 1),
                          options={"gtol": 1e-9}).x
        return cls(float(fitted[0]), (0.0, *(float(value) for value in fitted[1:])))

    def __str__(self):
        shifts = "".join(f", {value:+.3f}" for value in self.bias[1:])
        return f"softmax({self.slope:.3f} log p" + (f" + [0{shifts}])" if self.bias else ")")

    def save(self, folder):
        (Path(folder) / FILE).write_text(json.dumps(asdict(self)))

    @classmethod
    def load(cls, folder):
        """The calibration saved in `folder` (also as earlier versions saved it: Platt's
        `intercept`, a `temperature`)."""
        saved = json.loads((Path(folder) / FILE).read_text())
        if "temperature" in saved:
            return cls(1 / saved["temperature"])
        if "intercept" in saved:
            return cls(saved["slope"], (0.0, saved["intercept"]))
        return cls(saved["slope"], tuple(saved["bias"]))


def class_rows(probabilities):
    """Rows of class probabilities; P(class 1) of two classes becomes `[1 - p, p]`."""
    probabilities = np.asarray(probabilities, "float64")
    if probabilities.ndim == 1:
        return np.stack([1 - probabilities, probabilities], axis=1)
    return probabilities


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
                     minimize(loss, np.zeros(2), method="L-BFGS-B").x))


def logit(probabilities):
    """log(p / (1 - p)) of probabilities clipped away from 0 and 1."""
    p = np.clip(np.asarray(probabilities, "float64"), EPSILON, 1 - EPSILON)
    return np.log(p) - np.log1p(-p)


def sigmoid(x):
    """1 / (1 + exp(-x)), computed without overflow."""
    return np.exp(-np.logaddexp(0, -np.asarray(x, "float64")))
