"""Crashes at the worst moments never lose an epoch's metrics, a checkpoint or a run."""

import os
from pathlib import Path

import mlflow
import numpy as np
import pytest

from tests.workflows.conftest import BOW, COMMON
from tests.workflows.test_training import epoch_dataset, small_model
from workflows import imdb_sentiment as workflow
from workflows.core.checkpoints import TrainingFolder
from workflows.core.fitting import Checkpointing, fit_resumably
from workflows.core.stopping import Stopping


def metric_steps(run_id, name):
    return [m.step for m in mlflow.MlflowClient().get_metric_history(run_id, name)]


def store_fails_at_epoch_two(monkeypatch):
    """Logging epoch 2's metrics fails once, as a store that stopped answering would."""
    log_metrics = mlflow.log_metrics

    def unreachable_at_epoch_two(metrics, step=None, **kwargs):
        if step == 2:
            monkeypatch.setattr(mlflow, "log_metrics", log_metrics)
            raise ConnectionError("tracking server unreachable")
        return log_metrics(metrics, step=step, **kwargs)

    monkeypatch.setattr(mlflow, "log_metrics", unreachable_at_epoch_two)


@pytest.mark.integration  # a crash and its resume
def test_metrics_of_an_epoch_checkpointed_before_a_crash_are_logged_on_resume(
        own_store, monkeypatch):
    store_fails_at_epoch_two(monkeypatch)
    argv = ["train", "--model", "bow", *COMMON, *BOW, "--epochs", "3", "--set", "hidden_units=6"]
    with pytest.raises(ConnectionError):
        workflow.main(argv)
    assert workflow.main(argv) == 0
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (run,) = mlflow.search_runs([experiment.experiment_id], output_format="list")
    for name in ("loss", "val_loss", "val_accuracy", "learning_rate"):
        assert metric_steps(run.info.run_id, name) == [1, 2, 3], name  # complete, no repeats


@pytest.mark.integration
def test_a_run_whose_checkpoints_are_all_damaged_starts_over_as_a_new_run(
        own_store, monkeypatch, capsys):
    store_fails_at_epoch_two(monkeypatch)
    argv = ["train", "--model", "bow", *COMMON, *BOW, "--epochs", "2", "--set", "hidden_units=5"]
    with pytest.raises(ConnectionError):
        workflow.main(argv)
    (folder,) = [path.parent for path in Path(os.environ["NLPKIT_WORK_DIR"]).glob(
        "runs/imdb_sentiment/bow-*/state.json")]
    for checkpoint in folder.glob("checkpoint-*"):
        checkpoint.write_bytes(checkpoint.read_bytes()[:100])  # every checkpoint truncated
    previous = folder / "state.previous.json"
    previous.write_text(previous.read_text()[:20])  # and the state before cut short
    assert workflow.main(argv) == 0 and workflow.main(argv) == 0  # no traceback, ever
    assert "training again from the first epoch as a new run" in capsys.readouterr().out
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    old, new = sorted(mlflow.search_runs([experiment.experiment_id], output_format="list"),
                      key=lambda run: run.info.start_time)
    assert (old.info.status, new.info.status) == ("FAILED", "FINISHED")
    assert metric_steps(new.info.run_id, "loss") == [1, 2]  # each epoch logged once


