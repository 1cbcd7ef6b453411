"""What every sentiment pyfunc checks of a request and how it answers (no TensorFlow, no
Keras)."""

import numpy as np
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE

from data_prep.text import normalize_text

PROBABILITY = "probability"  # a model's `answers`: P(class 1) alone (the IMDB runs')


def requested_reviews(model_input):
    """The reviews of a pyfunc request, as a list, normalized as the training texts were
    (`normalize_text`); an empty list, or a review with no text to judge, is refused
    with an `MlflowException` (HTTP 400 when served)."""
    texts = [normalize_text(text) if isinstance(text, str) else text for text in model_input]
    if not texts:
        raise MlflowException('Send at least one review, e.g. {"inputs": ["Loved it"]}.',
                              error_code=INVALID_PARAMETER_VALUE)
    blank = blank_reviews(texts)
    if blank:
        raise MlflowException(f"Reviews {blank[:10]} (counted from 0) are empty: a review "
                              "needs words to be judged.", error_code=INVALID_PARAMETER_VALUE)
    return texts


def blank_reviews(texts):
    """The positions of the texts that hold no words (empty or only spaces)."""
    return [i for i, text in enumerate(texts) if isinstance(text, str) and not text.strip()]


def answered(rows, classes, answers):
    """A pyfunc's answers from `(texts, classes)` probabilities: each text's P(class 1)
    (`answers="probability"`), or its most probable class (`label`) and the probability
    of every class (`probabilities`, by class name)."""
    rows = np.asarray(rows, "float64")
    if answers == PROBABILITY:
        return rows[:, 1].tolist()
    return [{"label": classes[int(np.argmax(row))],
             "probabilities": {name: round(float(p), 6)
                               for name, p in zip(classes, row, strict=True)}}
            for row in rows]
