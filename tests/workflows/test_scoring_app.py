"""The served model's request limits, on an ASGI app that stands in for MLflow's
scoring server (no server, no model)."""

import asyncio
import json

import pytest

from workflows.core import scoring_app
from workflows.core.scoring_app import RequestLimits, ServingLimits, count_inputs


async def model_server(scope, receive, send):
    """Answers the inputs' count, or MLflow's kind of error: the input echoed back over
    several lines, with a traceback."""
    body = (await receive())["body"]
    inputs = json.loads(body)["inputs"]
    if inputs == ["echo"]:
        error = {"error_code": "INVALID_PARAMETER_VALUE", "message": f"Failed to predict data "
                 f"'{inputs * 500}'. Error: Send at least one review."}
        status, answer = 400, json.dumps(error).encode()
    elif inputs == ["fail"]:
        error = {"error_code": "BAD_REQUEST", "message": "Failed to predict.\nInput:\n"
                 + body.decode() * 50, "stack_trace": "Traceback...\n" * 100}
        status, answer = 400, json.dumps(error).encode()
    else:
        status, answer = 200, json.dumps({"predictions": [len(inputs)]}).encode()
    await send({"type": "http.response.start", "status": status, "headers": []})
    await send({"type": "http.response.body", "body": answer[:10], "more_body": True})
    await send({"type": "http.response.body", "body": answer[10:]})


def request(app, body, chunk=None, headers=None, path="/invocations"):
    """(status, body) of POST `body`, sent in chunks of `chunk` bytes without a declared
    length when `chunk` is given."""
    chunks = [body[i:i + chunk] for i in range(0, len(body), chunk)] if chunk else [body]
    declared = [] if chunk else [(b"content-length", str(len(body)).encode())]
    scope = {"type": "http", "path": path, "method": "POST",
             "headers": [(b"content-type", b"application/json"), *declared, *(headers or [])]}
    sent = []

    async def receive():
        part = chunks.pop(0) if chunks else b""
        return {"type": "http.request", "body": part, "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")


@pytest.fixture
def app():
    return RequestLimits(model_server, max_bytes=10_000, max_inputs=5)


def test_a_request_within_the_limits_reaches_the_model(app):
    assert request(app, json.dumps({"inputs": ["a", "b"]}).encode()) == (
        200, b'{"predictions": [2]}')


@pytest.mark.parametrize("chunk", [None, 1000])  # a declared length, or chunks without one
def test_a_body_over_the_size_limit_is_a_short_413(app, chunk):
    body = json.dumps({"inputs": ["x" * 20_000]}).encode()
    status, answer = request(app, body, chunk)
    assert status == 413 and len(answer) < 1024 and answer.count(b"\n") == 1
    assert "limit of 10,000 bytes" in json.loads(answer)["message"]


def test_more_inputs_than_the_limit_is_a_413_before_the_model_runs(app):
    status, answer = request(app, json.dumps({"inputs": ["a"] * 6}).encode())
    assert status == 413
    assert "6 inputs, over the server's limit of 5" in json.loads(answer)["message"]


@pytest.mark.parametrize("body, says", [
    (b"{not json" + b"x" * 5000, "not JSON (line 1, column 2)"),
    (b"\xff\xfe", "not JSON"),
    (b'{"reviews": ["x"]}', "none of inputs"),
    (b"[1, 2]", "none of inputs"),
])
def test_a_malformed_body_is_one_line_that_never_echoes_it(app, body, says):
    status, answer = request(app, body)
    assert status == 400 and answer.count(b"\n") == 1 and len(answer) < 1024
    message = json.loads(answer)["message"]
    assert says in message and "xxxx" not in message


def test_the_model_server_s_errors_are_cut_to_their_first_words_on_one_line(app):
    status, answer = request(app, json.dumps({"inputs": ["fail"]}).encode())
    assert status == 400 and answer.count(b"\n") == 1 and len(answer) < 1024
    assert json.loads(answer) == {"error_code": "BAD_REQUEST", "message": "Failed to predict."}
    answer = request(app, json.dumps({"inputs": ["echo"]}).encode())[1]
    assert json.loads(answer)["message"] == "Send at least one review."


def test_other_paths_pass_through_untouched(app):
    assert request(app, json.dumps({"inputs": ["a"] * 9}).encode(), path="/other")[0] == 200


@pytest.mark.parametrize("value, count", [
    (["a", "b", "c"], 3), ({"text": ["a", "b"]}, 2),
    ({"columns": ["text"], "data": [["a"], ["b"], ["c"], ["d"]]}, 4), ("a", 1),
])
def test_inputs_are_counted_in_every_payload_shape_mlflow_takes(value, count):
    assert count_inputs(value) == count


def test_the_limits_reach_the_server_in_its_environment(tmp_path):
    environment = ServingLimits(max_request_mb=0.5, max_inputs=7).environment(tmp_path)
    assert environment == {scoring_app.MODEL_PATH: str(tmp_path),
                           scoring_app.MAX_BYTES: str(1 << 19), scoring_app.MAX_INPUTS: "7"}
