"""The fine-tuned language-model classifier as an MLflow pyfunc: reviews in, P(positive) out.

Logged as a models-from-code pyfunc by `workflows.imdb_sentiment` (`lm_classifier`),
with `layers/`, `data_prep/` and the `sentiment` and `causal_lm` packages as its code:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import mlflow
from mlflow.pyfunc import PythonModel

from workflows.sentiment.reviews import requested_reviews
from workflows.sentiment.subword_classifier import SubwordClassifier


class SubwordReviewSentiment(PythonModel):
    def load_context(self, context):
        self.classifier = SubwordClassifier.load(context.artifacts["classifier"])

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        """The probability that each review is positive (empty reviews included).

        Raises `MlflowException` (HTTP 400 when served) for an empty list.
        """
        texts = requested_reviews(model_input)
        return self.classifier.predict(texts).tolist()


mlflow.models.set_model(SubwordReviewSentiment())
