"""The exported translator as an MLflow pyfunc: English strings in, Spanish strings out.

Logged as a models-from-code pyfunc by `workflows.translation` (with `layers/`,
`data_prep/` and this package as its code); it wraps the saved
`Translator` folder (Keras model, vocabularies, decoding settings):

    mlflow.pyfunc.load_model(uri).predict(["How are you?"])  # -> ["¿Cómo estás?"]

Params (declared in the model's signature, so a served model takes them too):
`beam_width` (1 is greedy; default: the translator's own, 1 to `MAX_BEAM_WIDTH`) and
`length_penalty` (Wu et al.'s alpha, 0 to 5; 0: beams ranked by log-likelihood alone).
"""

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from workflows.seq2seq.translator import MAX_BEAM_WIDTH, Translator


class EnglishToSpanish(PythonModel):
    def load_context(self, context):
        self.translator = Translator.load(context.artifacts["translator"])

    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[str]:
        """The Spanish translation of each sentence (empty sentences give empty strings).

        Raises `MlflowException` (HTTP 400 when served) for an empty list or a beam
        width out of range.
        """
        texts = list(model_input)
        if not texts:
            raise MlflowException('Send at least one sentence, e.g. {"inputs": ["How are you?"]}.',
                                  error_code=INVALID_PARAMETER_VALUE)
        beam_width = (params or {}).get("beam_width") or 0
        if not isinstance(beam_width, int) or not 0 <= beam_width <= MAX_BEAM_WIDTH:
            raise MlflowException(f"beam_width must be a whole number from 1 to {MAX_BEAM_WIDTH}"
                                  f" (1 is greedy), got {beam_width!r}.",
                                  error_code=INVALID_PARAMETER_VALUE)
        alpha = (params or {}).get("length_penalty") or 0.0
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 5:
            raise MlflowException(f"length_penalty must be a number from 0 to 5 (0.6-1.0 is "
                                  f"usual), got {alpha!r}.", error_code=INVALID_PARAMETER_VALUE)
        return self.translator.translate(texts, beam_width=beam_width or None,
                                         length_penalty=float(alpha))


mlflow.models.set_model(EnglishToSpanish())
