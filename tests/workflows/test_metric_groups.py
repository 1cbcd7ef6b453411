"""A run's charts open on its scores: its timings are logged under `system/`, which the
MLflow UI shows after the metrics without a prefix, and are read back by their plain
names, from new runs and from runs logged before they moved."""

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
    ("best_epoch", "best_epoch"), ("learning_rate", "learning_rate"),
    ("embedding_coverage", "embedding_coverage"),
    ("epoch_seconds", "system/epoch_seconds"), ("train_minutes", "system/train_minutes"),
    ("steady_examples_per_second", "system/steady_examples_per_second"),
    ("mean_training_share", "system/mean_training_share"),
    ("seconds_to_first_batch", "system/seconds_to_first_batch"),
    ("test_greedy_ms_per_sentence", "system/test_greedy_ms_per_sentence"),
    ("train_step_programs", "system/train_step_programs"),
    ("texts_more_reviews_per_second", "system/texts_more_reviews_per_second"),
    ("system/cpu_utilization_percentage", "system/cpu_utilization_percentage")])
def test_scores_keep_their_names_and_timings_go_beside_the_machines_samples(name, logged):
    assert grouped({name: 1.0}) == {logged: 1.0}
    assert ungrouped({logged: 1.0}) == {name: 1.0}


def test_old_and_new_runs_read_alike_in_the_compare_table():
    frame = pd.DataFrame({"run_id": ["new", "old"],
                          "metrics.system/train_minutes": [2.0, float("nan")],
                          "metrics.train_minutes": [float("nan"), 3.0],
                          "metrics.system/mean_epoch_seconds": [4.0, float("nan")],
                          "metrics.system/cpu_utilization_percentage": [9.0, 9.0]})
    read = ungrouped_columns(frame)
    assert list(read["metrics.train_minutes"]) == [2.0, 3.0]
    assert list(read["metrics.mean_epoch_seconds"][:1]) == [4.0]
    assert "metrics.cpu_utilization_percentage" not in read  # MLflow's own sample


def test_a_logged_run_has_its_timings_apart_and_compare_reads_them(isolated_store):
    mlflow.set_experiment("grouped")
    with mlflow.start_run():
        tracking.log_metrics({"val_accuracy": 0.5, "epoch_seconds": 2.0, "best_epoch": 1})
    with mlflow.start_run():  # a run logged before the timings moved
        mlflow.log_metrics({"val_accuracy": 0.75, "epoch_seconds": 3.0})
    logged = [sorted(run.data.metrics) for run in
              mlflow.search_runs(experiment_names=["grouped"], output_format="list")]
    assert logged == [["epoch_seconds", "val_accuracy"],
                      ["best_epoch", "system/epoch_seconds", "val_accuracy"]]
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
