"""The kit's servers (a logged model over HTTP, the MLflow UI): each checked before it
starts (a free port, the program installed), run in its own process group in the
foreground; Ctrl-C stops all of it."""

import errno
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import mlflow

from process.errors import UserError
from process.stops import ForcedStop
from workflows.core import models, runs, store
from workflows.core.scoring_app import ServingLimits


def check_can_serve(command, host, port):
    """One-line errors, before anything starts: the port is taken, or the server program
    is not installed."""
    if command[0] == sys.executable and command[1] == "-m":
        missing = importlib.util.find_spec(command[2]) is None
    else:
        missing = shutil.which(command[0]) is None
    if missing:
        raise UserError(f"Cannot start the server: {' '.join(command[:3])} is not installed "
                        "here (pip install -r requirements.txt).")
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        try:
            probe.bind((host, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                raise UserError(f"Port {port} on {host} is already in use (another server?): "
                                "choose another with --port, or stop what holds it.") from None
            raise UserError(f"Cannot listen on {host}:{port} ({error.strerror}).") from None


def run_until_stopped(command, name, banner, env=None):
    """Starts `command` in its own process group, prints `banner`, and waits.

    Ctrl-C, SIGTERM or SIGHUP (the terminal closed) stops the whole group, workers
    included (`stop`: killed if it is not gone in `STOP_SECONDS`); returns the exit status.
    """
    ForcedStop.allow(STOP_SECONDS + 2)  # the group's stop comes first
    process = subprocess.Popen(command, start_new_session=True, env=env)
    print(banner, flush=True)
    for stop_signal in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # a parent may ignore SIGINT
        signal.signal(stop_signal, _interrupt)
    try:
        return process.wait()
    except KeyboardInterrupt:
        stop(process)
        print(f"{name} stopped.", flush=True)
        return 0


def _interrupt(signum, frame):
    raise KeyboardInterrupt


STOP_SECONDS = 10  # a server group's time to end after SIGTERM, before SIGKILL


def stop(process, timeout=STOP_SECONDS):
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


def model_server_command(host="127.0.0.1", port=5001, workers=1, limits=None):
    """The uvicorn command line of the served model's app (`scoring_app`: MLflow's
    scoring server behind the request limits), in this environment."""
    limits = limits or ServingLimits()
    return [sys.executable, "-m", "uvicorn", "--host", host, "--port", str(port),
            "--workers", str(workers), "--limit-concurrency", str(limits.concurrent),
            "--timeout-keep-alive", "5", "--no-server-header",
            "workflows.core.scoring_app:app"]


def server_environment():
    """This process's environment, pointing MLflow at the project's store."""
    return {**os.environ, "MLFLOW_TRACKING_URI": store.tracking_uri()}


def serve(model_uri, host="127.0.0.1", port=5001, workers=1, limits=None, export=None):
    """Checks that `model_uri` exists and that its files are the ones logged, then serves
    that verified copy until Ctrl-C, within `limits` (`ServingLimits`); with `export`
    (a name the run's export step logged, `onnx-int8`), answering through that export
    (same requests, same limits, same answers' format)."""
    limits = limits or ServingLimits()
    mlflow.set_tracking_uri(store.tracking_uri())
    run = mlflow.get_run(runs.source_run_id(model_uri))
    url = f"http://{host}:{port}"
    banner = (f"Serving {model_uri} (run {run.info.run_id}"
              + (f", through its export {export}" if export else "") + f") at {url}; at most "
              f"{limits.max_inputs:,} inputs and {limits.max_request_mb:g} MiB a request; "
              f"Ctrl-C to stop. Try:\n"
              f"  curl -s {url}/invocations -H 'Content-Type: application/json' "
              "-d '{\"inputs\": [\"Your text here.\"]}'")
    command = model_server_command(host, port, workers, limits)
    check_can_serve(command, host, port)
    with models.verified_model(run) as local, tempfile.TemporaryDirectory() as copy:
        through = served_export(run, local, export, copy) if export else {}
        return run_until_stopped(command, "Model server", banner, env={
            **server_environment(), **limits.environment(local), **through})


def served_export(run, local, name, folder):
    """The environment that has the model in `local` answer through the export `name`
    of `run`, downloaded into `folder`; refused in one line where the run has no such
    export or its model cannot answer through one (logged before exports could)."""
    from workflows.core.export import SERVED_EXPORT_ENV

    logged = sorted(item.path.split("/")[-1] for item in
                    mlflow.MlflowClient().list_artifacts(run.info.run_id, "exports"))
    if name not in logged:
        raise UserError(f"Run {run.info.run_id[:12]} has no export {name!r} (it has: "
                        f"{', '.join(logged) or 'none'}): make it with the lesson's export "
                        "step first.")
    code = Path(local, "pyfunc.py")  # the model's own code: does it read the variable?
    if not code.is_file() or "SERVED_EXPORT_ENV" not in code.read_text("utf-8"):
        raise UserError(f"Run {run.info.run_id[:12]}'s model cannot answer through an "
                        "export (another lesson's, or logged before it could): serve it "
                        "without --export, or train it again.")
    path = mlflow.artifacts.download_artifacts(run_id=run.info.run_id,
                                               artifact_path=f"exports/{name}", dst_path=folder)
    return {SERVED_EXPORT_ENV: str(path)}

