"""A classifier folder of a user's classes as an MLflow pyfunc: texts in, each text's
label and the probability of every class out.

Logged by `workflows.imdb_sentiment` for a run trained on `--texts` (any number of
classes; the IMDB reviews' runs answer P(positive) through `pyfunc.py`), with the
calibration fitted on the validation texts and `classes.json` beside the classifier:

    mlflow.pyfunc.load_model(uri).predict(["Le gouvernement annonce une hausse"])
    # -> [{"label": "neutral", "probabilities": {"negative": 0.1, "neutral": 0.7, ...}}]
"""

from typing import Any

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

from workflows.sentiment.calibration import load_calibration
from workflows.sentiment.family import load_classifier, read_classes
from workflows.sentiment.reviews import requested_reviews


class FolderTextClasses(PythonModel):
    def load_context(self, context):
        folder = context.artifacts["classifier"]
        self.classifier = load_classifier(folder)
        self.calibration = load_calibration(folder)
        self.classes = read_classes(folder)

    def predict(self, context, model_input: list[str], params=None) -> list[dict[str, Any]]:
        """Each text's most probable class (`label`) and its calibrated class
        probabilities (`probabilities`, by class name).

        Raises `MlflowException` (HTTP 400 when served) for an empty list or text.
        """
        texts = requested_reviews(model_input)
        rows = self.calibration.apply(self.classifier.predict(texts))
        if rows.ndim == 1:  # two classes: P(class 1)
            rows = np.stack([1 - rows, rows], axis=1)
        return [{"label": self.classes[int(np.argmax(row))],
                 "probabilities": {name: round(float(p), 6)
                                   for name, p in zip(self.classes, row, strict=True)}}
                for row in rows]


mlflow.models.set_model(FolderTextClasses())
