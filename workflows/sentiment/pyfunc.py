"""Every sentiment classifier folder as one MLflow pyfunc: texts in, their classes out.

Logged as a models-from-code pyfunc by `workflows.imdb_sentiment` for a classifier of any
family (`sentiment/text_classifier.py`: a Keras model that reads raw texts) and any
classes, with the calibration fitted on the validation texts beside it (`calibration.py`),
and `layers/`, `data_prep/` and the `sentiment` and `causal_lm` packages as its code. A
run on the IMDB reviews answers the tutorial's P(positive) of each review; a run on a
user's texts each text's label and the probability of every class:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
    # IMDB: [0.93]; a user's classes: [{"label": "positive", "probabilities": {...}}]
"""

import os
from typing import Any

import mlflow
from mlflow.pyfunc import PythonModel

from workflows.core.export import SERVED_EXPORT_ENV
from workflows.core.model_folder import read_settings
from workflows.sentiment.calibration import Calibration, class_rows
from workflows.sentiment.reviews import answered, requested_reviews
from workflows.sentiment.text_classifier import MODEL_KIND, load_classifier


class TextClassifierModel(PythonModel):
    def load_context(self, context):
        folder = context.artifacts["classifier"]
        self.classifier = load_classifier(folder)
        self.calibration = Calibration.load(folder)
        self.answers = read_settings(folder, [MODEL_KIND]).get("answers", "classes")
        self.exported = None
        if os.environ.get(SERVED_EXPORT_ENV):  # (`serve_model --export`): its calibration
            from workflows.sentiment.exported import ExportedAnswers  # is inside

            self.exported = ExportedAnswers(os.environ[SERVED_EXPORT_ENV],
                                            self.classifier.preprocessor)

    def predict(self, context, model_input: list[str], params=None) -> list[Any]:
        """Each text's calibrated P(class 1) (`answers="probability"`), or its most
        probable class (`label`) and its calibrated class probabilities
        (`probabilities`, by class name).

        Raises `MlflowException` (HTTP 400 when served) for an empty list or text.
        """
        texts = requested_reviews(model_input)
        if self.exported is not None:
            rows = self.exported.probabilities(texts)
        else:
            rows = self.calibration.apply(class_rows(self.classifier.predict(texts)))
        return answered(rows, self.classifier.classes, self.answers)


mlflow.models.set_model(TextClassifierModel())
