"""The `tune` step on the tiny IMDB tree: spaces, workers, pruning, resuming, the parent run."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import optuna
import pytest

from tests.workflows.conftest import COMMON
from tests.workflows.interrupts import stop_once_at
from workflows import imdb_sentiment as workflow
from workflows.core import tuning, tuning_space
from workflows.core.config import ConfigError
from workflows.core.tuning_space import check_space, parse_space

CATALOG = workflow.CATALOG

SPACE = ["--space", "learning_rate=loguniform:1e-4:3e-2", "--space", "hidden_units=int:2:6"]


def tune_argv(seed, *extra):
    return ["tune", "--model", "bow", *COMMON, "--set", f"seed={seed}", *SPACE, *extra]


def experiment_runs():
    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    return mlflow.search_runs([experiment.experiment_id], output_format="list") \
        if experiment else []


def parent_and_children():
    runs = experiment_runs()
    (parent,) = [run for run in runs if run.data.tags.get("tune") == "true"]
    return parent, [run for run in runs if run is not parent]


def load_study(tmp_path):
    (name,) = optuna.get_all_study_names(f"sqlite:///{tmp_path / 'mlflow.optuna.db'}")
    return optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 'mlflow.optuna.db'}")


@pytest.mark.parametrize("space, message", [
    (["--space", "hidden_unit=int:2:6"], "not a tunable field of bow"),
    (["--space", "dropout=uniform:0.1:1.0"], "dropout must be less than 1"),
    (["--space", "hidden_units=uniform:2:6"], "use int, logint or choice"),
    (["--space", "learning_rate=loguniform:0:1e-2"], "must be positive"),
    (["--space", "learning_rate=normal:0:1"], "KIND one of"),
    (["--space", "epochs=int:1:100000000000"], "epochs must be at most 10000"),
    (["--space", "output_mode=choice:tf_idf,bag"], "'bag' is not a valid value"),
    (["--space", "embed_dim=int:8:16"], "not a tunable field"),
    (["--space", "distribution=choice:none,mirrored"], "not a tunable field"),
    (["--space", "hidden_units=int:2:6", "--space", "hidden_units=int:3:4"], "more than once"),
    ([], "Give the space to explore"),
    ([*SPACE, "--metric", "test_accuracy"], "must be a validation metric"),
])
def test_a_bad_space_is_refused_before_any_run(own_store, capsys, space, message):
    argv = ["tune", "--model", "bow", *COMMON, *space]
    assert workflow.main(argv) == 2
    error = capsys.readouterr().err
    assert message in error and len(error.strip().splitlines()) == 1
    assert experiment_runs() == [] and not (own_store / "mlflow.optuna.db").exists()


def test_space_texts_and_yaml_choices_parse_to_typed_dimensions():
    config = CATALOG.make("bow")
    space = check_space(parse_space({"hidden_units": [8, 16], "dropout": "uniform:0.1:0.5",
                                     "max_tokens": "int:100:1000:100"}), config)
    assert space[0].choices == (8, 16) and all(type(c) is int for c in space[0].choices)
    assert [d.text() for d in space] == ["hidden_units=choice:8,16", "dropout=uniform:0.1:0.5",
                                         "max_tokens=int:100:1000:100"]
    with pytest.raises(ConfigError, match="only int ranges take one"):
        parse_space(["max_tokens=logint:100:1000:10"])


def test_a_grid_takes_choices_only_and_no_more_trials_than_combinations():
    config = CATALOG.make("bow")
    grid = tuning_space.make_settings(config, ["hidden_units=choice:2,3,4",
                                               "dropout=choice:0.1,0.2"], trials=50,
                                      sampler="grid")
    assert grid.trials == 6 == tuning_space.grid_points(grid)
    with pytest.raises(ConfigError, match="grid takes choice dimensions only"):
        tuning_space.make_settings(config, ["dropout=uniform:0.1:0.5"], sampler="grid")


@pytest.mark.integration
def test_a_tune_block_in_the_yaml_config_is_read_and_train_ignores_it(own_store, tmp_path):
    config = tmp_path / "tune.yaml"
    config.write_text("hidden_units: 3\ntune:\n  trials: 2\n  metric: val_accuracy\n"
                      "  pruner: none\n  space:\n    learning_rate: loguniform:1e-3:3e-2\n")
    argv = ["tune", "--model", "bow", *COMMON, "--set", "seed=21", "--config", str(config)]
    assert workflow.main(argv) == 0
    parent, children = parent_and_children()
    assert len(children) == 2 and parent.data.params["metric"] == "val_accuracy"
    assert {child.data.params["hidden_units"] for child in children} == {"3"}
    assert workflow.main(["train", "--model", "bow", *COMMON, "--config", str(config),
                          "--epochs", "1"]) == 0


@pytest.mark.integration
def test_two_workers_share_one_study_and_each_trial_is_a_child_run(own_store, capsys):
    argv = tune_argv(31, "--trials", "4", "--workers", "2", "--pruner", "none",
                       "--metric", "val_accuracy")
    assert workflow.main(argv) == 0
    parent, children = parent_and_children()
    study = load_study(own_store)
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 4 and len(children) == 4 and parent.info.status == "FINISHED"
    assert all(c.data.tags["mlflow.parentRunId"] == parent.info.run_id for c in children)
    assert {t.user_attrs["mlflow_run_id"] for t in trials} == {c.info.run_id for c in children}
    assert parent.data.tags["best_child_run_id"] == study.best_trial.user_attrs["mlflow_run_id"]
    assert parent.data.metrics["best_val_accuracy"] == study.best_value
    best = mlflow.MlflowClient().get_run(parent.data.tags["best_child_run_id"])
    assert best.data.metrics["best_val_accuracy"] == study.best_value
    artifacts = {a.path for a in mlflow.MlflowClient().list_artifacts(parent.info.run_id)}
    assert {"optimization_history.png", "param_importances.png", "trials.json",
            "best_params.json"} <= artifacts
    logs = list((Path(os.environ["NLPKIT_WORK_DIR"]) / "tuning").glob("*/worker-*.log"))
    assert len({log.name for log in logs}) >= 2
    assert "4 complete, 0 pruned, 0 failed" in capsys.readouterr().out
    # rerunning continues the study: nothing left to do, and `register` takes the parent
    assert workflow.main(argv) == 0 and len(parent_and_children()[1]) == 4
    assert workflow.main(["register", "tuned-best", "--run-id", parent.info.run_id[:12]]) == 0
    registered = mlflow.MlflowClient().get_model_version("tuned-best", "1")
    assert registered.run_id == study.best_trial.user_attrs["mlflow_run_id"]


@pytest.mark.integration
def test_the_pruner_stops_a_trial_forced_to_be_poor(own_store):
    argv = tune_argv(41, "--trials", "2", "--prune-after-trials", "1", "--epochs", "4",
                       "--set", "patience=4", "--metric", "val_loss")
    settings = tuning_space.make_settings(CATALOG.make("bow", overrides={
        "max_tokens": 300, "batch_size": 8, "seed": 41, "epochs": 4, "patience": 4}),
        SPACE[1::2], metric="val_loss")
    storage = tuning.open_storage(f"sqlite:///{own_store / 'mlflow.optuna.db'}")
    study, _ = tuning.open_study(workflow.LESSON, CATALOG.make("bow", overrides={
        "max_tokens": 300, "batch_size": 8, "seed": 41, "epochs": 4, "patience": 4}),
        settings, storage, "forced")
    study.enqueue_trial({"learning_rate": 0.03, "hidden_units": 4})
    study.enqueue_trial({"learning_rate": 1e-4, "hidden_units": 4})  # learns nothing in an epoch
    assert workflow.main([*argv, "--study", "forced"]) == 0
    good, poor = study.get_trials()
    assert good.state.name == "COMPLETE" and good.last_step == 4
    assert poor.state.name == "PRUNED" and poor.last_step == 1
    poor_run = mlflow.MlflowClient().get_run(poor.user_attrs["mlflow_run_id"])
    assert poor_run.info.status == "KILLED" and poor_run.data.tags["trial_state"] == "PRUNED"
    parent, _ = parent_and_children()
    assert parent.data.metrics["trials_pruned"] == 1


@pytest.mark.integration
def test_a_killed_workers_trial_is_queued_again_and_its_run_resumes(own_store, monkeypatch):
    argv = tune_argv(51, "--trials", "1", "--epochs", "40", "--set", "patience=40",
                       "--pruner", "none", "--study", "killed")
    worker = subprocess.Popen([sys.executable, "-m", "workflows.imdb_sentiment", *argv],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              env=dict(os.environ))
    try:
        study = wait_for_a_reported_epoch(own_store, worker)
    finally:
        worker.send_signal(signal.SIGKILL)
        worker.wait()
    (killed,) = study.get_trials()
    assert killed.state.name == "RUNNING"
    monkeypatch.setattr(tuning, "GRACE_SECONDS", 1)
    time.sleep(2)
    assert workflow.main(argv) == 0
    killed, retried = study.get_trials()
    assert killed.state.name == "FAIL" and retried.state.name == "COMPLETE"
    assert retried.params == killed.params
    run_id = killed.user_attrs["mlflow_run_id"]
    assert retried.user_attrs["mlflow_run_id"] == run_id  # the same run, resumed
    history = mlflow.MlflowClient().get_metric_history(run_id, "val_loss")
    assert sorted(point.step for point in history) == list(range(1, 41))


@pytest.mark.integration
def test_a_stopped_trial_is_counted_stopped_not_failed_and_the_rerun_finishes_it(
        own_store, monkeypatch, capsys):
    argv = tune_argv(61, "--trials", "1", "--epochs", "2", "--pruner", "none",
                     "--set", "checkpoint_every_steps=1")
    stop_once_at(monkeypatch, epoch=1, step=2)
    with pytest.raises(KeyboardInterrupt):
        workflow.main(argv)
    assert "0 complete, 0 pruned, 0 failed trials, 1 stopped and queued again in" \
        in capsys.readouterr().out
    parent, _ = parent_and_children()
    assert parent.info.status == "KILLED" and parent.data.metrics["trials_stopped"] == 1 \
        and parent.data.metrics["trials_fail"] == 0
    assert workflow.main(argv) == 0
    assert "1 complete, 0 pruned, 0 failed trials, 1 stopped and queued again in" \
        in capsys.readouterr().out
    stopped, finished = load_study(own_store).get_trials()
    assert (stopped.user_attrs["stopped"], finished.state.name) == (True, "COMPLETE")
    assert finished.params == stopped.params and finished.user_attrs["mlflow_run_id"] \
        == stopped.user_attrs["mlflow_run_id"]  # the same run, resumed

def wait_for_a_reported_epoch(folder, process, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and process.poll() is None:
        if (folder / "mlflow.optuna.db").exists():
            try:
                # open_storage, as the worker does: the tables are created under its lock
                study = optuna.load_study(study_name="killed", storage=tuning.open_storage(
                    f"sqlite:///{folder / 'mlflow.optuna.db'}"))
            except KeyError:
                study = None
            if study and any(t.intermediate_values for t in study.get_trials()):
                return study
        time.sleep(0.1)
    pytest.fail("the worker reported no epoch")


WORKER_SLOW_TO_STOP = """
import signal, sys, time

