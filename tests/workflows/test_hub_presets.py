"""`--model encoder --set encoder=PRESET`: any keras-hub text classifier preset, built
here with keras-hub itself (random weights, two architectures) and read offline as a
user's preset would be; fine-tuned on a user's three classes or on the IMDB reviews."""

import json

import mlflow
import numpy as np
import pytest

from data_prep import encoders
from tests.data_prep.fixtures import write_tiny_hub_preset
from tests.data_prep.test_text_classes import FILLER, WORDS, news, write_tsv
from tests.workflows.interrupts import stop_once_at
from workflows import imdb_sentiment as workflow
from workflows.core import models
from workflows.sentiment.preprocessors import HubFeatures

TINY = ["--epochs", "2", "--set", "batch_size=8", "--set", "max_review_tokens=16",
        "--set", "learning_rate=0.003"]
NEWS_WORDS = [word for words in WORDS.values() for word in words] + FILLER


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    root = tmp_path_factory.mktemp("presets")
    return {name: write_tiny_hub_preset(root / f"tiny_{name}", name, NEWS_WORDS)
            for name in ("bert", "roberta")}


@pytest.fixture
def news_file(tmp_path):
    return write_tsv(tmp_path / "news.tsv", news(120))


def latest_run():
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    return mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time DESC"])[0]


def test_a_preset_folder_is_read_by_keras_hub_and_a_kit_bert_folder_is_not(presets, tmp_path):
    assert encoders.is_hub_preset(encoders.encoder_folder(str(presets["roberta"])))
    odd = tmp_path / "odd"
    odd.mkdir()
    (odd / "config.json").write_text(json.dumps({"model_type": "t5"}))
    with pytest.raises(encoders.EncoderError, match="model_type 't5'; keras-hub reads"):
        encoders.encoder_folder(str(odd))
    with pytest.raises(encoders.EncoderError, match="or a keras-hub preset name"):
        encoders.encoder_folder("no_such_preset_en")


@pytest.mark.integration
@pytest.mark.parametrize("architecture", ["bert", "roberta"])
def test_a_tiny_preset_fine_tunes_on_three_classes_and_answers_them(
        own_store, presets, news_file, architecture):
    assert workflow.main(["train", "--model", "encoder", "--set",
                          f"encoder={presets[architecture]}", "--texts", str(news_file),
                          *TINY]) == 0
    run = latest_run()
    assert run.data.tags["architecture"] == f"{architecture.capitalize()}TextClassifier"
    assert run.data.metrics["encoder_weights"] < 5000
    model = models.load_pyfunc(run)
    assert isinstance(model.unwrap_python_model().classifier.preprocessor, HubFeatures)
    answers = model.predict(["gobierno éxito", "reunión según отчёт"])
    assert [sorted(answer["probabilities"]) for answer in answers] == [sorted(WORDS)] * 2
    metrics = workflow.evaluate(run.info.run_id)
    assert np.array(metrics["confusion_matrix"]).shape == (3, 3)


@pytest.mark.integration
def test_a_preset_on_the_imdb_reviews_answers_p_positive(own_store, presets):
    assert workflow.main(["train", "--model", "encoder", "--set",
                          f"encoder={presets['bert']}", *TINY, "--epochs", "1"]) == 0
    scores = models.load_pyfunc(latest_run()).predict(["good film", "bad film"])
    assert len(scores) == 2 and all(0 < score < 1 for score in scores)


@pytest.mark.integration
def test_a_stopped_preset_fine_tuning_resumes_its_run(own_store, presets, news_file,
                                                      monkeypatch, capsys):
    stop_once_at(monkeypatch, epoch=1, step=3)
    argv = ["train", "--model", "encoder", "--set", f"encoder={presets['roberta']}",
            "--texts", str(news_file), *TINY, "--epochs", "3",
            "--set", "checkpoint_every_steps=1"]
    with pytest.raises(KeyboardInterrupt):
        workflow.main(argv)
    stopped = latest_run().info.run_id
    assert workflow.main(argv) == 0
    assert "Resuming run" in capsys.readouterr().out
    run = latest_run()
    assert run.info.run_id == stopped and run.info.status == "FINISHED"
    history = mlflow.MlflowClient().get_metric_history(stopped, "val_loss")
    assert [point.step for point in history] == [1, 2, 3]


@pytest.mark.integration
def test_a_preset_classifier_of_three_classes_is_served_over_http(own_store, presets,
                                                                   news_file, tmp_path):
    from tests.workflows.serving import post, served

    assert workflow.main(["train", "--model", "encoder", "--set",
                          f"encoder={presets['roberta']}", "--texts", str(news_file),
                          *TINY, "--epochs", "1"]) == 0
    run_id = latest_run().info.run_id
    with served(f"runs:/{run_id}/model", tmp_path / "server.log") as url:
        status, body = post(url, json.dumps({"inputs": ["gobierno éxito", "según"]}).encode())
        assert status == 200, body
        answers = body["predictions"]
        assert [sorted(answer["probabilities"]) for answer in answers] == [sorted(WORDS)] * 2
        assert all(answer["label"] in WORDS for answer in answers)
        status, body = post(url, json.dumps({"inputs": ["  "]}).encode())
        assert status == 400 and "empty" in json.dumps(body)
