"""An IMDB ensemble as an MLflow pyfunc: reviews in, the combined P(positive) out.

Logged by `python -m workflows.imdb_sentiment ensemble`; its artifact folder holds each
member's own pyfunc model (code included) and `ensemble.json` (member order, weights,
bias, the lexicon and the confidence by length if any), so it loads and serves in a fresh
process like any single model:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import json
from pathlib import Path

import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel

from workflows.sentiment.calibration import LengthTemperature
from workflows.sentiment.ensemble import combine
from workflows.sentiment.lexicon import lexicon_probabilities
from workflows.sentiment.reviews import requested_reviews

SETTINGS_FILE = "ensemble.json"


class EnsembleSentiment(PythonModel):
    def load_context(self, context):
        folder = Path(context.artifacts["ensemble"])
        settings = json.loads((folder / SETTINGS_FILE).read_text())
        self.members = [mlflow.pyfunc.load_model(str(folder / name))
                        for name in settings["members"]]
        self.lexicon = settings.get("lexicon", "none")
        self.weights, self.bias = settings["weights"], settings["bias"]
        fitted = settings.get("length_temperature")  # --calibrate-on; `evaluate` undoes it
        self.calibration = LengthTemperature(**fitted) if fitted else None

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        """The combined probability that each review is positive.

        Raises `MlflowException` (HTTP 400 when served) for an empty list.
        """
        texts = requested_reviews(model_input)
        columns = [np.asarray(member.predict(texts), "float64").reshape(-1)
                   for member in self.members]
        if self.lexicon != "none":
            columns.append(lexicon_probabilities(self.lexicon, texts))
        combined = combine(np.stack(columns, axis=1), self.weights, self.bias)
        if self.calibration is not None:
            combined = self.calibration.apply(combined, texts)
        return combined.tolist()


mlflow.models.set_model(EnsembleSentiment())
