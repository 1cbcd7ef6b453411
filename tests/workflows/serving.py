"""Start `mlflow models serve` on loopback for a test and talk to it."""

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(url, body):
    """(status, decoded JSON body) of POST `body` to `url`/invocations."""
    request = urllib.request.Request(f"{url}/invocations", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@contextlib.contextmanager
def served(model_uri, log_path, startup_seconds=180):
    """Serves `model_uri` with `python -m workflows.serve_model` on a free loopback port.

    Yields its URL; afterwards stops it with Ctrl-C and checks that no server process
    is left behind.
    """
    port = free_port()
    with open(log_path, "w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "workflows.serve_model", model_uri, "--port", str(port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + startup_seconds
            while True:
                try:
                    urllib.request.urlopen(f"{url}/ping", timeout=5)
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        pytest.fail(f"server did not start:\n{log.read()[-3000:]}")
                    time.sleep(1)
            yield url
            process.send_signal(signal.SIGINT)
            process.wait(timeout=60)
            log.seek(0)
            assert "Model server stopped." in log.read()
            assert processes_listening_on(port) == []
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=30)


def processes_listening_on(port):
    """Command lines of running processes started with `--port <port>`."""
    listing = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in listing.splitlines() if f"--port {port}" in line]
