"""The classification lesson on a user's labelled texts: three classes in two scripts,
end to end (prepare, train, evaluate, predict, the logged model), and two classes of
the user's own labels; `run --texts` in test_text_classes_run.py."""

import json
import os

import mlflow
import numpy as np
import pytest

from tests.data_prep.test_text_classes import news, write_tsv
from workflows import imdb_sentiment as workflow
from workflows.core import models, runs
from workflows.sentiment import token_ids
from workflows.sentiment.calibration import Calibration
from workflows.sentiment.sources import source_of

TINY = ["--epochs", "2", "--set", "max_tokens=300", "--set", "batch_size=8"]
CLASSES = ["negativo", "neutral", "positivo"]


def trained_on_news(tmp_path_factory, new_store, *argv):
    """Runs `argv` on 240 generated news items (neutral over half), in a store of its
    own; yields the file and the environment's patch."""
    root = tmp_path_factory.mktemp("texts_workflow")
    path = root / "news.tsv"
    write_tsv(path, news(240), header="titular\tsentimiento")
    environment = {"NLPKIT_WORK_DIR": str(root / "work"),
                   "MLFLOW_TRACKING_URI": new_store(root / "mlflow.db")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        mlflow.set_tracking_uri(environment["MLFLOW_TRACKING_URI"])
        assert workflow.main([argv[0], "--texts", str(path), "--text-column", "titular",
                              "--label-column", "sentimiento", *argv[1:], *TINY]) == 0
        yield path, patch


@pytest.fixture(scope="module")
def texts_store(tmp_path_factory, new_store):
    """The bag of bigrams trained by `train --texts`, then evaluated."""
    trained = trained_on_news(tmp_path_factory, new_store, "train", "--model", "bow",
                              "--set", "hidden_units=8", "--set", "learning_rate=0.01")
    found = next(trained)
    run_id = runs.model_run(workflow.LESSON).info.run_id
    assert workflow.main(["evaluate", "--run-id", run_id]) == 0
    yield found
    trained.close()


def texts_runs():
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    found = mlflow.search_runs([experiment.experiment_id], output_format="list",
                               order_by=["attributes.start_time ASC"])
    return {run.data.params["model"]: run for run in found}


def test_a_run_of_the_classes_logs_them_and_their_measures(texts_store):
    (run,) = texts_runs().values()
    assert json.loads(run.data.params["classes"]) == CLASSES
    assert run.data.params["texts"].endswith("news.tsv")
    for name in ("accuracy", "macro_f1", "micro_f1", "weighted_f1", "f1_neutral",
                 "precision_negativo", "recall_positivo", "expected_calibration_error"):
        assert 0 <= run.data.metrics[f"test_{name}"] <= 1, name
    matrix = json.loads(mlflow.artifacts.load_text(
        f"runs:/{run.info.run_id}/test_metrics.json"))["confusion_matrix"]
    assert np.array(matrix).shape == (3, 3)
    assert np.trace(matrix) / np.sum(matrix) == pytest.approx(run.data.metrics["test_accuracy"])
    wrong = json.loads(mlflow.artifacts.load_text(
        f"runs:/{run.info.run_id}/test_confidently_wrong.json"))
    labels = [row[wrong["columns"].index("label")] for row in wrong["data"]]
    assert set(labels) <= set(CLASSES)


def test_bow_learns_the_classes_words(texts_store):
    assert texts_runs()["bow"].data.metrics["test_macro_f1"] > 0.6


def test_the_logged_model_answers_a_label_and_every_class_probability(texts_store, capsys):
    run = texts_runs()["bow"]
    answers = models.load_pyfunc(run).predict(["Gobierno радость éxito", "reunión отчёт"])
    for answer in answers:
        assert answer["label"] in CLASSES
        assert list(answer["probabilities"]) == CLASSES
        assert sum(answer["probabilities"].values()) == pytest.approx(1, abs=1e-5)
        assert answer["label"] == max(answer["probabilities"], key=answer["probabilities"].get)
    workflow.predict(["Gobierno радость éxito"], run.info.run_id)
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.split()[0] in CLASSES and "Gobierno радость éxito" in line


def test_the_docs_block_of_a_classes_model_runs_on_one(texts_store):
    from tests.test_docs import doc_blocks, run_block

    (block,) = doc_blocks("docs/imdb_sentiment.md", "probabilities")
    run_block(block, texts_runs()["bow"].info.run_id)


def test_calibration_is_fitted_on_validation_and_softens_without_reordering(texts_store):
    run = texts_runs()["bow"]
    model = models.load_pyfunc(run).unwrap_python_model()
    assert model.calibration.slope > 0 and len(model.calibration.bias) == len(CLASSES)
    rows = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3]])
    softer = Calibration(0.5)
    assert softer.apply(rows)[0, 0] < 0.7 and softer.apply(rows).argmax(1).tolist() == [0, 1]
    assert softer.undo(softer.apply(rows)) == pytest.approx(rows)


