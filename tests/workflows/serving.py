"""Start `python -m workflows.serve_model` on loopback for a test and talk to it."""

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
def served(model_uri, log_path, startup_seconds=180, flags=()):
    """Serves `model_uri` with `python -m workflows.serve_model` (and `flags`) on a free
    loopback port.

    Yields its URL; afterwards stops it with Ctrl-C and checks that no server process
    is left behind.
    """
    port = free_port()
    with open(log_path, "w+") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "workflows.serve_model", model_uri, "--port", str(port),
             *flags],
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
            group = server_group(process)
            stop_launcher(process)
            log.seek(0)
            assert "Model server stopped." in log.read()
            assert group_members(group) == []
        finally:
            stop_launcher(process)


def stop_launcher(process):
    """Ctrl-C to a launcher, which stops its server's process group; SIGKILL if it hangs."""
    if process.poll() is not None:
        return
    groups = [process.pid, *_child_groups(process.pid)]
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        process.wait(timeout=30)


def _child_groups(pid):
    listing = subprocess.run(["ps", "-eo", "pid,ppid,pgid"], capture_output=True, text=True)
    rows = [tuple(map(int, line.split())) for line in listing.stdout.splitlines()[1:]]
    return sorted({pgid for _, ppid, pgid in rows if ppid == pid and pgid != pid})


def server_group(launcher):
    """The process group of the server a launcher started (its child, in its own session)."""
    groups = _child_groups(launcher.pid)
    assert groups, f"launcher {launcher.pid} has no server process"
    return groups[0]


def group_members(pgid):
    """Command lines of the live (not zombie) processes in process group `pgid`."""
    listing = subprocess.run(["ps", "-eo", "pgid,stat,args"], capture_output=True, text=True)
    return [line for line in listing.stdout.splitlines()[1:]
            if int(line.split()[0]) == pgid and not line.split()[1].startswith("Z")]
