"""`run --texts`: two families trained on a user's three classes, ranked on a
leaderboard by macro-F1, and stacked into an ensemble (integration tier)."""

import contextlib
import io
import json

import mlflow
import numpy as np
import pytest

from tests.workflows.test_text_classes import CLASSES, texts_runs, trained_on_news
from workflows import imdb_sentiment as workflow
from workflows.core import models

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def leaderboard(tmp_path_factory, new_store):
    """What `run --texts` printed, with its store active."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trained = trained_on_news(tmp_path_factory, new_store, "run", "--model", "bow",
                                  "--model", "bilstm", "--set", "hidden_units=8",
                                  "--set", "embed_dim=8", "--set", "units=4",
                                  "--set", "learning_rate=0.01")
        next(trained)
    yield printed.getvalue()
    trained.close()


def test_run_trains_each_family_stacks_them_and_says_which_run_to_use(leaderboard):
    trained = texts_runs()
    assert set(trained) == {"bow", "bilstm", "ensemble"}
    header = next(i for i, line in enumerate(leaderboard.splitlines()) if "macro-F1" in line)
    rows = [line.split() for line in leaderboard.splitlines()[header + 1:header + 4]]
    assert {row[0] for row in rows} == {"bow", "bilstm", "ensemble"}
    assert float(rows[0][1]) >= float(rows[1][1]) >= float(rows[2][1])  # by validation
    for model, validation, score, _, _, run_id in rows:
        run = trained[model]
        assert run.info.run_id == run_id
        assert run.data.metrics["test_macro_f1"] == pytest.approx(float(score), abs=1e-4)
        assert run.data.metrics.get("crossval_val_macro_f1", run.data.metrics.get(
            "best_val_macro_f1")) == pytest.approx(float(validation), abs=1e-4)
        assert json.loads(run.data.params["classes"]) == CLASSES
    best = rows[0]
    assert f"Use run {best[5]} ({best[0]}): the best validation macro-F1 of the 3 runs" \
        in leaderboard


def test_an_ensemble_of_the_classes_stacks_them_on_validation_and_answers_like_a_model(
        leaderboard, capsys):
    trained = texts_runs()
    run_id = workflow.ensemble([trained["bow"].info.run_id, trained["bilstm"].info.run_id])
    assert run_id == trained["ensemble"].info.run_id  # the run step's, found again
    run = mlflow.get_run(run_id)
    assert 0 <= run.data.metrics["crossval_val_macro_f1"] <= 1
    assert json.loads(run.data.params["classes"]) == CLASSES
    assert 0 <= run.data.metrics["best_val_macro_f1"] <= 1
    (answer,) = models.load_pyfunc(run).predict(["Gobierno радость éxito"])
    assert list(answer["probabilities"]) == CLASSES
    assert sum(answer["probabilities"].values()) == pytest.approx(1, abs=1e-5)
    metrics = workflow.evaluate(run_id)  # the members' test split, found again
    assert "Combining the 2 members' own answers" in capsys.readouterr().out  # not rescored
    model = models.load_pyfunc(run)
    texts = workflow.trained_on(run, workflow.source_of_run(run), None).texts("test")
    with np.load(mlflow.artifacts.download_artifacts(
            f"runs:/{run_id}/test_probabilities.npz")) as logged:
        scored = logged["probabilities"]
    rows = [[answer["probabilities"][name] for name in CLASSES]
            for answer in model.predict(texts)]
    assert scored == pytest.approx(np.array(rows), abs=2e-6)  # what the model answers
    assert "test_reviews_per_second" not in mlflow.get_run(run_id).data.metrics
    members = json.loads(mlflow.artifacts.load_text(
        f"runs:/{trained['bow'].info.run_id}/test_metrics.json"))
    assert np.sum(metrics["confusion_matrix"]) == np.sum(members["confusion_matrix"])
    weighted = workflow.ensemble([trained["bow"].info.run_id, trained["bilstm"].info.run_id],
                                 class_weight="balanced")
    assert weighted != run_id  # another fit, not the unweighted one reused
    assert mlflow.get_run(weighted).data.tags["ensemble_class_weight"] == "balanced"
    assert workflow.ensemble([trained["bow"].info.run_id, trained["bilstm"].info.run_id]) \
        == run_id  # the unweighted one, found again
    assert workflow.main(["ensemble", "--run-id", trained["bow"].info.run_id,
                          "--lexicon", "vader"]) == 2
    assert "--lexicon and --calibrate-on read English sentiment" in capsys.readouterr().err


def test_run_texts_by_default_trains_the_kit_s_families_and_says_why_not_the_encoder(
        tmp_path_factory, new_store, monkeypatch):
    monkeypatch.setattr(workflow, "encoder_missing", lambda *args: "offline in this test")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        trained = trained_on_news(tmp_path_factory, new_store, "run", "--max-train-minutes",
                                  "3", "--set", "hidden_units=8", "--set", "embed_dim=8",
                                  "--set", "units=4", "--set", "sentence_slices=0")
        next(trained)
        assert set(texts_runs()) == {"bow", "nbsvm", "bilstm", "ensemble"}
        trained.close()
    assert "Leaving out the pretrained encoder: offline in this test." in printed.getvalue()
    assert "the best validation macro-F1 of the 4 runs" in printed.getvalue()
