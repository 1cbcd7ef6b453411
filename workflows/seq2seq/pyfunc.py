"""The exported translator as an MLflow pyfunc: English strings in, Spanish strings out.

Logged as a models-from-code pyfunc by `workflows.translation` (with `layers/`,
`data_prep/` and this package as its code); it wraps the saved
`Translator` folder (Keras model, vocabularies, decoding settings):

    mlflow.pyfunc.load_model(uri).predict(["How are you?"])  # -> ["¿Cómo estás?"]

`params={"beam_width": 1}` switches to greedy decoding.
"""

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from workflows.seq2seq.translator import Translator


class EnglishToSpanish(PythonModel):
    def load_context(self, context):
        self.translator = Translator.load(context.artifacts["translator"])

    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[str]:
        """The Spanish translation of each sentence (empty sentences give empty strings).

        Raises `MlflowException` (HTTP 400 when served) for an empty list.
        """
        texts = list(model_input)
        if not texts:
            raise MlflowException('Send at least one sentence, e.g. {"inputs": ["How are you?"]}.',
                                  error_code=INVALID_PARAMETER_VALUE)
        beam_width = int((params or {}).get("beam_width") or 0) or None
        return self.translator.translate(texts, beam_width=beam_width)


mlflow.models.set_model(EnglishToSpanish())
