"""MLflow plumbing shared by the workflows: store, runs, tags, figures, models, tables.

The default store is a SQLite database under the project's `mlflow/` folder (an
absolute path, so every workflow and the UI see the same runs whatever the current
folder); `MLFLOW_TRACKING_URI` points anywhere else, e.g. a team server. Artifacts
of a SQLite store live next to the database, in `artifacts/`.
"""

import contextlib
import csv
import dataclasses
import importlib
import io
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import filelock
import keras
import mlflow

from data_prep.cache import folder_digest
from data_prep.errors import UserError
from data_prep.runtime import cpu_model

PROJECT_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STORE_DIR = PROJECT_ROOT / "mlflow"


class RunNotFoundError(UserError):
    """No MLflow run matches what the user asked for."""


class ModelChangedError(UserError):
    """A logged model's files differ from what was logged: they are not loaded."""


DIGEST_TAG = "model_sha256"  # digest of every file of the run's logged model
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
    store or infers a signature, progress bars in logs, and the warning that the
    pyfuncs' predictions are typed Any (on purpose: strings, n-best lists, scores)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for noisy in ("alembic", "mlflow.store.db.utils", "mlflow.models.signature"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*Any type hint is inferred as AnyType")


def existing_experiment(name):
    """The experiment `name` of the tracking store, or None (nothing is created)."""
    quiet_mlflow()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with store_lock(uri):  # the first client of a SQLite store migrates it
        return mlflow.get_experiment_by_name(name)


def use_experiment(name):
    """Points MLflow at the tracking store and the experiment `name` (created if needed).

    Creating or upgrading a SQLite store, and creating the experiment, happen under an
    inter-process lock beside the database: MLflow's schema migration is not safe when
    two processes run it at once, and two creators of one experiment would collide.
    """
    quiet_mlflow()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with store_lock(uri):
        if mlflow.get_experiment_by_name(name) is None:  # the first call migrates the store
            root = artifact_root(uri)
            try:
                mlflow.create_experiment(name, artifact_location=root and f"{root}/{name}")
            except mlflow.exceptions.MlflowException as error:  # another client of a server
                if error.error_code != "RESOURCE_ALREADY_EXISTS":
                    raise
    return mlflow.set_experiment(name)


def store_lock(uri):
    """An inter-process lock for a SQLite store (servers serialize their own clients)."""
    if not uri.startswith("sqlite:///"):
        return contextlib.nullcontext()
    database = Path(uri[len("sqlite:///"):])
    database.parent.mkdir(parents=True, exist_ok=True)
    return filelock.FileLock(database.with_name(f".{database.name}.lock"), timeout=600)


def artifact_root(uri):
    """Artifacts of a SQLite store go beside the database; servers decide for themselves."""
    if not uri.startswith("sqlite:///"):
        return None
    return (Path(uri[len("sqlite:///"):]).parent / "artifacts").as_uri()


