"""A team's tracking server: PostgreSQL + `mlflow server` on loopback, a workflow run against it.

Skipped where PostgreSQL (`initdb`, `postgres`) or the `psycopg2` driver is missing
(`.ci/run` installs Debian's `postgresql` when it can).
As root, PostgreSQL runs as the `postgres` user (it refuses to run as root).
"""

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from tests.workflows.conftest import BOW, COMMON
from tests.workflows.serving import free_port
from workflows import imdb_sentiment as workflow

pytestmark = pytest.mark.team_server
POSTGRES_TOOLS = ("initdb", "postgres")


def postgres_tool(name):
    """`name` on PATH, else in Debian's /usr/lib/postgresql/<version>/bin (newest first)."""
    installed = sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"),
                       key=lambda path: int(path.parts[-3]) if path.parts[-3].isdigit() else 0)
    return shutil.which(name) or (str(installed[-1]) if installed else None)


def as_postgres_user(command):
    if os.geteuid() != 0:
        return command
    if not shutil.which("runuser"):
        pytest.skip("running as root without runuser: cannot start PostgreSQL")
    return ["runuser", "-u", "postgres", "--", *command]


def wait_until(check, what, process, log, seconds=90):
    deadline = time.monotonic() + seconds
    while True:
        with contextlib.suppress(Exception):
            if check():
                return
        if process.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"{what} did not start:\n{Path(log).read_text()[-3000:]}")
        time.sleep(0.5)


@contextlib.contextmanager
def background(command, log, **kwargs):
    with open(log, "w") as output:
        process = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, **kwargs)
        try:
            yield process
        finally:
            process.terminate()
            process.wait(timeout=60)


@pytest.fixture(scope="module")
def postgres_url():
    initdb, postgres = map(postgres_tool, POSTGRES_TOOLS)
    if not (initdb and postgres):
        pytest.skip("PostgreSQL is not installed (no initdb/postgres on PATH or in "
                    "/usr/lib/postgresql/*/bin)")
    pytest.importorskip("psycopg2", reason="the PostgreSQL driver psycopg2 is not installed")
    import psycopg2

    root = Path(tempfile.mkdtemp(prefix="nlpkit-postgres-"))  # readable by the postgres user
    root.chmod(0o755)
    data = root / "data"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(data, "postgres", "postgres")
    port = free_port()
    try:
        subprocess.run(as_postgres_user([initdb, "-D", str(data), "-U", "mlflow",
                                         "--auth=trust"]), check=True, capture_output=True)
        command = as_postgres_user([postgres, "-D", str(data), "-h", "127.0.0.1", "-p",
                                    str(port), "-k", str(data)])
        with background(command, root / "postgres.log") as process:
            def connect(database):
                return psycopg2.connect(host="127.0.0.1", port=port, user="mlflow",
                                        dbname=database)

            wait_until(lambda: connect("postgres").close() is None, "PostgreSQL", process,
                       root / "postgres.log")
            connection = connect("postgres")
            connection.autocommit = True
            connection.cursor().execute("CREATE DATABASE mlflow")
            connection.close()
            yield f"postgresql+psycopg2://mlflow@127.0.0.1:{port}/mlflow", root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def tracking_server(postgres_url):
    database, root = postgres_url
    port = free_port()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", database,
               "--artifacts-destination", str(root / "artifacts"), "--host", "127.0.0.1",
               "--port", str(port), "--workers", "1"]
    url = f"http://127.0.0.1:{port}"
    with background(command, root / "server.log", start_new_session=True) as process:
        wait_until(lambda: urllib.request.urlopen(f"{url}/health", timeout=5).status == 200,
                   "mlflow server", process, root / "server.log", seconds=180)
        yield url


def test_workflow_run_is_tracked_on_the_team_server(store, tracking_server, monkeypatch,
                                                    restore_tracking_uri,
                                                    tmp_path):
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_server)
    argv = ["train", "--model", "bow", *COMMON, *BOW, "--epochs", "1", "--set", "seed=99"]
    assert workflow.main(argv) == 0
    assert workflow.main(["evaluate"]) == 0
    mlflow.set_tracking_uri(tracking_server)
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (run,) = mlflow.search_runs([experiment.experiment_id], output_format="list")
    assert run.data.params["seed"] == "99" and "test_accuracy" in run.data.metrics
    assert run.data.tags["model_logged"] == "true"
    model = mlflow.pyfunc.load_model(f"runs:/{run.info.run_id}/model", dst_path=str(tmp_path))
    assert len(model.predict(["Great acting", "Awful script"])) == 2


def test_two_workers_on_loopback_join_one_study_on_the_team_postgres(
        store, postgres_url, tracking_server, monkeypatch, restore_tracking_uri):
    import mlflow
    import optuna
    import psycopg2

    database, _ = postgres_url
    port = int(database.rsplit(":", 1)[1].split("/")[0])
    connection = psycopg2.connect(host="127.0.0.1", port=port, user="mlflow", dbname="postgres")
    connection.autocommit = True
    connection.cursor().execute("CREATE DATABASE optuna")
    connection.close()
    storage = database.rsplit("/", 1)[0] + "/optuna"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking_server)
    argv = ["tune", "--model", "bow", *COMMON, *BOW, "--set", "seed=61", "--space",
            "learning_rate=loguniform:1e-3:3e-2", "--space", "dropout=uniform:0.1:0.6",
            "--trials", "6", "--pruner", "none", "--study", "team", "--storage", storage]
    command = [sys.executable, "-m", "workflows.imdb_sentiment", *argv]
    workers = [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True) for _ in range(2)]  # as if on two machines
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs[0][-2000:]
    study = optuna.load_study(study_name="team", storage=storage)
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) >= 6 and all("Trial " in output for output in outputs)  # both worked
    mlflow.set_tracking_uri(tracking_server)
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list")
    (parent,) = [run for run in runs if run.data.tags.get("optuna_study") == "team"
                 and run.data.tags.get("tune") == "true"]
    children = {run.info.run_id for run in runs
                if run.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert {trial.user_attrs["mlflow_run_id"] for trial in trials} == children
    assert parent.data.tags["best_child_run_id"] == study.best_trial.user_attrs["mlflow_run_id"]
