"""Failures from outside the kit are one line, quickly; nothing is lost or half-done."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest
import requests

from tests.workflows.conftest import BOW, COMMON
from tests.workflows.test_tuning import SPACE
from workflows import imdb_sentiment as workflow
from workflows import mlflow_ui
from workflows.core import fitting, runs, servers, tracking
from workflows.core import store as mlflow_store
from workflows.core.servers import check_can_serve
from workflows.sentiment.text_classifier import TextClassifier

BOW_ONE_EPOCH = ["train", "--model", "bow", *COMMON, *BOW, "--epochs", "1"]


def closed_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free, and nothing listens once it is closed


def runs_of(uri):
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    return mlflow.search_runs([experiment.experiment_id], output_format="list") \
        if experiment else []


def test_an_unreachable_tracking_store_is_one_quick_line_before_any_data_is_read(
        store, tmp_path, monkeypatch, capsys, restore_tracking_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(tmp_path / "work"))
    started = time.monotonic()
    assert workflow.main(BOW_ONE_EPOCH) == 2
    assert time.monotonic() - started < 15
    err = capsys.readouterr().err
    assert err.startswith("error: The tracking store http://127.0.0.1:") and "does not answer" \
        in err and err.count("\n") == 1
    assert not (tmp_path / "work").exists()  # no data was read or prepared


def serve_in_background(handler):
    """A local HTTP server that answers with `handler` (an `http.server` handler class),
    on a thread; returns its URI."""
    import http.server
    import threading

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def store_error(uri, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    with pytest.raises(mlflow_store.StoreError) as error:
        mlflow_store.check_store()
    return str(error.value), time.monotonic() - started


def test_a_store_uri_that_is_no_mlflow_store_is_one_line(tmp_path, monkeypatch,
                                                         restore_tracking_uri):
    import http.server

    class NotFound(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802  (http.server's name)
            self.send_response(404)
            self.end_headers()
            self.wfile.write(b"<html><body>Not Found</body></html>")

        do_POST = do_GET  # noqa: N815
        def log_message(self, *args):
            pass

    message, _ = store_error(serve_in_background(NotFound), monkeypatch)
    assert "did not answer as an MLflow tracking server" in message
    text = tmp_path / "notes.txt"
    text.write_text("not a database")
    assert "is not a SQLite database" in store_error(f"sqlite:///{text}", monkeypatch)[0]
    for uri in ("bogus://somewhere", f"file://{tmp_path}"):
        assert "is not a store the kit uses" in store_error(uri, monkeypatch)[0]


@pytest.mark.integration
def test_a_store_that_never_answers_is_reported_within_20_seconds(monkeypatch,
                                                                  restore_tracking_uri):
    import http.server

    class Silent(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            time.sleep(60)

        do_POST = do_GET  # noqa: N815
        def log_message(self, *args):
            pass

    message, seconds = store_error(serve_in_background(Silent), monkeypatch)
    assert "did not answer within 15 s" in message and seconds < 20


@pytest.mark.integration  # a run stopped and resumed
def test_a_store_lost_mid_run_is_one_line_and_the_rerun_resumes_the_run(
        own_store, monkeypatch, capsys):
    uri = os.environ["MLFLOW_TRACKING_URI"]
    log_metrics = mlflow.log_metrics

    def lost_at_epoch_two(metrics, step=None, **kwargs):
        if step == 2:
            monkeypatch.setattr(mlflow, "log_metrics", log_metrics)
            raise requests.exceptions.ConnectionError("connection refused")
        return log_metrics(metrics, step=step, **kwargs)

    monkeypatch.setattr(mlflow, "log_metrics", lost_at_epoch_two)
    argv = [*BOW_ONE_EPOCH[:-1], "3", "--set", "hidden_units=7"]
    for name, value in mlflow_store.HTTP_LIMITS.items():
        monkeypatch.setenv(name, value)  # give_up_on_store changes them: undone after
    assert workflow.main(argv) == 2
    assert "stopped answering. Nothing is lost" in capsys.readouterr().err
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "3")
    assert workflow.main(argv) == 0
    (run,) = runs_of(uri)
    steps = [m.step for m in mlflow.MlflowClient().get_metric_history(run.info.run_id, "loss")]
    assert steps == [1, 2, 3] and run.info.status == "FINISHED"


@pytest.mark.integration
def test_a_store_file_deleted_mid_run_is_one_line_and_a_retrain_trains(
        own_store, monkeypatch, capsys):
    log_metrics = mlflow.log_metrics

    def deleting_the_store(metrics, step=None, **kwargs):
        if step == 1:
            (own_store / "mlflow.db").unlink()
        return log_metrics(metrics, step=step, **kwargs)

    monkeypatch.setattr(mlflow, "log_metrics", deleting_the_store)
    argv = [*BOW_ONE_EPOCH, "--epochs", "2", "--set", "hidden_units=3"]
    assert workflow.main(argv) == 2
    err = capsys.readouterr().err
    assert "was deleted while the command ran" in err and err.count("\n") == 1
    rerun = subprocess.run([sys.executable, "-m", "workflows.imdb_sentiment", *argv,
                            "--retrain"], capture_output=True, text=True, check=False)
    assert rerun.returncode == 0, rerun.stderr[-2000:]  # a new process, a new store


@pytest.mark.integration  # a run in a second store
def test_a_run_folder_of_another_store_is_one_line_and_registers_nothing(
        store, tmp_path, monkeypatch, capsys, restore_tracking_uri, new_store):
    assert workflow.main(BOW_ONE_EPOCH) == 0  # a run of the shared store
    other = new_store(tmp_path / "other.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    assert workflow.main([*BOW_ONE_EPOCH, "--register", "elsewhere"]) == 2
    err = capsys.readouterr().err
    assert "belongs to run" in err and "--retrain" in err and err.count("\n") == 1
    mlflow.set_tracking_uri(other)
    assert mlflow.search_registered_models() == []
    with pytest.raises(runs.RunNotFoundError, match="nothing was registered"):
        runs.register_model("0" * 32, "ghost")
    assert mlflow.search_registered_models() == []


def mounted_tmpfs(folder, size):
    """A real file system of `size` (tmpfs) at `folder`, where one can be mounted (as
    root on Linux); the test is skipped elsewhere."""
    folder.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True, check=False)
    if made.returncode:
        pytest.skip("cannot mount a small tmpfs here (it needs root on Linux)")
    return folder


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MB disk: room for the tiny prepared reviews, not for big weights."""
    yield mounted_tmpfs(tmp_path / "disk", "3m")
    subprocess.run(["umount", "-l", str(tmp_path / "disk")], check=False)


