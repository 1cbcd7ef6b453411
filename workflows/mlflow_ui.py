"""Serve the MLflow UI on the project's tracking store (loopback only by default).

    python -m workflows.mlflow_ui                 # http://127.0.0.1:5000
    python -m workflows.mlflow_ui --port 5001

It prints the link of each lesson's runs table (`#/experiments/N/runs`): MLflow 3 opens
on a GenAI welcome page whose experiment links show no training runs.

Uses `$MLFLOW_TRACKING_URI` when set, else `mlflow/mlflow.db`. Ctrl-C stops the server
and every worker it started.
"""

import argparse
import os
import sys

from process.commands import run_main
from process.errors import run_command
from workflows.core import store
from workflows.core.server_flags import add_server_flags


def server_command(host, port, workers=1):
    """The `mlflow server` command line for the project's store."""
    uri = store.tracking_uri()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
               "--host", host, "--port", str(port), "--workers", str(workers)]
    artifacts = store.artifact_root(uri)
    if artifacts:
        command += ["--default-artifact-root", artifacts]
    return command


def serve(host="127.0.0.1", port=5000, workers=1):
    """Runs the UI server until Ctrl-C (or SIGTERM); prints the runs table of each
    experiment in the store."""
    from workflows.core.servers import check_can_serve, run_until_stopped

    store.DEFAULT_STORE_DIR.mkdir(exist_ok=True)
    command = server_command(host, port, workers)
    check_can_serve(command, host, port)
    ui = f"http://{host}:{port}"
    tables = "".join(
        f"\n  {experiment.name}: {store.runs_table_url(experiment.experiment_id, ui=ui)}"
        for experiment in lesson_experiments())
    return run_until_stopped(
        command, "MLflow UI",
        f"MLflow UI: {ui}  (store: {store.tracking_uri()}); Ctrl-C to stop"
        + (f"\nRuns of each lesson:{tables}" if tables else ""), env=quiet_server_environment())


def quiet_server_environment():
    """This environment, without the deprecation warnings MLflow's server triggers in
    Starlette (nothing a user can act on)."""
    quiet = ",".join(f"ignore:{message}" for message in STARLETTE_DEPRECATIONS)
    current = os.environ.get("PYTHONWARNINGS")
    return {**os.environ, "PYTHONWARNINGS": f"{current},{quiet}" if current else quiet}


STARLETTE_DEPRECATIONS = ("async generator function lifespans are deprecated",
                          "generator function lifespans are deprecated",
                          "run_until_first_complete is deprecated")


def lesson_experiments():
    """The experiments of the store that hold runs (a new SQLite store is made here, whole,
    rather than by the server)."""
    import mlflow

    uri = store.tracking_uri()
    mlflow.set_tracking_uri(uri)
    with store.opened_store(uri):
        return [experiment for experiment in mlflow.search_experiments()
                if experiment.name != "Default"]


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.mlflow_ui",
                                     description=__doc__.split("\n")[0])
    add_server_flags(parser, port=5000)
    args = parser.parse_args(argv)
    return run_command(lambda a: serve(a.host, a.port, a.workers), args)


if __name__ == "__main__":
    run_main(main)
