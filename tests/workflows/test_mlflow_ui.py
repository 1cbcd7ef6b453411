"""The UI launcher serves the project's store on loopback and Ctrl-C leaves no process behind."""

import os
import signal
import subprocess
import sys
import time
import urllib.request

from tests.workflows.test_serving import free_port
from workflows import mlflow_ui


def test_server_command_points_at_the_store_and_loopback(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    command = mlflow_ui.server_command("127.0.0.1", 5001)
    assert command[command.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path}/mlflow.db"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    artifacts = command[command.index("--default-artifact-root") + 1]
    assert artifacts == (tmp_path / "artifacts").as_uri()


def test_ui_starts_on_loopback_and_ctrl_c_stops_every_worker(tmp_path):
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/mlflow.db"}
    launcher = subprocess.Popen([sys.executable, "-m", "workflows.mlflow_ui", "--port", str(port)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as reply:
                    assert reply.status == 200
                break
            except OSError:
                assert launcher.poll() is None and time.monotonic() < deadline, "UI did not start"
                time.sleep(1)
        launcher.send_signal(signal.SIGINT)
        output, _ = launcher.communicate(timeout=60)
        assert f"http://127.0.0.1:{port}" in output and "MLflow UI stopped." in output
        server_group = [line for line in subprocess.run(
            ["ps", "-eo", "pgid,args"], capture_output=True, text=True).stdout.splitlines()
            if f"--port {port}" in line]
        assert server_group == []
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
