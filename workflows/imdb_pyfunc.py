"""The exported IMDB model as an MLflow pyfunc: raw review strings in, probabilities out.

Logged as a models-from-code pyfunc (see `workflows/lifecycle.export_and_log_model`);
the Keras model it wraps already holds the vectorizer, so it takes text directly:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import keras
import mlflow
import numpy as np
import tensorflow as tf
from mlflow.pyfunc import PythonModel

import data_prep.standardize  # noqa: F401  registers the standardization in the model
import layers  # noqa: F401  registers the custom layers
from workflows.sentiment.reviews import requested_reviews

BATCH_SIZE = 64


class ReviewSentiment(PythonModel):
    def load_context(self, context):
        self.model = keras.saving.load_model(context.artifacts["model"])

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        """The probability that each review is positive (empty reviews included).

        Raises `MlflowException` (HTTP 400 when served) for an empty list.
        """
        texts = requested_reviews(model_input)
        batches = tf.data.Dataset.from_tensor_slices(tf.constant(texts, tf.string))
        probabilities = self.model.predict(batches.batch(BATCH_SIZE), verbose=0)
        return np.asarray(probabilities, dtype="float64").reshape(-1).tolist()


mlflow.models.set_model(ReviewSentiment())
