"""The MLflow store: where it is, its experiments, runs opened and ended there
(`tracked_run`), and whether it answers. What a run records is `tracking.py`.

The default store is a SQLite database under the project's `mlflow/` folder (an
absolute path, so every workflow and the UI see the same runs whatever the current
folder); `MLFLOW_TRACKING_URI` points anywhere else, e.g. a team server. Artifacts
of a SQLite store live next to the database, in `artifacts/`. The store is probed
before a step reads any data, and a store lost during a command is told apart from
other failures, quickly and in one line.
"""

import contextlib
import logging
import os
import socket
import sys
import urllib.parse
import warnings
from pathlib import Path

import filelock

from process.errors import UserError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_STORE_DIR = PROJECT_ROOT / "mlflow"


# A tracking server that stops answering fails a request within about a minute (MLflow's
# defaults retry for over four minutes); set these variables to choose otherwise.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "3", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
for _name, _value in HTTP_LIMITS.items():
    os.environ.setdefault(_name, _value)


def tracking_uri():
    """`$MLFLOW_TRACKING_URI`, else the project's SQLite store under `mlflow/`."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_STORE_DIR / 'mlflow.db'}"


UI_ADDRESS = "http://127.0.0.1:5000"  # where `python -m workflows.mlflow_ui` serves


def runs_table_url(experiment_id, run_id=None, ui=UI_ADDRESS):
    """The MLflow UI's page of an experiment's runs (or of one run): MLflow 3 opens on a
    GenAI overview that lists no training runs, so the kit links to the table."""
    page = f"{ui}/#/experiments/{experiment_id}/runs"
    return f"{page}/{run_id}" if run_id else page


def quiet_mlflow():
    """Silences what MLflow says that a user cannot act on: INFO lines as it migrates a
    store, infers a signature or starts and stops sampling system metrics, progress bars in
    logs, the warning that the pyfuncs' predictions are typed Any (on purpose: strings,
    n-best lists, scores), and the traceback it logs for a database error it raises anyway
    (the command reports it)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for noisy in ("alembic", "mlflow.models.signature", "mlflow.system_metrics"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("mlflow.store.db.utils").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message=".*Any type hint is inferred as AnyType")


def existing_experiment(name):
    """The experiment `name` of the tracking store, or None (nothing is created)."""
    import mlflow


    quiet_mlflow()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with opened_store(uri):
        return mlflow.get_experiment_by_name(name)


def use_experiment(name):
    """Points MLflow at the tracking store and the experiment `name` (created if needed).

    Creating a SQLite store, and creating the experiment, happen under an inter-process
    lock beside the database: MLflow's schema migration is not safe when two processes
    run it at once, and two creators of one experiment would collide.
    """
    import mlflow


    quiet_mlflow()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with opened_store(uri):
        if mlflow.get_experiment_by_name(name) is None:
            root = artifact_root(uri)
            try:
                mlflow.create_experiment(name, artifact_location=root and f"{root}/{name}")
            except mlflow.exceptions.MlflowException as error:  # another client of a server
                if error.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
    _note_sqlite_store(uri)
    return mlflow.set_experiment(name)