def test_evaluate_scores_a_file_of_the_classes_and_refuses_unknown_labels(
        texts_store, tmp_path, capsys):
    run_id = texts_runs()["bow"].info.run_id
    held_out = write_tsv(tmp_path / "more.tsv", news(30, seed=7))
    metrics = workflow.evaluate(run_id, texts_file=held_out)
    assert 0 <= metrics["macro_f1"] <= 1
    assert "texts_more_macro_f1" in mlflow.get_run(run_id).data.metrics
    odd = write_tsv(tmp_path / "odd.tsv", [("Nada", "otro"), ("Algo", "neutral")])
    assert workflow.main(["evaluate", "--run-id", run_id, "--texts", str(odd)]) == 2
    assert "labels the model does not know (otro)" in capsys.readouterr().err


def test_a_changed_training_file_is_not_taken_for_the_run_s_test_split(texts_store, capsys):
    path, _ = texts_store
    run_id = texts_runs()["bow"].info.run_id
    original = path.read_text(encoding="utf-8")
    try:
        path.write_text(original + "Nueva línea\tneutral\n", encoding="utf-8")
        assert workflow.main(["evaluate", "--run-id", run_id]) == 2
        assert "changed since run" in capsys.readouterr().err
    finally:
        path.write_text(original, encoding="utf-8")


def test_round_trip_augmentation_of_a_user_s_texts_is_one_line_before_anything_loads(
        texts_store, capsys):
    path, _ = texts_store
    assert workflow.main(["train", "--texts", str(path), "--text-column", "titular",
                          "--label-column", "sentimiento", "--model", "bow", "--augment",
                          "round_trip"]) == 2
    assert "for your own texts use --augment edit" in capsys.readouterr().err


def test_balanced_class_weights_weigh_each_class_alike(texts_store):
    path, _ = texts_store
    source = source_of({"texts": str(path), "text_column": "titular",
                        "label_column": "sentimiento"})
    config = workflow.CATALOG.make("bilstm", None, {"class_weight": "balanced"})
    data = workflow.load_data(config, source)
    model = workflow.family("bilstm").build_model(config, 300, classes=3)
    trainable = token_ids.trainable(config, data.prepared, model, bucketing=True)
    counts = np.bincount(data.prepared.labels("train"))
    assert counts.max() > 2 * counts.min()  # imbalanced
    expected = counts.sum() / (3 * counts)  # so each class weighs n / 3 in all
    for batch in trainable.train_batches(1):
        _, batch_labels, weights = (np.asarray(part) for part in batch)
        real = weights > 0  # (rows that top up a batch weigh 0)
        assert weights[real] == pytest.approx(expected[batch_labels[real]], rel=1e-6)


