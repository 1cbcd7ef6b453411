"""The translation, language-model and retrieval lessons on PyTorch (the sentiment
lesson's are `test_sentiment_backends.py`): on tiny data each trains, evaluates and is
used as on TensorFlow; a stop at a random moment resumes to the same finished run; the
dense retriever's cached loss makes the whole batch's step; `export` ends in one line
(Keras's ONNX exporter on PyTorch fails on these networks: export on TensorFlow)."""

import importlib.util

import pytest

from tests.data_prep.fixtures import write_tiny_encoder
from tests.workflows import interrupts
from tests.workflows.jax_only import run_steps

pytestmark = [pytest.mark.integration, pytest.mark.skipif(
    importlib.util.find_spec("torch") is None,
    reason="PyTorch is not installed (README: the third backend)")]
TORCH = {"KERAS_BACKEND": "torch"}
STEPS = """
import json, os
from workflows import {lesson} as lesson
codes = [lesson.main(step) for step in {steps!r}]
print(json.dumps(codes))
"""


def run_lesson_steps(lesson, steps, env, tmp_path, new_store):
    """The exit status of each of `steps` of `lesson`, run in one PyTorch process."""
    env = {**TORCH, **env, "NLPKIT_WORK_DIR": str(tmp_path / "work"),
           "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
    return run_steps(STEPS.format(lesson=lesson, steps=steps), env, hide_tensorflow=False)


def test_the_translation_lesson_runs_on_pytorch(tmp_path, new_store):
    from tests.data_prep.fixtures import generated_spa_lines, write_spa_eng_zip
    from tests.workflows.test_translation import TINY_TRANSFORMER

    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip", generated_spa_lines())
    steps = [["train", "--preset", "cpu", *TINY_TRANSFORMER], ["evaluate"],
             ["translate", "How are you?"], ["export", "--format", "onnx"]]
    assert run_lesson_steps("translation", steps, {"NLPKIT_SPA_ENG_PATH": str(archive)},
                            tmp_path, new_store) == [0, 0, 0, 2]


def test_the_language_model_lesson_runs_on_pytorch(tmp_path, new_store):
    from tests.workflows.test_language_model import TINY, write_corpus

    corpus = write_corpus(tmp_path / "texts")
    steps = [["train", "--corpus", str(corpus), *TINY], ["evaluate"],
             ["generate", "The movie was"], ["export", "--format", "onnx"]]
    assert run_lesson_steps("language_model", steps, {}, tmp_path, new_store) == [0, 0, 0, 2]


def test_the_retrieval_lesson_runs_on_pytorch(tmp_path, new_store):
    from tests.workflows.test_retrieval import FILLER, MORE_TOPICS, write_beir

    corpus = write_beir(tmp_path / "corpus", MORE_TOPICS, repeats=1, query_filler=4,
                        document_filler=8)
    encoder = write_tiny_encoder(tmp_path / "encoder", words=[*MORE_TOPICS, *FILLER])
    steps = [["train", "--retriever", "bm25"],
             ["train", "--retriever", "dense", "--set", f"encoder={encoder}", "--epochs", "1",
              "--set", "batch_size=8", "--set", "document_length=16",
              "--set", "query_length=16"],  # the cached loss: chunks of 8
             ["evaluate"], ["search", "topic3 cell"], ["export", "--format", "onnx"]]
    assert run_lesson_steps("retrieval", steps, {"NLPKIT_BEIR_PATH": str(corpus)}, tmp_path,
                            new_store) == [0, 0, 0, 0, 2]


def test_the_cached_loss_makes_the_whole_batchs_step_on_pytorch(tmp_path):
    encoder = write_tiny_encoder(tmp_path / "encoder", words=[f"w{i}" for i in range(60)])
    result = run_steps("import json\nfrom tests.workflows.test_retrieval import "
                       f"cached_step_difference\nprint(json.dumps(cached_step_difference("
                       f"{str(encoder)!r}, soft=True)))", TORCH, hide_tensorflow=False)
    assert result["loss"][0] == pytest.approx(result["loss"][1], rel=1e-5)
    assert result["step"] > 1e-3 and result["difference"] < 1e-4 * result["step"], result


@pytest.mark.parametrize("case", [interrupts.translation, interrupts.sentiment_rnn,
                                  interrupts.dense_retriever, interrupts.hub_language_model],
                         ids=lambda case: case.__name__)
def test_stops_resume_to_the_same_finished_run_on_pytorch(case, tmp_path):
    stops = interrupts.interrupt_until_finished(case, "torch", tmp_path, seed=3, stops=2)
    print(stops)  # (seconds after the start, exit status, seconds from stop to exit)
    assert any(status == 130 for _, status, _ in stops)
