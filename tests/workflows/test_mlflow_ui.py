"""The UI launcher serves the project's store on loopback and Ctrl-C leaves no process behind."""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from tests.workflows.browser import CHROMIUM, headless, rendered, visible_text
from tests.workflows.conftest import first_runs_by_model
from tests.workflows.serving import free_port, group_members, server_group, stop_launcher
from workflows import mlflow_ui
from workflows.core import store as mlflow_store

pytestmark = pytest.mark.integration  # each test starts servers or other processes


def test_server_command_points_at_the_store_and_loopback(monkeypatch, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    command = mlflow_ui.server_command("127.0.0.1", 5001)
    assert command[command.index("--backend-store-uri") + 1] == f"sqlite:///{tmp_path}/mlflow.db"
    assert command[command.index("--host") + 1] == "127.0.0.1"
    artifacts = command[command.index("--default-artifact-root") + 1]
    assert artifacts == (tmp_path / "artifacts").as_uri()


@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGHUP, signal.SIGTERM],
                         ids=["ctrl-c", "terminal-closed", "terminate"])
def test_ui_starts_on_loopback_and_ctrl_c_stops_every_worker(tmp_path, stop_signal, new_store):
    port = free_port()
    env = {**os.environ, "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
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
        group = server_group(launcher)
        launcher.send_signal(stop_signal)
        output, _ = launcher.communicate(timeout=60)
        assert f"http://127.0.0.1:{port}" in output and "MLflow UI stopped." in output
        assert group_members(group) == []  # workers included
    finally:
        stop_launcher(launcher)


def printed_link(launcher, prefix):
    """The link on the launcher's first output line that starts with `prefix`."""
    for line in launcher.stdout:
        if line.strip().startswith(prefix):
            # the server writes to the same pipe: keep it drained
            threading.Thread(target=launcher.stdout.read, daemon=True).start()
            return line.strip().removeprefix(prefix)
    raise AssertionError(f"the launcher printed no {prefix!r} line")


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed")
def test_browser_shows_the_experiment_and_compares_its_runs(store, tmp_path):
    import mlflow

    runs = first_runs_by_model()  # the store's own, whatever other tests logged beside them
    run_ids = sorted(runs[model].info.run_id for model in ("bow", "bilstm"))
    experiment = mlflow.get_experiment_by_name("imdb_sentiment")
    port = free_port()
    launcher = subprocess.Popen([sys.executable, "-m", "workflows.mlflow_ui", "--port", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "UI did not start"
                time.sleep(1)
        table = printed_link(launcher, "imdb_sentiment: ")  # the link the launcher prints
        assert table == f"{url}/#/experiments/{experiment.experiment_id}/runs"
        rendered(table, "imdb_sentiment", "bow", "bilstm")
        run_page = mlflow_store.runs_table_url(experiment.experiment_id, run_ids[0], url)
        rendered(run_page, "val_accuracy", "best_val_loss")  # as a run's last line links it
        charts = rendered(run_page + "/model-metrics", "Model metrics", "accuracy")
        first_section = visible_text(charts).split("Auto-refresh", 1)[1].strip()
        assert first_section.startswith("Model metrics ("), first_section[:200]  # the scores
        assert "epoch_seconds" not in charts and "timing" not in charts  # timings: system/
        compare = (f"{url}/#/compare-runs?runs={json.dumps(run_ids)}"
                   f"&experiments={json.dumps([experiment.experiment_id])}")
        rendered(compare, *run_ids, "val_accuracy")
        artifacts = Path(os.environ.get("NLPKIT_TEST_ARTIFACTS", tmp_path))
        artifacts.mkdir(parents=True, exist_ok=True)
        screenshot = artifacts / "mlflow_compare_runs.png"
        headless(compare, f"--screenshot={screenshot}")
        assert screenshot.exists() and screenshot.stat().st_size > 10_000
    finally:
        stop_launcher(launcher)
