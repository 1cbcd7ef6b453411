"""Serve the MLflow UI on the project's tracking store (loopback only by default).

    python -m workflows.mlflow_ui                 # http://127.0.0.1:5000
    python -m workflows.mlflow_ui --port 5001

Uses `$MLFLOW_TRACKING_URI` when set, else `mlflow/mlflow.db`. Ctrl-C stops the server
and every worker it started.
"""

import data_prep.quiet_start  # noqa: F401  first: hides TensorFlow's start-up noise

# isort: split

import argparse
import sys

from data_prep.runtime import run_main
from workflows import tracking
from workflows.processes import run_until_stopped


def server_command(host, port, workers=1):
    """The `mlflow server` command line for the project's store."""
    uri = tracking.tracking_uri()
    command = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
               "--host", host, "--port", str(port), "--workers", str(workers)]
    artifacts = tracking.artifact_root(uri)
    if artifacts:
        command += ["--default-artifact-root", artifacts]
    return command


def serve(host="127.0.0.1", port=5000, workers=1):
    """Runs the UI server until Ctrl-C (or SIGTERM)."""
    tracking.DEFAULT_STORE_DIR.mkdir(exist_ok=True)
    return run_until_stopped(
        server_command(host, port, workers), "MLflow UI",
        f"MLflow UI: http://{host}:{port}  (store: {tracking.tracking_uri()}); Ctrl-C to stop")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m workflows.mlflow_ui",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1",
                        help="interface to bind (default: loopback; 0.0.0.0 exposes it)")
    parser.add_argument("--port", type=int, default=5000)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args(argv)
    return serve(args.host, args.port, args.workers)


if __name__ == "__main__":
    run_main(main)
