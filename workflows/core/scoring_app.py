"""The served model's HTTP app: MLflow's scoring server behind the kit's limits.

`RequestLimits` answers before the model sees a request: a body over the size limit
is a 413 (refused on its declared length: the rest is read and dropped, never kept,
so the client hears the answer), a body that is not JSON
or holds more inputs than the limit is a 400 or a 413; every error the model's server
answers is cut to one short line that never echoes the body. After a large body the
freed memory goes back to the system (glibc's `malloc_trim`), so a burst of big
requests leaves the server near its idle size.

uvicorn imports `app` from here in each worker (`servers.model_server_command`); the
model's path and the limits come in the environment.
"""

import ctypes
import ctypes.util
import dataclasses
import json
import os
import re

MODEL_PATH = "NLPKIT_SERVED_MODEL"
MAX_BYTES = "NLPKIT_SERVE_MAX_BYTES"
MAX_INPUTS = "NLPKIT_SERVE_MAX_INPUTS"
LARGE_BODY = 1 << 20  # bytes: after a body this large, memory is handed back
DRAIN_BYTES = 256 << 20  # of a refused body, read and dropped before answering
MESSAGE_CHARS = 300  # an error's message is cut to this many characters
PAYLOAD_KEYS = ("inputs", "instances", "dataframe_split", "dataframe_records")
USAGE = 'send {"inputs": ["a text", ...]}'


@dataclasses.dataclass(frozen=True)
class ServingLimits:
    """What one request may hold, and how many the server takes at once."""
    max_request_mb: float = 4.0  # a request's body, MiB: over it, a 413, never kept
    max_inputs: int = 1000  # texts (rows) a request: over it, a 413 before the model runs
    concurrent: int = 64  # connections at once, each worker: over it, a 503

    def environment(self, model_path):
        return {MODEL_PATH: str(model_path),
                MAX_BYTES: str(int(self.max_request_mb * (1 << 20))),
                MAX_INPUTS: str(self.max_inputs)}


class RequestLimits:
    """ASGI middleware around `app`: size and input-count limits on `/invocations`, and
    short error answers."""

    def __init__(self, app, max_bytes, max_inputs):
        self.app, self.max_bytes, self.max_inputs = app, max_bytes, max_inputs

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != "/invocations":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if not declared.isdigit() or int(declared) > self.max_bytes:
            await drain(receive)
            return await answer(send, 413, "REQUEST_TOO_LARGE", self._too_large())
        body = await self._body(receive)
        try:
            if body is None:
                await drain(receive)
                return await answer(send, 413, "REQUEST_TOO_LARGE", self._too_large())
            problem = self.problem(body, dict(scope["headers"]).get(b"content-type", b""))
            if problem:
                return await answer(send, *problem)
            await self.app(scope, replay(body), shortened_errors(send))
        finally:
            if body is not None and len(body) >= LARGE_BODY:
                del body
                release_memory()

    def _too_large(self):
        return (f"the request is over the server's limit of {self.max_bytes:,} bytes: send "
                "fewer or shorter texts a request, or start the server with a larger "
                "--max-request-mb")

    async def _body(self, receive):
        """The request's body, or None once it runs past the limit (a chunked body
        declares no length)."""
        chunks, size = [], 0
        while True:
            message = await receive()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)

    def problem(self, body, content_type):
        """(status, code, message) of a body the model should never see, else None."""
        if b"csv" in content_type:
            rows = body.count(b"\n") - 1  # the header line
            return self._count_problem(rows)
        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            where = f" (line {error.lineno}, column {error.colno})" if hasattr(
                error, "lineno") else ""
            return 400, "BAD_REQUEST", f"the body is not JSON{where}: {USAGE}"
        keys = [key for key in PAYLOAD_KEYS if isinstance(payload, dict) and key in payload]
        if not keys:
            return 400, "BAD_REQUEST", f"the body holds none of {', '.join(PAYLOAD_KEYS)}: {USAGE}"
        return self._count_problem(count_inputs(payload[keys[0]]))

    def _count_problem(self, count):
        if count > self.max_inputs:
            return (413, "TOO_MANY_INPUTS",
                    f"the request holds {count:,} inputs, over the server's limit of "
                    f"{self.max_inputs:,}: split it, or start the server with a larger "
                    "--max-inputs")
        return None


async def drain(receive, most=DRAIN_BYTES):
    """Reads what is left of a refused body, keeping none of it, so that a client that
    sends its whole body before reading gets the answer rather than a reset connection
    (up to `most` bytes; past that the connection is dropped)."""
    size = 0
    while size <= most:
        message = await receive()
        size += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return


def count_inputs(value):
    """How many inputs a payload's value holds: a list's rows, the longest column of a
    mapping of columns, a split frame's `data` rows; one for anything else."""
    if isinstance(value, list):
        return len(value)
    if isinstance(value, dict):
        if isinstance(value.get("data"), list):
            return len(value["data"])
        return max((len(column) for column in value.values() if isinstance(column, list)),
                   default=1)
    return 1


def one_line(text):
    """`text` on one line of at most `MESSAGE_CHARS` characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= MESSAGE_CHARS else flat[:MESSAGE_CHARS - 3] + "..."


async def answer(send, status, code, message):
    body = json.dumps({"error_code": code, "message": one_line(message)}).encode() + b"\n"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def replay(body):
    """An ASGI `receive` that hands over `body`, already read, in one message."""
    delivered = False

    async def receive():
        nonlocal delivered
        if delivered:
            return {"type": "http.disconnect"}
        delivered = True
        return {"type": "http.request", "body": body, "more_body": False}
    return receive


def shortened_errors(send):
    """An ASGI `send` that passes answers under 400 through and replaces an error's
    body by its code and the first `MESSAGE_CHARS` characters of its message on one
    line (MLflow's answers can hold the input and a traceback)."""
    error = {}

    async def send_shortened(message):
        if message["type"] == "http.response.start" and message["status"] >= 400:
            error.update(status=message["status"], body=b"")
            return None
        if not error:
            return await send(message)
        error["body"] += message.get("body", b"")
        if not message.get("more_body"):
            code, text = error_parts(error["body"])
            await answer(send, error["status"], code, text)
        return None
    return send_shortened


def error_parts(body):
    """(code, message) of an error body: MLflow's JSON, or its text."""
    try:
        parsed = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return "ERROR", body[:MESSAGE_CHARS].decode("utf-8", "replace")
    if not isinstance(parsed, dict):
        return "ERROR", str(parsed)
    message = re.split(r"\s*\bInput:", str(parsed.get("message", "")))[0]
    echoed = re.match(r"Failed to predict data .*?\. Error: ", message, flags=re.S)
    message = message[echoed.end():] if echoed else message
    return str(parsed.get("error_code", "ERROR")), message


def release_memory():
    """Hands freed heap pages back to the system where the C library can (glibc)."""
    library = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(library), "malloc_trim", None) if library else None
    if trim is not None:
        trim(0)


def build_app():
    """MLflow's scoring app for the model at `$NLPKIT_SERVED_MODEL`, behind the limits
    in the environment."""
    from mlflow.pyfunc import scoring_server

    model = scoring_server.load_model_with_mlflow_config(os.environ[MODEL_PATH])
    return RequestLimits(scoring_server.init(model), int(os.environ[MAX_BYTES]),
                         int(os.environ[MAX_INPUTS]))


if MODEL_PATH in os.environ:  # imported by uvicorn's worker
    app = build_app()
