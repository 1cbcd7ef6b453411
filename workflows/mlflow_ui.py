"""Serve the MLflow UI on the project's tracking store (loopback only by default).

    python -m workflows.mlflow_ui                 # http://127.0.0.1:5000
    python -m workflows.mlflow_ui --port 5001

Uses `$MLFLOW_TRACKING_URI` when set, else `mlflow/mlflow.db`. Ctrl-C stops the server
and every worker it started.
"""

import argparse
import os
import signal
import subprocess
import sys
import time

from workflows import tracking


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


def run_until_stopped(command, name, banner, env=None):
    """Starts `command` in its own process group, prints `banner`, and waits.

    Ctrl-C or SIGTERM stops the whole group, workers included; returns the exit status.
    """
    process = subprocess.Popen(command, start_new_session=True, env=env)
    print(banner, flush=True)
    for stop_signal in (signal.SIGINT, signal.SIGTERM):  # SIGINT too: a parent may ignore it
        signal.signal(stop_signal, _interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        stop(process)
        print(f"{name} stopped.", flush=True)
        return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def stop(process, timeout=10):
    """Stops a process group: SIGTERM, then SIGKILL if any member outlives `timeout` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        if _group_ended(process, timeout):
            return


def _group_ended(process, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        process.poll()  # reap the leader
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


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
    sys.exit(main())