@pytest.fixture
def tiny_disk(tmp_path):
    """A 64 KB disk: no room for the prepared reviews."""
    yield mounted_tmpfs(tmp_path / "disk", "64k")
    subprocess.run(["umount", "-l", str(tmp_path / "disk")], check=False)


def test_a_disk_full_while_preparing_is_one_line_and_leaves_no_partial_entry(
        own_store, tiny_disk, monkeypatch, capsys):
    work = tiny_disk / "work"
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(work))
    assert workflow.main(BOW_ONE_EPOCH) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no space left on the disk") and err.count("\n") == 1
    assert not list(work.glob("prepared/*"))  # no partial or half-complete entry


@pytest.mark.integration  # trainings on a full disk
def test_a_full_disk_is_one_line_the_run_failed_and_nothing_half_written(
        own_store, small_disk, monkeypatch, capsys):
    work = small_disk / "work"
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(work))
    big = [*BOW_ONE_EPOCH, "--set", "hidden_units=2000"]  # 2.4 MB of weights: no room
    assert workflow.main(big) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no space left on the disk writing ") and "rerun" in err
    assert "Traceback" not in err and err.count("\n") == 1
    assert not list(work.rglob(".partial-*")) and not list(work.rglob("checkpoint-*"))
    (run,) = runs_of(os.environ["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FAILED"
    assert workflow.main([*BOW_ONE_EPOCH, "--set", "hidden_units=3"]) == 0  # room: trains


def test_an_interrupted_run_is_killed_not_failed(own_store, monkeypatch):
    uri = os.environ["MLFLOW_TRACKING_URI"]

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(tracking, "log_epoch", interrupted)
    with pytest.raises(KeyboardInterrupt):
        workflow.main([*BOW_ONE_EPOCH, "--set", "hidden_units=2"])
    (run,) = runs_of(uri)
    assert run.info.status == "KILLED"


def test_a_busy_port_and_a_missing_server_program_are_one_line(capsys):
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert mlflow_ui.main(["--port", str(port)]) == 2
    assert f"Port {port} on 127.0.0.1 is already in use" in capsys.readouterr().err
    with pytest.raises(servers.UserError, match="no_such_server is not installed"):
        check_can_serve([sys.executable, "-m", "no_such_server"], "127.0.0.1", closed_port())


SERVER_SLOW_TO_STOP = """
import signal, sys, time

def stop(*_):
    time.sleep(2)  # longer than the launcher's own grace period
    sys.exit(0)

signal.signal(signal.SIGTERM, stop)
print("listening", flush=True)
time.sleep(600)
"""

LAUNCHER = """
import sys
from process.commands import run_main
from workflows.core.servers import run_until_stopped

run_main(lambda argv: run_until_stopped([sys.executable, "-c", sys.argv[1]], "Slow server",
                                        "Serving."))
"""


@pytest.mark.integration
def test_a_launcher_stops_its_server_group_before_its_own_forced_stop():
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, SERVER_SLOW_TO_STOP],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "NLPKIT_STOP_GRACE_SECONDS": "1"})
    first_lines = {launcher.stdout.readline(), launcher.stdout.readline()}  # either first
    assert first_lines == {"Serving.\n", "listening\n"}
    (server,) = worker_pids(launcher.pid)
    launcher.send_signal(signal.SIGTERM)
    output, errors = launcher.communicate(timeout=30)
    assert (launcher.returncode, output, errors) == (0, "Slow server stopped.\n", "")
    assert not Path(f"/proc/{server}").exists()

