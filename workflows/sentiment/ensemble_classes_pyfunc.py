"""An ensemble of classifiers of a user's classes as an MLflow pyfunc: texts in, each
text's label and class probabilities out (as `pyfunc.py` answers a user's classes).

Logged by `python -m workflows.imdb_sentiment ensemble` for members trained on `--texts`;
its artifact folder holds each member's own pyfunc model and `ensemble.json` (member
order, the classes, the stacking weights and bias):

    mlflow.pyfunc.load_model(uri).predict(["Le gouvernement annonce une hausse"])
"""

import json
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

from workflows.sentiment.ensemble import combine_classes
from workflows.sentiment.metrics import class_matrix
from workflows.sentiment.reviews import requested_reviews

SETTINGS_FILE = "ensemble.json"


class EnsembleClasses(PythonModel):
    def load_context(self, context):
        folder = Path(context.artifacts["ensemble"])
        settings = json.loads((folder / SETTINGS_FILE).read_text(encoding="utf-8"))
        self.members = [mlflow.pyfunc.load_model(str(folder / name))
                        for name in settings["members"]]
        self.classes = settings["classes"]
        self.weights, self.bias = settings["weights"], settings["bias"]

    def predict(self, context, model_input: list[str], params=None) -> list[dict[str, Any]]:
        """Each text's most probable class and the combined class probabilities.

        Raises `MlflowException` (HTTP 400 when served) for an empty list or text.
        """
        texts = requested_reviews(model_input)
        stacked = np.stack([class_matrix(member.predict(texts), self.classes)
                            for member in self.members], axis=1)
        rows = combine_classes(stacked, self.weights, self.bias)
        return [{"label": self.classes[int(np.argmax(row))],
                 "probabilities": {name: round(float(p), 6)
                                   for name, p in zip(self.classes, row, strict=True)}}
                for row in rows]


mlflow.models.set_model(EnsembleClasses())
