"""The sentiment classifiers saved as folders, as an MLflow pyfunc: reviews in, P(positive) out.

Logged as a models-from-code pyfunc by `workflows.imdb_sentiment` for `lm_classifier`
(`SubwordClassifier`), `doc2vec` (`ParagraphVectorClassifier`), the models of the
prepared token ids (`TokenClassifier`: RNNs, Transformer) and the n-gram models
(`EndToEndClassifier`), each with the Platt scaling fitted on the validation reviews
(`calibration.json`; models saved before it have none), with `layers/`,
`data_prep/` and the `sentiment` (and `causal_lm`) packages as its code:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import mlflow
from mlflow.pyfunc import PythonModel

from workflows.sentiment.calibration import Calibration
from workflows.sentiment.classifiers import load_classifier
from workflows.sentiment.reviews import requested_reviews


class FolderReviewSentiment(PythonModel):
    def load_context(self, context):
        self.classifier = load_classifier(context.artifacts["classifier"])
        self.calibration = Calibration.load(context.artifacts["classifier"])

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        """The calibrated probability that each review is positive (empty reviews
        included).

        Raises `MlflowException` (HTTP 400 when served) for an empty list.
        """
        texts = requested_reviews(model_input)
        return self.calibration.apply(self.classifier.predict(texts)).tolist()


mlflow.models.set_model(FolderReviewSentiment())
