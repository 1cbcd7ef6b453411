"""An ensemble of sentiment classifiers as an MLflow pyfunc: texts in, the combined answer
out, as a member answers (`pyfunc.py`): an IMDB ensemble P(positive), an ensemble of a
user's classes each text's label and class probabilities.

Logged by `python -m workflows.imdb_sentiment ensemble`; its artifact folder holds each
member's own pyfunc model (code included) and `ensemble.json` (member order, weights,
bias, and the classes, or the lexicon and the confidence by length if any), so it loads
and serves in a fresh process like any single model:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import json
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

from workflows.sentiment.calibration import LengthTemperature
from workflows.sentiment.ensemble import combine, combine_classes
from workflows.sentiment.lexicon import lexicon_probabilities
from workflows.sentiment.metrics import class_matrix
from workflows.sentiment.reviews import requested_reviews

SETTINGS_FILE = "ensemble.json"


class EnsembleSentiment(PythonModel):
    def load_context(self, context):
        folder = Path(context.artifacts["ensemble"])
        settings = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        self.members = [mlflow.pyfunc.load_model(str(folder / name))
                        for name in settings["members"]]
        self.classes = settings.get("classes")  # None: IMDB's P(positive)
        self.lexicon = settings.get("lexicon", "none")
        self.weights, self.bias = settings["weights"], settings["bias"]
        fitted = settings.get("length_temperature")  # --calibrate-on; `evaluate` undoes it
        self.calibration = LengthTemperature(**fitted) if fitted else None

    def predict(self, context, model_input: list[str], params=None) -> list[Any]:
        """The combined probability that each text is positive, or each text's most
        probable class (`label`) and the combined class probabilities.

        Raises `MlflowException` (HTTP 400 when served) for an empty list or text.
        """
        texts = requested_reviews(model_input)
        if self.classes is not None:
            return self.predict_classes(texts)
        columns = [np.asarray(member.predict(texts), "float64").reshape(-1)
                   for member in self.members]
        if self.lexicon != "none":
            columns.append(lexicon_probabilities(self.lexicon, texts))
        combined = combine(np.stack(columns, axis=1), self.weights, self.bias)
        if self.calibration is not None:
            combined = self.calibration.apply(combined, texts)
        return combined.tolist()

    def predict_classes(self, texts):
        stacked = np.stack([class_matrix(member.predict(texts), self.classes)
                            for member in self.members], axis=1)
        rows = combine_classes(stacked, self.weights, self.bias)
        return [{"label": self.classes[int(np.argmax(row))],
                 "probabilities": {name: round(float(p), 6)
                                   for name, p in zip(self.classes, row, strict=True)}}
                for row in rows]


mlflow.models.set_model(EnsembleSentiment())
