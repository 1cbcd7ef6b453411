"""Whether the tracking store answers: probed before a step reads any data, and a store
lost during a command told apart from other failures, quickly and in one line."""

import os
import socket
import urllib.parse
from pathlib import Path

import mlflow

from data_prep.errors import UserError
from workflows.tracking import tracking_uri


class StoreError(UserError):
    """The tracking store cannot be reached (or was lost during a command)."""


DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}


def check_store(timeout=5.0):
    """Raises `StoreError` (one line) unless the tracking store answers: a server or a
    database within `timeout` seconds, a SQLite file where its folder can be made."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        folder = Path(uri[len("sqlite:///"):]).parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise StoreError(f"Cannot create the tracking store's folder {folder} "
                             f"({error.strerror}); set MLFLOW_TRACKING_URI to a store you "
                             "can write.") from error
        return
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.split("+")[0]  # postgresql+psycopg2 -> postgresql
    if scheme not in DEFAULT_PORTS or not parsed.hostname:
        return  # a store the kit cannot probe cheaply (databricks, file): MLflow decides
    address = (parsed.hostname, parsed.port or DEFAULT_PORTS[scheme])
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise StoreError(f"The tracking store {redacted(uri)} does not answer ({reason}): "
                         "start it, or unset MLFLOW_TRACKING_URI to use the local store "
                         "mlflow/mlflow.db.") from error


def is_store_failure(error):
    """Whether `error` (or what caused it) is the tracking store not answering."""
    import requests

    while error is not None:
        if isinstance(error, (requests.exceptions.ConnectionError,
                              requests.exceptions.Timeout)):
            return True
        if isinstance(error, mlflow.exceptions.MlflowException) and \
                "API request to" in str(error) and "failed with exception" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def give_up_on_store():
    """After the store failed: any further request fails at once (the process ends)."""
    os.environ.update(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="2")


def redacted(uri):
    """`uri` without a password."""
    parsed = urllib.parse.urlparse(uri)
    if parsed.password:
        return uri.replace(f":{parsed.password}@", ":***@")
    return uri
