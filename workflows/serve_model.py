"""Serve a logged model over HTTP with `mlflow models serve` (loopback only by default).

    python -m workflows.serve_model models:/imdb-sentiment/latest        # http://127.0.0.1:5001
    python -m workflows.serve_model runs:/<run id>/model --port 5002

Resolves the URI in the project's tracking store (`$MLFLOW_TRACKING_URI` when set, else
`mlflow/mlflow.db`), checks the model's files against the digest recorded when it was
logged, and serves that copy with the current Python environment. POST raw strings to
`/invocations` as `{"inputs": [...]}`; the answer is `{"predictions": [...]}`. Ctrl-C
stops the server and its workers.
"""

import data_prep.quiet_start  # noqa: F401  first: hides TensorFlow's start-up noise

# isort: split

import argparse
import os
import sys

import mlflow

from data_prep.errors import run_command
from data_prep.runtime import run_main
from workflows import tracking
from workflows.processes import add_server_flags, check_can_serve, run_until_stopped


def model_server_command(model_uri, host="127.0.0.1", port=5001, workers=1):
    """The `mlflow models serve` command line for `model_uri`, in this environment."""
    return [sys.executable, "-m", "mlflow", "models", "serve", "-m", model_uri,
            "--env-manager", "local", "--host", host, "--port", str(port),
            "--workers", str(workers)]


def server_environment():
    """This process's environment, pointing MLflow at the project's store."""
    return {**os.environ, "MLFLOW_TRACKING_URI": tracking.tracking_uri()}


def serve(model_uri, host="127.0.0.1", port=5001, workers=1):
    """Checks that `model_uri` exists and that its files are the ones logged, then serves
    that verified copy until Ctrl-C."""
    mlflow.set_tracking_uri(tracking.tracking_uri())
    run = mlflow.get_run(tracking.source_run_id(model_uri))
    url = f"http://{host}:{port}"
    banner = (f"Serving {model_uri} (run {run.info.run_id}) at {url}; Ctrl-C to stop. Try:\n"
              f"  curl -s {url}/invocations -H 'Content-Type: application/json' "
              "-d '{\"inputs\": [\"Your text here.\"]}'")
    check_can_serve(model_server_command(model_uri, host, port, workers), host, port)
    with tracking.verified_model(run) as local:
        return run_until_stopped(model_server_command(str(local), host, port, workers),
                                 "Model server", banner, env=server_environment())


def add_server_arguments(parser):
    add_server_flags(parser, port=5001)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.serve_model",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("model_uri", help="models:/NAME/latest, models:/NAME@alias, "
                                          "models:/NAME/VERSION or runs:/RUN_ID/model")
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    return run_command(lambda a: serve(a.model_uri, a.host, a.port, a.workers), args)


if __name__ == "__main__":
    run_main(main)