@pytest.mark.integration
def test_tuning_workers_are_capped_by_the_cores(store, capsys):
    argv = ["tune", "--model", "bow", *COMMON, *SPACE, "--workers", "100000"]
    assert workflow.main(argv) == 2
    assert f"--workers is from 1 to {os.cpu_count()}" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.parametrize("started", ["directly", "as a script's background job"])
def test_sigterm_to_a_tune_stops_its_workers_and_marks_its_run_killed(own_store, started):
    env = dict(os.environ)  # the test's own store and run folders
    argv = ["tune", "--model", "bow", *COMMON, *SPACE, "--epochs", "30", "--set",
            "patience=30", "--trials", "40", "--workers", "2", "--pruner", "none"]
    command = [sys.executable, "-m", "workflows.imdb_sentiment", *argv]
    if started == "directly":
        shell = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True, env=env, start_new_session=True)
        parent = shell.pid
    else:  # `&` in a script: the command starts with SIGINT ignored
        shell = subprocess.Popen(["bash", "-c", f"{' '.join(command)} & echo PID $!; wait"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 env=env, start_new_session=True)
        parent = int(next(line for line in shell.stdout if line.startswith("PID ")).split()[1])
    for line in shell.stdout:
        if line.startswith("Started 2 workers"):
            break
    workers = worker_pids(parent)
    assert len(workers) == 2
    time.sleep(3)
    os.kill(parent, signal.SIGTERM)
    shell.wait(timeout=60)
    stopped = time.monotonic()
    for pid in workers:  # none outlives its parent by more than 10 s
        while time.monotonic() - stopped < 10 and Path(f"/proc/{pid}").exists() \
                and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
            time.sleep(0.2)
        assert not Path(f"/proc/{pid}").exists() or \
            Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    (study_run,) = [run for run in runs_of(env["MLFLOW_TRACKING_URI"])
                     if run.data.tags.get("tune") == "true"]
    assert study_run.info.status == "KILLED"


@pytest.mark.integration
def test_sigterm_to_an_encoder_training_ends_it_within_seconds(own_store, tmp_path):
    from tests.data_prep.fixtures import write_tiny_encoder

    encoder = write_tiny_encoder(tmp_path / "encoder")
    command = [sys.executable, "-m", "workflows.imdb_sentiment", "train", "--model", "encoder",
               "--epochs", "100", "--set", "patience=100", "--set", f"encoder={encoder}",
               "--set", "batch_size=4", "--set", "max_review_tokens=16"]
    training_process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True,
                                        env=dict(os.environ), start_new_session=True)
    for line in training_process.stdout:
        if line.startswith("Epoch 2/"):
            break
    time.sleep(1)
    os.kill(training_process.pid, signal.SIGTERM)
    stopped = time.monotonic()
    output = training_process.communicate(timeout=60)[0]
    assert time.monotonic() - stopped < 10
    assert training_process.returncode == 130, output[-2000:]
    assert "Rerun the same command to resume." in output and "Traceback" not in output
    (run,) = runs_of(os.environ["MLFLOW_TRACKING_URI"])
    assert run.info.status == "KILLED"