@pytest.mark.integration
def test_the_monitored_macro_f1_chooses_the_best_epoch(texts_store):
    path, _ = texts_store
    assert workflow.main(["train", "--texts", str(path), "--text-column", "titular",
                          "--label-column", "sentimiento", "--model", "bow", *TINY,
                          "--epochs", "4", "--set", "patience=4", "--set", "hidden_units=3",
                          "--set", "monitor=val_macro_f1"]) == 0
    run = runs.model_run(workflow.LESSON)
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val_macro_f1")
    scores = [metric.value for metric in sorted(history, key=lambda metric: metric.step)]
    assert len(scores) == 4
    assert run.data.metrics["best_epoch"] == 1 + int(np.argmax(scores))


@pytest.mark.integration
def test_two_classes_of_a_user_s_labels_answer_with_their_names(
        texts_store, tmp_path, capsys):
    rows = [(text, "spam" if label == "positivo" else "ham") for text, label in news(120, 3)]
    path = write_tsv(tmp_path / "mail.tsv", rows)
    assert workflow.main(["train", "--texts", str(path), "--model", "nbsvm", *TINY]) == 0
    run = runs.model_run(workflow.LESSON)
    assert json.loads(run.data.params["classes"]) == ["ham", "spam"]
    (answer,) = models.load_pyfunc(run).predict(["Gobierno радость éxito"])
    assert set(answer["probabilities"]) == {"ham", "spam"} and answer["label"] in ("ham", "spam")
    metrics = workflow.evaluate(run.info.run_id)
    assert {"roc_auc", "macro_f1", "f1_spam", "f1_ham"} <= set(metrics)


def test_stacking_weights_of_several_classes_favour_the_informative_member():
    from workflows.sentiment.ensemble import combine, fit_weights

    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, 300)
    informative = np.full((300, 3), 0.1)
    informative[np.arange(300), labels] = 0.8
    noise = rng.dirichlet(np.ones(3), 300)
    stacked = np.stack([noise, informative], axis=1)
    weights, bias = fit_weights(stacked, labels)
    combined = combine(stacked, weights, bias)
    assert np.mean(combined.argmax(1) == labels) == 1.0
    weights = np.abs(np.array(weights))
    assert weights[3:].sum() > 3 * weights[:3].sum()  # the second member's rows


def test_balanced_stacking_finds_more_of_a_rare_class():
    from workflows.sentiment.ensemble import combine, fit_weights
    from workflows.sentiment.family import weights_of_classes

    rng = np.random.default_rng(1)
    labels = rng.choice(3, 2000, p=[0.6, 0.35, 0.05])
    member = rng.dirichlet(np.ones(3), 2000) + 0.6 * np.eye(3)[labels]  # a weak member
    stacked = np.stack([member / member.sum(1, keepdims=True)] * 2, axis=1)
    found = {}
    for kind in ("none", "balanced"):
        fitted = fit_weights(stacked, labels,
                             label_weights=weights_of_classes(kind, labels, 3))
        predicted = combine(stacked, *fitted).argmax(1)
        found[kind] = np.mean(predicted[labels == 2] == 2)
    assert found["balanced"] > found["none"] + 0.2


def test_an_ensemble_reads_english_sentiment_only_beside_imdbs_classes():
    from types import SimpleNamespace

    from workflows.core.config import ConfigError
    from workflows.sentiment.ensemble_run import members_classes

    def run(**params):
        return SimpleNamespace(data=SimpleNamespace(params=params))

    imdb_run = run()  # (runs before the classes were logged)
    assert members_classes([imdb_run, run(classes='["negative", "positive"]')], "vader",
                           None) == ["negative", "positive"]
    spam = run(texts="spam.csv", classes='["ham", "spam"]')
    assert members_classes([spam, spam], "none", None) == ["ham", "spam"]
    with pytest.raises(ConfigError, match="--lexicon and --calibrate-on read English"):
        members_classes([spam], "vader", None)
    with pytest.raises(ConfigError, match="different texts or classes"):
        members_classes([spam, imdb_run], "none", None)


