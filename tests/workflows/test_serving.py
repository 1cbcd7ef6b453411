"""`mlflow models serve` on loopback: raw strings in over HTTP, clear 4xx for bad payloads."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import mlflow
import pytest

from workflows import imdb_sentiment as workflow


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def post(url, body):
    request = urllib.request.Request(f"{url}/invocations", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture(scope="module")
def server(store, tmp_path_factory):
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    (run,) = mlflow.search_runs([experiment.experiment_id], output_format="list",
                                filter_string="params.model = 'bow'")
    port = free_port()
    log = open(tmp_path_factory.mktemp("serve") / "server.log", "w+")
    process = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", f"runs:/{run.info.run_id}/model",
         "--env-manager", "local", "--host", "127.0.0.1", "--port", str(port)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
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
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=30)
        log.close()


def test_served_model_answers_raw_strings(server):
    status, body = post(server, json.dumps({"inputs": ["Wonderful and moving", ""]}).encode())
    assert status == 200
    assert len(body["predictions"]) == 2 and all(0 <= p <= 1 for p in body["predictions"])


@pytest.mark.parametrize("payload, hint", [
    (b"{not json", ""),
    (json.dumps({"inputs": [1, 2]}).encode(), "str"),
    (json.dumps({"inputs": []}).encode(), "at least one review"),
    (json.dumps({"reviews": ["x"]}).encode(), "inputs"),
])
def test_bad_payloads_get_a_4xx_and_the_server_keeps_serving(server, payload, hint):
    status, body = post(server, payload)
    assert 400 <= status < 500
    assert hint in json.dumps(body)
    assert post(server, json.dumps({"inputs": ["Still up?"]}).encode())[0] == 200
