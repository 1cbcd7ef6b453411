"""A run's charts open on its scores: the operational metrics are logged under a prefix
the MLflow UI makes a section of, and read back by their plain names, from new runs
and from runs logged before the prefixes."""

import ast
from pathlib import Path

import mlflow
import pandas as pd
import pytest

from workflows.core import runs, tracking
from workflows.core.metric_groups import grouped, ungrouped, ungrouped_columns

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name, logged", [
    ("val_accuracy", "val_accuracy"), ("best_val_macro_f1", "best_val_macro_f1"),
    ("test_beam4_normalized_bleu", "test_beam4_normalized_bleu"), ("loss", "loss"),
    ("averaged_val_loss", "averaged_val_loss"), ("test_recall_at_100", "test_recall_at_100"),
    ("epoch_seconds", "timing/epoch_seconds"), ("train_minutes", "timing/train_minutes"),
    ("steady_examples_per_second", "timing/steady_examples_per_second"),
    ("mean_training_share", "timing/mean_training_share"),
    ("seconds_to_first_batch", "timing/seconds_to_first_batch"),
    ("test_greedy_ms_per_sentence", "timing/test_greedy_ms_per_sentence"),
    ("train_step_programs", "timing/train_step_programs"),
    ("texts_more_reviews_per_second", "timing/texts_more_reviews_per_second"),
    ("best_epoch", "training/best_epoch"), ("learning_rate", "training/learning_rate"),
    ("embedding_coverage", "data/embedding_coverage"),
    ("doc2vec_vocabulary_size", "data/doc2vec_vocabulary_size"),
    ("system/cpu_utilization_percentage", "system/cpu_utilization_percentage")])
def test_scores_keep_their_names_and_the_rest_go_under_a_section(name, logged):
    assert grouped({name: 1.0}) == {logged: 1.0}
    assert ungrouped({logged: 1.0}) == {name: 1.0}


def test_old_and_new_runs_read_alike_in_the_compare_table():
    frame = pd.DataFrame({"run_id": ["new", "old"],
                          "metrics.timing/train_minutes": [2.0, float("nan")],
                          "metrics.train_minutes": [float("nan"), 3.0],
                          "metrics.timing/mean_epoch_seconds": [4.0, float("nan")],
                          "metrics.system/cpu_utilization_percentage": [9.0, 9.0]})
    read = ungrouped_columns(frame)
    assert list(read["metrics.train_minutes"]) == [2.0, 3.0]
    assert list(read["metrics.mean_epoch_seconds"][:1]) == [4.0]
    assert "metrics.cpu_utilization_percentage" not in read


def test_a_logged_run_has_its_timings_apart_and_compare_reads_them(isolated_store, capsys):
    mlflow.set_experiment("grouped")
    with mlflow.start_run():
        tracking.log_metrics({"val_accuracy": 0.5, "epoch_seconds": 2.0, "best_epoch": 1})
    with mlflow.start_run():  # a run logged before the prefixes
        mlflow.log_metrics({"val_accuracy": 0.75, "epoch_seconds": 3.0})
    logged = [sorted(run.data.metrics) for run in
              mlflow.search_runs(experiment_names=["grouped"], output_format="list")]
    assert logged == [["epoch_seconds", "val_accuracy"],
                      ["timing/epoch_seconds", "training/best_epoch", "val_accuracy"]]
    rows = runs.runs_table("grouped", ("metrics.val_accuracy", "metrics.epoch_seconds"),
                           "metrics.val_accuracy")
    assert rows == [{"metrics.val_accuracy": "0.7500", "metrics.epoch_seconds": "3.0000"},
                    {"metrics.val_accuracy": "0.5000", "metrics.epoch_seconds": "2.0000"}]


def test_every_metric_is_logged_through_the_grouping():
    """No code of the kit logs a metric past `tracking.log_metrics` (which groups)."""
    direct = []
    for path in [*(ROOT / "workflows").rglob("*.py"), *(ROOT / "data_prep").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ("log_metric", "log_metrics") \
                    and getattr(node.value, "id", None) == "mlflow":
                direct.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert [place.split(":")[0] for place in direct] == ["workflows/core/tracking.py"], direct