def test_square_root_weights_lie_between_none_and_balanced():
    from types import SimpleNamespace

    from workflows.sentiment.family import class_weights

    labels = [0] * 80 + [1] * 15 + [2] * 5
    weights = {kind: class_weights(SimpleNamespace(class_weight=kind), labels, "abc")
               for kind in ("none", "balanced", "sqrt_balanced")}
    assert weights["sqrt_balanced"] == pytest.approx(np.sqrt(weights["balanced"]))
    assert (weights["none"] == 1).all()
    assert weights["sqrt_balanced"][2] < weights["balanced"][2]


def test_a_leaderboards_budgets_leave_room_for_the_last_evaluation():
    budgets = [workflow.leaderboard_budget(15, index, 3, [30.0, 90.0][:index])
               for index in range(3)]
    assert budgets == [4.5, 9.333, 12.0]  # 1.5 min held back, then 2 x 30 s, 2 x 90 s
    assert workflow.leaderboard_budget(1, 0, 1, [600.0]) == 0.05  # never nothing
    ensembled = [workflow.leaderboard_budget(15, index, 3, [30.0, 90.0][:index], True)
                 for index in range(3)]  # and then their ensemble: scored again
    assert ensembled == [4.0, 8.083, 5.75]  # 3 min, then 1 + 1.25 x 1.5, 3 + 1.25 x 5 held back


def test_run_texts_adds_the_pretrained_encoder_when_the_budget_allows_it():
    from workflows.sentiment.user_texts import encoder_epoch_minutes, leaderboard_models

    short = ["a short labelled sentence of eight words here"] * 1500
    reviews = [" ".join(["word"] * 230)] * 1500
    assert encoder_epoch_minutes(short) < 0.5 < 2 < encoder_epoch_minutes(reviews)
    ready = lambda: None  # noqa: E731
    assert leaderboard_models(short, None, ready) == (["bow", "nbsvm", "bilstm", "encoder"],
                                                      None)
    assert leaderboard_models(short, 2, ready)[0][-1] == "encoder"
    models, why = leaderboard_models(reviews, 2, ready)
    assert models == ["bow", "nbsvm", "bilstm"] and "more than half of --max-train-minutes 2" \
        in why
    assert leaderboard_models(short, None, lambda: "offline") == (["bow", "nbsvm", "bilstm"],
                                                                  "offline")


def test_the_leaderboard_says_to_use_the_best_validation_score_not_the_best_test_score(
        capsys):
    from workflows.sentiment.user_texts import print_leaderboard

    board = [("bow", {"macro_f1": 0.9, "accuracy": 0.9}, 0.1, "r1", 0.70),
             ("encoder", {"macro_f1": 0.8, "accuracy": 0.8}, 2.5, "r2", 0.85),
             ("ensemble", {"macro_f1": 0.85, "accuracy": 0.85}, 0.2, "r3", 0.80)]
    assert print_leaderboard(board) == "r2"
    printed = capsys.readouterr().out
    assert "Use run r2 (encoder): the best validation macro-F1 of the 3 runs, 0.8500 (2.5 " \
        "minutes; test macro-F1 0.8000)" in printed
    assert [line.split()[0] for line in printed.splitlines()[2:5]] == ["encoder", "ensemble",
                                                                     "bow"]


def test_an_ensembles_crossvalidated_score_is_of_texts_its_stacking_did_not_see():
    from workflows.sentiment.ensemble import crossval_predictions

    rng = np.random.default_rng(0)
    labels = np.arange(200) % 2
    noise = rng.dirichlet([1, 1], size=(200, 2))  # members that know nothing
    predicted = crossval_predictions(noise, labels)
    assert predicted.shape == (200, 2) and np.allclose(predicted.sum(axis=1), 1)
    assert abs(np.mean(predicted.argmax(axis=1) == labels) - 0.5) < 0.12  # no better than chance
