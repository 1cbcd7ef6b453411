"""The sentiment classifiers saved as folders, as an MLflow pyfunc: reviews in, P(positive) out.

Logged as a models-from-code pyfunc by `workflows.imdb_sentiment` for every model
family's classifier folder (`sentiment/family.py`: `load_classifier`), each with the
Platt scaling fitted on the validation reviews (`calibration.json`), with `layers/`,
`data_prep/` and the `sentiment` and `causal_lm` packages as its code:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import mlflow
from mlflow.pyfunc import PythonModel

from workflows.sentiment.calibration import Calibration
from workflows.sentiment.reviews import requested_reviews
from workflows.sentiment.family import load_classifier


class FolderReviewSentiment(PythonModel):
    def load_context(self, context):
        self.classifier = load_classifier(context.artifacts["classifier"])
        self.calibration = Calibration.load(context.artifacts["classifier"])

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        """The calibrated probability that each review is positive.

        Raises `MlflowException` (HTTP 400 when served) for an empty list or review.
        """
        texts = requested_reviews(model_input)
        return self.calibration.apply(self.classifier.predict(texts)).tolist()


mlflow.models.set_model(FolderReviewSentiment())