def git_commit():
    """The current commit (with `-dirty` when the tree has changes), or `unknown`."""
    def git(*args):
        return subprocess.run(["git", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        return commit + ("-dirty" if git("status", "--porcelain", "--untracked-files=no") else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_description():
    """The accelerators Keras sees (e.g. `gpu:0`), or the CPU model and core count."""
    devices = [d for d in keras.distribution.list_devices() if not d.lower().startswith("cpu")]
    if devices:
        return ", ".join(devices)
    return f"cpu ({cpu_model()}, {os.cpu_count()} cores)"


def accelerator_model():
    """The first accelerator's model name (e.g. `NVIDIA H100 80GB HBM3`), or None."""
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        devices = [d for d in jax.devices() if d.platform != "cpu"]
        return devices[0].device_kind if devices else None
    if backend == "tensorflow":
        import tensorflow as tf

        gpus = tf.config.list_physical_devices("GPU")
        return tf.config.experimental.get_device_details(gpus[0]).get("device_name") \
            if gpus else None
    return None


def command_line():
    """This process's command, as typed: `python -m workflows.translation train ...`."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    program = f"python -m {spec.name}" if spec else f"python {sys.argv[0]}"
    return " ".join([program, *map(shlex.quote, sys.argv[1:])])


def backend_version():
    backend = keras.backend.backend()
    module = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}.get(backend)
    return importlib.import_module(module).__version__ if module else None


def run_tags(dataset_fingerprint, **extra):
    """Where and how a run was made: commit, command line, backend and device."""
    tags = {"git_commit": git_commit(), "command": command_line(),
            "backend": keras.backend.backend(), "backend_version": backend_version(),
            "device": device_description(), "accelerator": accelerator_model(),
            "dataset_fingerprint": dataset_fingerprint, "keras_version": keras.__version__,
            **extra}
    return {key: value for key, value in tags.items() if value is not None}


def flat_params(config):
    """A dataclass config as MLflow params (values as strings, `None` spelled out)."""
    return {key: str(value) for key, value in dataclasses.asdict(config).items()}


def pinned_requirements(*names):
    """The `name==version` lines of requirements.txt for `names` (pins for logged models)."""
    pins = {}
    for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            pins[line.split("==")[0].strip().lower()] = line
    missing = [name for name in names if name not in pins]
    if missing:
        raise KeyError(f"requirements.txt pins none of: {', '.join(missing)}")
    return [pins[name] for name in names]


def log_pyfunc_model(python_model_file, artifacts, input_example, pip_requirements,
                     packages=(), params=None):
    """Logs a models-from-code pyfunc named `model` with just the code it needs.

    `layers/` and `data_prep/` always travel with the model, and `packages` names the
    subpackages of `workflows/` it needs too (e.g. `seq2seq`), shipped alone as
    `workflows/<package>`: a translator does not carry the IMDB lesson. It loads in a
    fresh process that does not have this repository. `params` (name -> default) are
    declared in the signature (inferred with the input example), so callers and the
    model server may pass them. A digest of every file of the logged model is recorded
    in the run's tags (`verified_model` checks it).
    """
    with tempfile.TemporaryDirectory() as staging:
        code_paths = [str(PROJECT_ROOT / "layers"), str(PROJECT_ROOT / "data_prep")]
        if packages:
            shipped = Path(staging) / "workflows"
            for package in packages:
                shutil.copytree(PROJECT_ROOT / "workflows" / package, shipped / package,
                                ignore=shutil.ignore_patterns("__pycache__"))
            code_paths.append(str(shipped))
        info = mlflow.pyfunc.log_model(
            name="model",
            python_model=str(python_model_file),
            artifacts={key: str(path) for key, path in artifacts.items()},
            code_paths=code_paths,
            input_example=(input_example, params) if params else input_example,
            pip_requirements=pip_requirements,
        )
    with tempfile.TemporaryDirectory() as copy:
        local = mlflow.artifacts.download_artifacts(artifact_uri=info.model_uri, dst_path=copy)
        mlflow.set_tag(DIGEST_TAG, folder_digest(local))  # as `verified_model` sees it
    return info


@contextlib.contextmanager
def verified_model(run):
    """Downloads the model `run` logged into a temporary folder, checks its files against
    the digest recorded when it was logged, and yields that folder.

    The tracking store is trusted, the artifact store is not: a model whose files changed
    after logging (code included, which runs on load) is refused. A registered version
    (`models:/NAME/...`) is the model of its source run, so that is what is checked.
    """
    uri = model_uri(run.info.run_id)
    with tempfile.TemporaryDirectory() as download:
        local = Path(mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=download))
        _check_digest(run, uri, local)
        yield local


def _check_digest(run, uri, local):
    expected = run.data.tags.get(DIGEST_TAG)
    if expected is None:
        print(f"Note: run {run.info.run_id} recorded no digest of its model (logged by an "
              "earlier version of the kit); loading it unverified.")
    elif folder_digest(local) != expected:
        raise ModelChangedError(
            f"The files of {uri} (run {run.info.run_id}) differ from the ones logged "
            "(SHA-256 mismatch): the artifact store was changed. Refusing to load them; "
            "restore the artifacts or retrain.")


def model_uri(run_id):
    return f"runs:/{run_id}/model"


def source_run_id(uri):
    """The run that logged the model at `uri` (`runs:/...` or `models:/NAME/...`)."""
    try:
        return mlflow.models.get_model_info(uri).run_id
    except mlflow.exceptions.MlflowException as error:
        raise RunNotFoundError(f"No model at {uri} ({tracking_uri()}): "
                               f"{error.message.splitlines()[0]}") from None


def register_model(run_id, name, alias=None):
    """Registers the run's model as a new version of `name` (and `alias`); returns the
    version. A run of another store, or without a logged model, registers nothing."""
    run = stored_run(run_id)
    if run is None or run.data.tags.get("model_logged") != "true":
        raise RunNotFoundError(
            f"Run {run_id} {'is not in' if run is None else 'has no logged model in'} the "
            f"tracking store {tracking_uri()}: nothing was registered. Point "
            "MLFLOW_TRACKING_URI at the store that has it, or train it there.")
    version = mlflow.register_model(model_uri(run_id), name)
    also = [f"models:/{name}/latest"]
    if alias:
        mlflow.MlflowClient().set_registered_model_alias(name, alias, version.version)
        also.append(f"models:/{name}@{alias}")
    print(f"Registered {name} version {version.version}: models:/{name}/{version.version} "
          f"(also {', '.join(also)})")
    return version.version


def stored_run(run_id):
    """The run `run_id` of the current tracking store, or None if the store has none."""
    quiet_mlflow()
    uri = tracking_uri()
    mlflow.set_tracking_uri(uri)
    with store_lock(uri):  # the first client of a SQLite store migrates it
        try:
            return mlflow.MlflowClient().get_run(run_id)
        except mlflow.exceptions.MlflowException as error:
            if error.error_code == "RESOURCE_DOES_NOT_EXIST":
                return None
            raise


def find_run(experiment_name, run_id=None, accept=None, wanted=""):
    """The run `run_id`, or the latest finished run that logged a model (and, given the
    predicate `accept`, that it accepts; `wanted` says which in the error).

    Raises `RunNotFoundError` (a user error) when nothing or several runs match.
    """
    if run_id is not None and not run_id.strip():
        raise RunNotFoundError("--run-id is empty; give a run id or its first characters, "
                               "as the compare step prints them.")
    experiment = existing_experiment(experiment_name)
    runs = [] if experiment is None else mlflow.search_runs(
        [experiment.experiment_id], order_by=["attributes.start_time DESC"],
        output_format="list")
    with_model = [run for run in runs if run.data.tags.get("model_logged") == "true"
                  and (accept is None or accept(run))]
    if run_id is None and with_model:
        return with_model[0]
    matches = [run for run in runs if run.info.run_id.startswith(run_id or "\0")]
    if len(matches) == 1:
        return matches[0]
    if run_id:
        raise RunNotFoundError(f"No run matches --run-id {run_id!r} in experiment "
                               f"{experiment_name!r} ({tracking_uri()}); {len(runs)} run(s) "
                               f"there: python -m workflows.{experiment_name} compare lists them.")
    raise RunNotFoundError(f"No trained model{' ' + wanted if wanted else ''} yet in "
                           f"{tracking_uri()}; train one first: python -m "
                           f"workflows.{experiment_name} train (--help shows the options).")


def runs_table(experiment_name, columns, sort_by, ascending=False, filter_string=""):
    """Rows (dicts) for `columns` of an experiment's runs, sorted by `sort_by`.

    Column names are MLflow's: `params.x`, `metrics.y`, `tags.z`, or run attributes
    (`run_id`, `start_time`, `status`); missing values are empty strings.
    """
    experiment = use_experiment(experiment_name)
    frame = mlflow.search_runs([experiment.experiment_id], filter_string=filter_string)
    if frame.empty:
        return []
    if sort_by in frame:
        frame = frame.sort_values(sort_by, ascending=ascending, na_position="last")
    rows = []
    for _, record in frame.iterrows():
        rows.append({column: _cell(record.get(column)) for column in columns})
    return rows


def _cell(value):
    if value is None or (isinstance(value, float) and value != value):
        return ""
    if isinstance(value, float):
        return f"{value:.4f}"
    if hasattr(value, "strftime"):
        return value.strftime("%Y-%m-%d %H:%M")
    return str(value)


def format_table(rows, columns, style="text"):
    """`rows` as an aligned text table, CSV or a Markdown table."""
    headers = [column.split(".", 1)[-1] for column in columns]
    if style == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(headers)
        writer.writerows([[row[c] for c in columns] for row in rows])
        return buffer.getvalue().rstrip("\n")
    if style == "markdown":
        lines = ["| " + " | ".join(headers) + " |", "|" + " --- |" * len(headers)]
        lines += ["| " + " | ".join(row[c] for c in columns) + " |" for row in rows]
        return "\n".join(lines)
    widths = [max([len(header)] + [len(row[column]) for row in rows])
              for header, column in zip(headers, columns, strict=True)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(row[c].ljust(w) for c, w in zip(columns, widths, strict=True))
              for row in rows]
    return "\n".join(lines)
