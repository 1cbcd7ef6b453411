"""The toy lesson's classifier as an MLflow pyfunc: sentences in, P(good) out."""

import json
from pathlib import Path

import keras
import mlflow
import numpy as np
from mlflow.pyfunc import PythonModel


class ToyClassifier(PythonModel):
    def load_context(self, context):
        folder = Path(context.artifacts["classifier"])
        self.model = keras.saving.load_model(folder / "model.keras")
        vocabulary = json.loads((folder / "vocabulary.json").read_text())
        self.index = {word: row for row, word in enumerate(vocabulary)}

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        ids = [[self.index.get(word, 0) for word in text.split()][:6] for text in model_input]
        padded = np.array([row + [0] * (6 - len(row)) for row in ids], "int32")
        return self.model.predict(padded, verbose=0)[:, 0].tolist()


mlflow.models.set_model(ToyClassifier())