def store_lock(uri):
    """An inter-process lock for a SQLite database (servers serialize their own clients)."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    database = Path(uri[len("sqlite:///"):])
    database.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(database.with_name(f".{database.name}.lock"), timeout=600)


@contextlib.contextmanager
def opened_store(uri):
    """Holds `store_lock(uri)`, with a SQLite store made whole first if it is new."""
    quiet_mlflow()
    with store_lock(uri):
        if uri.startswith("sqlite:///"):
            _make_sqlite_store_whole(Path(uri[len("sqlite:///"):]))
        yield


def _make_sqlite_store_whole(database):
    """Creates a new SQLite store all at once: MLflow builds its schema in a file beside
    it (dozens of migrations, seconds), which is then renamed into place. Built in
    place, a stop halfway left a store that no later command could open ("table
    datasets already exists"). Such a half-built store, one without runs, is moved
    aside to `NAME.incomplete` and built again."""
    if database.is_file() and database.stat().st_size:
        if not _half_built(database):
            return
        os.replace(database, database.with_name(f"{database.name}.incomplete"))
        print(f"The tracking store {database} was left half-built by a stopped command and "
              f"holds no runs: moved it to {database.name}.incomplete and made it again.",
              file=sys.stderr)
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    building = database.with_name(f".{database.name}.building")
    building.unlink(missing_ok=True)
    uri = f"sqlite:///{building}"
    try:
        SqlAlchemyStore(uri, artifact_root(uri))
    finally:
        engine = SqlAlchemyStore._engine_map.pop(uri, None)
        engine and engine.dispose()
    os.replace(building, database)


def _half_built(database):
    """Whether a SQLite store lacks some of MLflow's tables and holds no runs."""
    import sqlite3

    from mlflow.store.db import utils  # imports every table's model

    with contextlib.closing(sqlite3.connect(database)) as connection:
        tables = {name for name, in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if set(utils.Base.metadata.tables) <= tables:
            return False
        return "runs" not in tables or not connection.execute(
            "SELECT 1 FROM runs LIMIT 1").fetchone()


def artifact_root(uri):
    """Artifacts of a SQLite store go beside the database; servers decide for themselves."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///"):]).parent / "artifacts").as_uri()


# ## Whether the store answers


class StoreError(UserError):
    """The tracking store cannot be reached (or was lost during a command)."""


DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306, "mssql": 1433}


STORE_TIMEOUT = 15  # seconds a tracking server has to answer the first request


def check_store(timeout=5.0):
    """Raises `StoreError` (one line) unless the tracking store answers: a SQLite file
    where its folder can be made, a database that accepts a connection within `timeout`
    seconds, an MLflow server that answers its API within `STORE_TIMEOUT` seconds."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        _check_sqlite_file(Path(uri[len("sqlite:///"):]))
        _note_sqlite_store(uri)
        return
    parsed = urllib.parse.urlparse(uri)
    scheme = parsed.scheme.split("+")[0]  # postgresql+psycopg2 -> postgresql
    if scheme not in DEFAULT_PORTS or not parsed.hostname:
        raise StoreError(f"MLFLOW_TRACKING_URI={redacted(uri)} is not a store the kit uses: "
                         "give sqlite:///PATH/mlflow.db, http(s)://HOST:PORT (an MLflow "
                         "server) or postgresql://... (or unset it for mlflow/mlflow.db).")
    address = (parsed.hostname, parsed.port or DEFAULT_PORTS[scheme])
    try:
        socket.create_connection(address, timeout=timeout).close()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise StoreError(f"The tracking store {redacted(uri)} does not answer ({reason}): "
                         "start it, or unset MLFLOW_TRACKING_URI to use the local store "
                         "mlflow/mlflow.db.") from error
    if scheme in ("http", "https"):
        _check_server_answers(uri)


_SQLITE_STORES_SEEN = set()  # SQLite store files this command saw exist


def _note_sqlite_store(uri):
    if uri.startswith("sqlite:///") and Path(uri[len("sqlite:///"):]).is_file():
        _SQLITE_STORES_SEEN.add(Path(uri[len("sqlite:///"):]))


def deleted_sqlite_store():
    """The path of the SQLite store if this command saw it exist and it no longer does
    (deleted mid-command), else None."""
    uri = tracking_uri()
    if uri.startswith("sqlite:///"):
        database = Path(uri[len("sqlite:///"):])
        if database in _SQLITE_STORES_SEEN and not database.exists():
            return database
    return None


def _check_sqlite_file(database):
    try:
        database.parent.mkdir(parents=True, exist_ok=True)
        with open(database, "rb") if database.is_file() else contextlib.nullcontext() as file:
            header = file.read(16) if file else b""
    except OSError as error:
        raise StoreError(f"Cannot use the tracking store {database} ({error.strerror}); set "
                         "MLFLOW_TRACKING_URI to a store you can write.") from error
    if header and header != b"SQLite format 3\x00":
        raise StoreError(f"The tracking store {database} is not a SQLite database: point "
                         "MLFLOW_TRACKING_URI at a .db file MLflow made, or a new path.")


def _check_server_answers(uri):
    """One request to the server's MLflow API, with no retry and `STORE_TIMEOUT`."""
    import mlflow


    limits = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
              "MLFLOW_HTTP_REQUEST_TIMEOUT": str(STORE_TIMEOUT)}
    saved = {name: os.environ.get(name) for name in limits}
    os.environ.update(limits)
    try:
        mlflow.MlflowClient(uri).search_experiments(max_results=1)
    except Exception as error:
        if is_store_failure(error):
            raise StoreError(f"The tracking store {redacted(uri)} did not answer within "
                             f"{STORE_TIMEOUT} s: check the server, or unset "
                             "MLFLOW_TRACKING_URI to use the local ") from error
        reason = str(error).strip().splitlines()[0][:120] if str(error).strip() else \
            type(error).__name__
        raise StoreError(f"{redacted(uri)} did not answer as an MLflow tracking server "
                         f"({reason}): check MLFLOW_TRACKING_URI.") from error
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def is_store_failure(error):
    """Whether `error` (or what caused it) is the tracking store not answering."""
    import mlflow
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


# ## A tracked run and what it logs


SYSTEM_METRICS_SECONDS = 2  # often enough to show a minute of compiling


@contextlib.contextmanager
def tracked_run(experiment_name, name, run_id=None, tags=None, system_metrics=False):
    """The MLflow run `run_id` resumed, or a new run `name`: ended FINISHED, KILLED on
    Ctrl-C or SIGTERM, FAILED on an error (without waiting on a store that is down).
    `system_metrics`: MLflow samples the machine's use every `SYSTEM_METRICS_SECONDS`
    (`system/...` metrics: CPU, memory, disk, network, and each GPU's use and memory)."""
    import mlflow

    experiment = use_experiment(experiment_name)
    if system_metrics:
        mlflow.set_system_metrics_sampling_interval(SYSTEM_METRICS_SECONDS)
        mlflow.set_system_metrics_samples_before_logging(1)
    mlflow.start_run(run_id=run_id or None, run_name=None if run_id else name,
                     experiment_id=experiment.experiment_id, tags=tags or None,
                     log_system_metrics=system_metrics)
    try:
        yield
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (run_main): stopped, not failed
        mlflow.end_run("KILLED")
        raise
    except BaseException as error:
        if is_store_failure(error):
            give_up_on_store()  # ending the run there would wait for nothing
            with contextlib.suppress(Exception):
                mlflow.end_run("FAILED")
        else:
            mlflow.end_run("FAILED")
        raise
    mlflow.end_run()


