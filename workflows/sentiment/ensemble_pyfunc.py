"""An ensemble of text classifiers as an MLflow pyfunc: texts in, the combined answer out,
as its members answer (`pyfunc.py`): IMDB's P(positive), or a user's classes each text's
label and class probabilities.

Logged by `python -m workflows.imdb_sentiment ensemble`; its artifact folder holds each
member's own pyfunc model (code included) and `ensemble.json` (member order, classes,
how the members answer, the stacking's weights and bias, and the lexicon and the
confidence by length, if any), so it loads and serves in a fresh process like any single
model:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import json
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

from workflows.sentiment.calibration import LengthTemperature
from workflows.sentiment.ensemble import combine
from workflows.sentiment.lexicon import lexicon_probabilities
from workflows.sentiment.metrics import answer_matrix
from workflows.sentiment.reviews import answered, requested_reviews

SETTINGS_FILE = "ensemble.json"


class EnsembleClassifier(PythonModel):
    def load_context(self, context):
        folder = Path(context.artifacts["ensemble"])
        settings = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        self.members = [mlflow.pyfunc.load_model(str(folder / name))
                        for name in settings["members"]]
        self.run_ids = settings["run_ids"]  # the members' runs, in the same order
        self.classes, self.answers = settings["classes"], settings["answers"]
        self.lexicon = settings.get("lexicon", "none")
        self.weights, self.bias = settings["weights"], settings["bias"]
        fitted = settings.get("length_temperature")  # --calibrate-on; `evaluate` undoes it
        self.calibration = LengthTemperature(**fitted) if fitted else None

    def predict(self, context, model_input: list[str], params=None) -> list[Any]:
        """Each text's combined P(class 1), or its most probable class (`label`) and the
        combined class probabilities, as the members answer.

        Raises `MlflowException` (HTTP 400 when served) for an empty list or text.
        """
        texts = requested_reviews(model_input)
        return answered(self.probabilities(texts), self.classes, self.answers)

    def probabilities(self, texts, columns=None):
        """`(texts, classes)`: the members' (and the lexicon's) answers combined; the
        members' `columns` (each `(texts, classes)`) if they were scored already."""
        if columns is None:
            columns = [answer_matrix(member.predict(texts), self.classes)
                       for member in self.members]
        columns = list(columns)
        if self.lexicon != "none":
            columns.append(answer_matrix(lexicon_probabilities(self.lexicon, texts),
                                         self.classes))
        rows = combine(np.stack(columns, axis=1), self.weights, self.bias)
        if self.calibration is None:
            return rows
        positive = self.calibration.apply(rows[:, 1], texts)
        return np.column_stack([1 - positive, positive])


mlflow.models.set_model(EnsembleClassifier())
