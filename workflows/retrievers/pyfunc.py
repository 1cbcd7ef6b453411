"""The exported retriever as an MLflow pyfunc: query strings in, ranked documents out.

Logged as a models-from-code pyfunc by `workflows.retrieval` (with `layers/`,
`data_prep/` and this package as its code); it wraps the saved retriever folder
(`searcher.py`), index included:

    model = mlflow.pyfunc.load_model(uri)
    model.predict(["vitamin D lowers the risk of fractures"], params={"k": 5})
    # -> [[{"rank": 1, "id": "...", "title": "...", "score": 0.71}, ...]]

`k` (1-1000, default 10) is declared in the signature, so a served model takes it too.
"""

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from workflows.retrievers.searcher import Searcher

MAX_K = 1000


class RankedDocuments(PythonModel):
    def load_context(self, context):
        self.searcher = Searcher.load(context.artifacts["retriever"])

    def predict(self, context, model_input: list[str], params: dict | None = None):
        """Per query, its top `k` documents (rank, id, title, score), best first.

        Raises `MlflowException` (HTTP 400 when served) for no query, an empty query or
        a `k` out of range.
        """
        queries = list(model_input)
        if not queries or any(not str(query).strip() for query in queries):
            raise MlflowException('Send at least one non-empty query, e.g. {"inputs": '
                                  '["vitamin D and fractures"]}.',
                                  error_code=INVALID_PARAMETER_VALUE)
        k = int((params or {}).get("k", 10))
        if not 1 <= k <= MAX_K:
            raise MlflowException(f"k must be between 1 and {MAX_K}, got {k}.",
                                  error_code=INVALID_PARAMETER_VALUE)
        return self.searcher.answers([str(query) for query in queries], k)


mlflow.models.set_model(RankedDocuments())
