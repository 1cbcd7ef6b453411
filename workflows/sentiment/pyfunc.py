"""The sentiment classifiers saved as folders, as an MLflow pyfunc: reviews in, P(positive) out.

Logged as a models-from-code pyfunc by `workflows.imdb_sentiment` for `lm_classifier`
(`SubwordClassifier`), `doc2vec` (`ParagraphVectorClassifier`) and the models of the
prepared token ids (`TokenClassifier`: RNNs, Transformer), with `layers/`,
`data_prep/` and the `sentiment` (and `causal_lm`) packages as its code:

    mlflow.pyfunc.load_model(uri).predict(["A gripping, beautifully shot film."])
"""

import json
from pathlib import Path

import mlflow
from mlflow.pyfunc import PythonModel

from workflows.sentiment.reviews import requested_reviews


def load_classifier(folder):
    """The classifier saved in `folder`, by the `kind` its classifier.json names."""
    settings = json.loads((Path(folder) / "classifier.json").read_text())
    if settings.get("kind") == "paragraph_vectors":
        from workflows.sentiment.paragraph_classifier import ParagraphVectorClassifier

        return ParagraphVectorClassifier.load(folder)
    if settings.get("kind") == "token_ids":
        from workflows.sentiment.token_classifier import TokenClassifier

        return TokenClassifier.load(folder)
    from workflows.sentiment.subword_classifier import SubwordClassifier

    return SubwordClassifier.load(folder)


class FolderReviewSentiment(PythonModel):
    def load_context(self, context):
        self.classifier = load_classifier(context.artifacts["classifier"])

    def predict(self, context, model_input: list[str], params=None) -> list[float]:
        """The probability that each review is positive (empty reviews included).

        Raises `MlflowException` (HTTP 400 when served) for an empty list.
        """
        texts = requested_reviews(model_input)
        return self.classifier.predict(texts).tolist()


mlflow.models.set_model(FolderReviewSentiment())