def test_ctrl_c_during_a_checkpoint_save_still_saves_a_checkpoint(tmp_path, monkeypatch):
    model = small_model()
    savez, held = np.savez, []

    def interrupted_save(file, *arrays):
        if not held:  # the first save is cut short with its file still open
            held.append(file)
            raise KeyboardInterrupt
        return savez(file, *arrays)

    monkeypatch.setattr(np, "savez", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        fit_resumably(model, epoch_dataset, epoch_dataset(99), tmp_path, Stopping(2, patience=9),
                      checkpointing=Checkpointing(every_steps=3), verbose=0)
    state = TrainingFolder(tmp_path).load_state()
    assert (state.epoch, state.step) == (0, 3) and (tmp_path / state.checkpoint).exists()
    monkeypatch.setattr(np, "savez", savez)
    resumed = fit_resumably(small_model(), epoch_dataset, epoch_dataset(99), tmp_path,
                            Stopping(2, patience=9), verbose=0)
    assert len(resumed.history) == 2


def test_a_second_training_of_one_config_waits_for_the_first_and_reuses_its_run(store,
                                                                               capsys):
    import threading
    import time

    from workflows.core import training

    argv = ["train", "--model", "bow", *COMMON, *BOW]
    (config,) = workflow.CLI.configs(workflow.CLI.parser.parse_args(argv))
    folder = training.run_folder(workflow.LESSON, config, workflow.load_data(config).fingerprint)
    held, release = threading.Event(), threading.Event()

    def other_trainer():  # holds the run folder as another process would
        with training.training_lock(folder):
            held.set()
            release.wait(timeout=60)

    thread = threading.Thread(target=other_trainer)
    thread.start()
    held.wait(timeout=60)
    threading.Timer(1.0, release.set).start()
    started = time.monotonic()
    assert workflow.main(argv) == 0
    thread.join()
    output = capsys.readouterr().out
    assert "Another process is training this exact config" in output
    assert "already trained" in output and time.monotonic() - started >= 1.0


def test_a_model_whose_stored_files_changed_is_refused_before_any_of_its_code_runs(
        own_store, tmp_path, monkeypatch, capsys):
    from workflows import serve_model

    assert workflow.main(["train", "--model", "bow", *COMMON, *BOW, "--epochs", "1",
                          "--set", "hidden_units=7"]) == 0
    assert workflow.main(["predict", "Fine."]) == 0  # verified and loaded
    (stored,) = [path for path in (tmp_path / "artifacts").rglob("pyfunc.py")
                 if "code" not in path.parts]  # the logged model's own code
    marker = tmp_path / "code-ran"
    with open(stored, "a") as file:
        file.write(f"\nopen({str(marker)!r}, 'w').close()\n")
    capsys.readouterr()
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (run,) = mlflow.search_runs([experiment.experiment_id], output_format="list")
    for step in (lambda: workflow.main(["predict", "Fine."]),
                 lambda: workflow.main(["evaluate"]),
                 lambda: serve_model.main([f"runs:/{run.info.run_id}/model"])):
        assert step() == 2
        assert "differ from the ones logged" in capsys.readouterr().err
    assert not marker.exists()


@pytest.mark.parametrize("setting, message", [
    ("epochs=-1", "epochs must be at least 1"), ("epochs=0", "epochs must be at least 1"),
    ("patience=-1", "patience must be at least 1"),
    ("batch_size=0", "batch_size must be at least 1"),
    ("dropout=2", "dropout must be less than 1"),
    ("optimizer=adamax9", "optimizer must be one of rmsprop, adam"),
    ("learning_rate=-1", "learning_rate must be greater than 0"),
    ("learning_rate=nan", "learning_rate must be float, got 'nan' (not a finite number)"),
    ("epochs=1e11", "epochs must be at most 10000"),
    ("batch_size=1e11", "batch_size must be at most 65536"),
    ("learning_rate=1e30", "learning_rate must be at most 10.0"),
    ("units=1e12", "units must be at most 100,000,000 (a sane range)"),
])
def test_bad_values_are_refused_before_anything_runs(store, tmp_path, monkeypatch, capsys,
                                                     setting, message, restore_tracking_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'none.db'}")
    assert workflow.main(["train", "--model", "bilstm", "--set", setting]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()  # no store touched, no FAILED run left


@pytest.mark.integration
def test_data_prep_commands_report_a_bad_archive_in_one_line(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "aclImdb_v1.tar.gz").write_bytes(b"not an archive at all")
    env = {**os.environ, "NLPKIT_WORK_DIR": str(tmp_path / "work")}
    for module in ("data_prep.imdb", "data_prep.word2vec"):
        result = subprocess.run([sys.executable, "-m", module, "--imdb-path",
                                 str(tmp_path / "aclImdb_v1.tar.gz")], env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 2, result.stderr[-2000:]
        assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
        assert "Traceback" not in result.stderr


@pytest.mark.integration  # a new store's migrations take seconds
def test_compare_on_a_store_without_the_lesson_s_experiment_creates_nothing(
        tmp_path, monkeypatch, capsys, restore_tracking_uri):
    uri = f"sqlite:///{tmp_path / 'other.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)  # (whatever an earlier test pointed MLflow at)
    assert workflow.main(["compare"]) == 0
    assert "No runs in experiment" in capsys.readouterr().out
    assert mlflow.get_experiment_by_name(workflow.EXPERIMENT) is None  # nothing written
