"""The exported language model as an MLflow pyfunc: prompts in, continuations out.

Logged as a models-from-code pyfunc by `workflows.language_model` (with `layers/`,
`data_prep/` and this package as its code); it wraps the saved generator folder (the kit's GPT, or a keras-hub preset):

    model = mlflow.pyfunc.load_model(uri)
    model.predict(["The movie was"], params={"sampler": "top_p", "top_p": 0.9,
                                             "temperature": 0.8, "seed": 1})

Params (declared in the signature, so a served model takes them too): `sampler`
(greedy, beam, random, top_k, top_p), `max_new_tokens`, `temperature`, `top_k`,
`top_p`, `num_beams`, `seed` (-1: none).
"""

import dataclasses

import mlflow
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.pyfunc import PythonModel

from workflows.causal_lm.generator import load_generator
from workflows.causal_lm.sampling import Sampling


class TextContinuation(PythonModel):
    def load_context(self, context):
        self.generator = load_generator(context.artifacts["generator"])

    def predict(self, context, model_input: list[str], params: dict | None = None) -> list[str]:
        """The continuation of each prompt.

        Raises `MlflowException` (HTTP 400 when served) for an empty list or a sampler
        setting out of range.
        """
        prompts = list(model_input)
        if not prompts:
            raise MlflowException('Send at least one prompt, e.g. {"inputs": ["The movie"]}.',
                                  error_code=INVALID_PARAMETER_VALUE)
        settings = {k: v for k, v in (params or {}).items()
                    if k in {f.name for f in dataclasses.fields(Sampling)}}
        if settings.get("seed", -1) == -1:
            settings["seed"] = None
        try:
            sampling = Sampling(**settings).check()
        except ValueError as error:
            raise MlflowException(str(error), error_code=INVALID_PARAMETER_VALUE) from None
        return self.generator.generate(prompts, sampling)


mlflow.models.set_model(TextContinuation())