def worker_pids(parent_pid):
    """The children of `parent_pid`, from /proc (no `ps` needed)."""
    children = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[1]) == parent_pid:
            children.append(int(stat.parent.name))
    return children


def test_a_failure_before_the_store_file_exists_is_not_called_a_deleted_store(
        tmp_path, monkeypatch, capsys, restore_tracking_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}")
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(tmp_path / "work"))
    (tmp_path / "not-imdb").mkdir()  # a folder of the wrong layout
    assert workflow.main([*BOW_ONE_EPOCH, "--imdb-path", str(tmp_path / "not-imdb")]) == 2
    err = capsys.readouterr().err
    assert "was deleted" not in err and "not-imdb" in err and err.count("\n") == 1


def test_a_full_disk_under_the_store_says_so(store, tmp_path, tiny_disk, monkeypatch, capsys,
                                             restore_tracking_uri):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tiny_disk / 'mlflow.db'}")
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(tmp_path / "work"))
    assert workflow.main(BOW_ONE_EPOCH) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the disk under the tracking store is full") \
        and "MLFLOW_TRACKING_URI" in err and err.count("\n") == 1


def test_each_sqlite_store_keeps_its_own_study_file(tmp_path, monkeypatch):
    from workflows.core import tuning

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'team.db'}")
    one = tuning.default_storage()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mine.db'}")
    assert one == f"sqlite:///{tmp_path / 'team.optuna.db'}" != tuning.default_storage()


@pytest.mark.parametrize("step", ["export", pytest.param("log", marks=pytest.mark.integration)])
def test_a_failure_after_training_is_one_line_and_the_rerun_trains_nothing_again(
        own_store, monkeypatch, capsys, step):
    """The end of a training (saving the model, logging it) failing for any reason keeps
    the training: one line says so, and the same command exports without an epoch
    trained again."""
    from workflows.core import models

    failing = {"export": (TextClassifier, "save"),
               "log": (models, "log_pyfunc_model")}[step]
    original = getattr(*failing)

    def fails_once(*args, **kwargs):
        monkeypatch.setattr(*failing, original)
        raise ValueError("A total of 2 objects could not be loaded\nthe second line")

    monkeypatch.setattr(*failing, fails_once)
    argv = [*BOW_ONE_EPOCH[:-1], "2", "--set", "hidden_units=6"]
    assert workflow.main(argv) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "training is kept" in err and "ValueError: A total of 2 objects" in err
    assert "rerun the same command" in err
    fits, train = [], fitting._Epoch.train
    monkeypatch.setattr(fitting._Epoch, "train",
                        lambda *args, **kwargs: fits.append(1) or train(*args, **kwargs))
    assert workflow.main(argv) == 0
    assert not fits  # no epoch trained again
    (run,) = runs_of(os.environ["MLFLOW_TRACKING_URI"])
    assert run.info.status == "FINISHED"
    assert models.load_pyfunc(run).predict(["a fine film"])
