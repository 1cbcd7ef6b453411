"""The sentiment lesson on each backend: on a user's tiny file, the n-gram families
(their `TextVectorization` standardized outside the layer, dense where the backend has
no sparse tensors) and the BiLSTM train, evaluate, predict and export on JAX and
PyTorch as on TensorFlow (JAX: a SavedModel; PyTorch: Keras's exporters fail on these
networks, one line each)."""

import importlib.util
import json

import pytest

from tests.workflows.jax_only import run_steps

pytestmark = pytest.mark.integration
STEPS = """
import json
from workflows import imdb_sentiment as lesson
texts = {texts!r}
codes = []
for model in ("bow", "nbsvm", "bilstm"):
    codes += [lesson.main(["train", "--texts", texts, "--model", model, "--epochs", "2",
                           "--set", "batch_size=8"]),
              lesson.main(["evaluate"]), lesson.main(["predict", "a good film"])]
codes.append(lesson.main(["export", "--format", {format!r}]))
print(json.dumps(codes))
"""
EXPORTS = {"jax": ("saved_model", 0), "torch": ("onnx", 2)}  # the format, its exit status


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_the_sentiment_families_run_on_each_backend(backend, tmp_path, new_store):
    if backend == "torch" and importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed (README: the third backend)")
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(json.dumps({"text": f"{word} film {i}", "label": label}) + "\n"
                             for i in range(40) for word, label in
                             [("good great" if i % 2 else "bad dull", "pos" if i % 2 else "neg")]))
    format, status = EXPORTS[backend]
    env = {"KERAS_BACKEND": backend, "NLPKIT_WORK_DIR": str(tmp_path / "work"),
           "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
    codes = run_steps(STEPS.format(texts=str(texts), format=format), env,
                      hide_tensorflow=False)
    assert codes == [0] * 9 + [status]
