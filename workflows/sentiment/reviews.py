"""What every sentiment pyfunc checks of a request (no TensorFlow, no Keras)."""

from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE


def requested_reviews(model_input):
    """The reviews of a pyfunc request, as a list; an empty one is refused with an
    `MlflowException` (HTTP 400 when served)."""
    texts = list(model_input)
    if not texts:
        raise MlflowException('Send at least one review, e.g. {"inputs": ["Loved it"]}.',
                              error_code=INVALID_PARAMETER_VALUE)
    return texts
