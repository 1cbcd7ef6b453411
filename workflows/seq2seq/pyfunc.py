"""The exported translator as an MLflow pyfunc: source strings in, translations out.

Logged as a models-from-code pyfunc by `workflows.translation` (with `layers/`,
`data_prep/` and this package as its code); it wraps the saved
`Translator` folder (Keras model, vocabularies, decoding settings):

    mlflow.pyfunc.load_model(uri).predict(["How are you?"])  # -> ["¿Cómo estás?"]
    (a translator trained `es-en` takes Spanish and answers English)

Params (declared in the model's signature, so a served model takes them too):
`beam_width` (1 is greedy; default: the translator's own, 1 to `MAX_BEAM_WIDTH`),
`length_penalty` (Wu et al.'s alpha, 0 to 5; 0: beams ranked by log-likelihood alone),
`n_best` (K > 0: each prediction is the K best `{"translation", "score"}`, best first)
and `score` (true: each input is `SOURCE<TAB>TARGET` or `SOURCE ||| TARGET`, and each
prediction is `{"log_likelihood", "tokens"}` of that target given that source).
Served through an export (`serve_model --export NAME`), it decodes greedily in the
export's runtime (`exported.ExportedTranslator`) and refuses beams, n-best and scores.
"""

import os
import warnings
from typing import Any

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from workflows.core.export import SERVED_EXPORT_ENV
from workflows.seq2seq.translator import MAX_BEAM_WIDTH, Translator, parse_pair

# predictions are strings, lists of dicts (n_best) or dicts (score): typed as Any
warnings.filterwarnings("ignore", message=".*Any type hint is inferred as AnyType")


def bad_request(message):
    return MlflowException(message, error_code=INVALID_PARAMETER_VALUE)


class TranslatorModel(PythonModel):
    def load_context(self, context):
        self.translator = Translator.load(context.artifacts["translator"])
        self.exported = None
        if os.environ.get(SERVED_EXPORT_ENV):  # (`serve_model --export`): greedy through it
            from workflows.seq2seq.exported import ExportedTranslator

            self.exported = ExportedTranslator(os.environ[SERVED_EXPORT_ENV], self.translator)

    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[Any]:
        """The translation of each sentence (empty sentences give empty strings), its
        `n_best` translations, or with `score` the log-likelihood of each pair.

        Raises `MlflowException` (HTTP 400 when served) for an empty list or a param
        out of range.
        """
        texts, params = list(model_input), params or {}
        if not texts:
            raise bad_request('Send at least one sentence, e.g. {"inputs": ["How are you?"]}.')
        beam_width = params.get("beam_width") or 0
        if not is_int(beam_width) or not 0 <= beam_width <= MAX_BEAM_WIDTH:
            raise bad_request(f"beam_width must be a whole number from 1 to {MAX_BEAM_WIDTH} "
                              f"(1 is greedy), got {beam_width!r}.")
        alpha = params.get("length_penalty") or 0.0
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 5:
            raise bad_request(f"length_penalty must be a number from 0 to 5 (0.6-1.0 is "
                              f"usual), got {alpha!r}.")
        n_best = params.get("n_best") or 0
        if not is_int(n_best) or not 0 <= n_best <= MAX_BEAM_WIDTH:
            raise bad_request(f"n_best must be a whole number from 0 to {MAX_BEAM_WIDTH}, "
                              f"got {n_best!r}.")
        if self.exported is not None:
            return self.through_export(texts, params, beam_width, alpha, n_best)
        if params.get("score"):
            return self.score(texts, n_best)
        if n_best:
            return [[{"translation": text, "score": score} for text, score in row]
                    for row in self.translator.n_best(texts, n_best, beam_width or None,
                                                      float(alpha))]
        return self.translator.translate(texts, beam_width=beam_width or None,
                                         length_penalty=float(alpha))

    def through_export(self, texts, params, beam_width, alpha, n_best):
        """Greedy translations by the export's runtime; what only the kit's decoding
        does (beams, n-best lists, scores) is refused in one line."""
        if params.get("score") or n_best or beam_width > 1 or alpha:
            raise bad_request("This model is served through its export, which decodes "
                              "greedily: send beam_width 1 (or none), no n_best, "
                              "length_penalty or score; or serve it without --export.")
        return self.exported.translate(texts)

    def score(self, lines, n_best):
        if n_best:
            raise bad_request("score and n_best are separate requests; send one of them.")
        try:
            pairs = [parse_pair(line) for line in lines]
        except ValueError as error:
            raise bad_request(f"With score, each input is a sentence pair: {error}.") from None
        scores = self.translator.score([s for s, _ in pairs], [t for _, t in pairs])
        return [{"log_likelihood": total, "tokens": tokens} for total, tokens in scores]


def is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


mlflow.models.set_model(TranslatorModel())
