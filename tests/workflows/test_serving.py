"""A registered model served on loopback: raw strings in over HTTP, clear 4xx for bad payloads."""

import json
import shutil
import sysconfig

import pytest

from tests.workflows.conftest import first_runs_by_model, in_shared_store
from tests.workflows.serving import post, served
from workflows import serve_model
from workflows.core import runs, servers

pytestmark = pytest.mark.integration  # each test starts servers or other processes


@pytest.fixture(scope="module")
def server(store, tmp_path_factory):
    with in_shared_store():
        version = runs.register_model(first_runs_by_model()["bow"].info.run_id,
                                      "imdb-serving")
        log = tmp_path_factory.mktemp("serve") / "server.log"
        with served(f"models:/imdb-serving/{version}", log) as url:
            yield url


def test_served_model_answers_raw_strings(server):
    status, body = post(server, json.dumps({"inputs": ["Wonderful and moving", "Meh."]}).encode())
    assert status == 200
    assert len(body["predictions"]) == 2 and all(0 <= p <= 1 for p in body["predictions"])


@pytest.mark.parametrize("payload, hint", [
    (b"{not json", ""),
    (json.dumps({"inputs": [1, 2]}).encode(), "str"),
    (json.dumps({"inputs": []}).encode(), "at least one review"),
    (json.dumps({"inputs": ["Fine", " "]}).encode(), "are empty"),
    (json.dumps({"reviews": ["x"]}).encode(), "inputs"),
])
def test_bad_payloads_get_a_4xx_and_the_server_keeps_serving(server, payload, hint):
    status, body = post(server, payload)
    assert 400 <= status < 500
    assert hint in json.dumps(body)
    assert post(server, json.dumps({"inputs": ["Still up?"]}).encode())[0] == 200


def test_serving_an_unknown_model_says_so(store, capsys):
    assert serve_model.main(["models:/no-such-model/1"]) == 2
    assert "No model at models:/no-such-model/1" in capsys.readouterr().err


def test_the_model_server_finds_uvicorn_beside_this_python_without_an_activated_venv(
        monkeypatch):
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # as when venv/bin/python is run directly
    environment = servers.server_environment()
    beside_python = shutil.which("uvicorn", path=sysconfig.get_path("scripts"))
    assert beside_python and shutil.which("uvicorn", path=environment["PATH"]) == beside_python
    assert environment["PATH"].endswith("/usr/bin:/bin")
