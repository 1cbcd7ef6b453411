"""A registered model served on loopback: raw strings in over HTTP, clear 4xx for bad payloads."""

import json
import sys
import urllib.error
import urllib.request

import pytest

from tests.workflows.conftest import first_runs_by_model, in_shared_store
from tests.workflows.serving import post, served
from workflows import serve_model
from workflows.core import runs, servers
from workflows.core.scoring_app import ServingLimits

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


def test_a_malformed_5_mb_body_and_too_many_inputs_are_one_short_line_each(server):
    for body in (b"{" + b"x" * (5 << 20), b"{" + b"x" * (3 << 20),
                 json.dumps({"inputs": ["Fine."] * 1001}).encode()):
        request = urllib.request.Request(f"{server}/invocations", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=60)
        answer = refused.value.read()
        assert refused.value.code in (400, 413) and len(answer) < 1024
        assert answer.count(b"\n") == 1 and b"xxx" not in answer
    assert post(server, json.dumps({"inputs": ["Still up?"]}).encode())[0] == 200


def test_the_model_server_is_uvicorn_of_this_python_with_the_limits():
    command = servers.model_server_command("127.0.0.1", 5009, 2, ServingLimits(concurrent=9))
    assert command[:3] == [sys.executable, "-m", "uvicorn"]
    assert command[-1] == "workflows.core.scoring_app:app"
    assert command[command.index("--limit-concurrency") + 1] == "9"