def stop(*_):
    time.sleep(2)  # a trial's checkpoint that outlasts the parent's own grace period
    print("stopped", flush=True)
    sys.exit(130)

signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(600)
"""

TUNE_WITH_SLOW_WORKERS = """
import sys
from process.commands import run_main
from workflows import imdb_sentiment as workflow
from workflows.core import tuning, tuning_space

def main(argv):
    config = workflow.CATALOG.make("bow")
    settings = tuning_space.make_settings(config, ["hidden_units=int:2:6"], workers=2)
    tuning.tune(workflow.LESSON, config, settings, None,
                worker_command=[sys.executable, "-c", sys.argv[1]])

run_main(main)
"""


@pytest.mark.integration
def test_a_stopped_tune_waits_for_its_workers_then_marks_its_run_killed(tmp_path, new_store):
    # each worker takes 2 s to stop, the parent's grace period is 1 s: the parent's
    # forced stop must come after its workers' ends (or their kill) and its run's summary
    environment = {**os.environ, "NLPKIT_STOP_GRACE_SECONDS": "1",
                   "NLPKIT_WORK_DIR": str(tmp_path / "work"),
                   "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
    parent = subprocess.Popen([sys.executable, "-c", TUNE_WITH_SLOW_WORKERS,
                               WORKER_SLOW_TO_STOP], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=environment)
    for line in parent.stdout:
        if line.startswith("Started 2 workers"):
            break
    logs = sorted((tmp_path / "work" / "tuning").glob("*/worker-*.log"))
    deadline = time.monotonic() + 60
    while not all(log.read_text() == "ready\n" for log in logs) \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    parent.send_signal(signal.SIGTERM)
    _, errors = parent.communicate(timeout=60)
    assert (parent.returncode, errors.strip()) == (130, "Interrupted."), errors
    # each worker ended, or was killed 2 s after its signal (its grace period and 1 s)
    assert all(log.read_text() in ("ready\n", "ready\nstopped\n") for log in logs)
    mlflow.set_tracking_uri(environment["MLFLOW_TRACKING_URI"])
    (study_run,) = mlflow.search_runs(search_all_experiments=True, output_format="list")
    assert study_run.info.status == "KILLED" and study_run.data.tags["tune"] == "true"


def test_a_study_of_other_texts_is_another_study():
    """The data flags (a user's texts) are part of a study's spec and default name: a
    tune of the same config on another file never joins the IMDB study's trials."""
    import dataclasses

    config = CATALOG.make("bow")
    imdb = tuning_space.make_settings(config, ["learning_rate=loguniform:1e-4:1e-2"],
                                      trials=2)
    texts = dataclasses.replace(imdb, data=(("texts", "/data/news.csv"),))
    assert "data" not in imdb.spec() and texts.spec()["data"] == {"texts": "/data/news.csv"}
    names = {tuning.default_study_name(workflow.LESSON, config, settings)
             for settings in (imdb, texts)}
    assert len(names) == 2
