"""The logged model: exported atomically from a run's folder and logged as an MLflow
pyfunc with just the code it needs and a digest of its files; loaded back verified
against that digest, fed checked inputs, asked in chunks with progress."""

import contextlib
import importlib.metadata
import shutil
import tempfile
import warnings
from pathlib import Path

import mlflow
import numpy as np
from tqdm import tqdm

from data_prep.cache import folder_digest, remove
from process.errors import UserError
from workflows.core.store import PROJECT_ROOT


class ModelChangedError(UserError):
    """A logged model's files differ from what was logged: they are not loaded."""


# what the packages' models import of core: compiled steps, and the configs that the
# model families' modules declare beside their classifiers
SHIPPED_CORE = ("__init__.py", "batches.py", "compilation.py", "config.py", "devices.py",
                "export.py", "model_folder.py", "precision.py")
DIGEST_TAG = "model_sha256"  # digest of every file of the run's logged model


# the packages of each Keras backend a logged model needs where it is loaded
BACKEND_PACKAGES = {"tensorflow": ("tensorflow", "tensorflow-text"), "jax": ("jax", "jaxlib"),
                    "torch": ("torch",)}


def model_requirements(*packages):
    """What a logged model needs where it is loaded: Keras, keras-hub, MLflow, the backend
    it was trained on (TensorFlow only there) and `packages`, each at the version
    installed here, where it was trained (so loading it here warns of no mismatch), or
    else as requirements.txt pins it."""
    import keras

    backend = BACKEND_PACKAGES.get(keras.backend.backend(), ())
    names = dict.fromkeys(("keras", "keras-hub", "mlflow", *backend, *packages))
    return [_requirement(name) for name in names]


def _requirement(name):
    try:
        return f"{name}=={importlib.metadata.version(name)}"
    except importlib.metadata.PackageNotFoundError:
        return pinned_requirements(name)[0]


def pinned_requirements(*names):
    """The `name==version` lines of requirements.txt for `names`."""
    pins = {}
    for line in (PROJECT_ROOT / "requirements.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if "==" in line:
            pins[line.split("==")[0].strip().lower()] = line
    missing = [name for name in names if name.lower() not in pins]
    if missing:
        raise KeyError(f"requirements.txt pins none of: {', '.join(missing)}")
    return [pins[name.lower()] for name in names]


def log_pyfunc_model(python_model_file, artifacts, input_example, pip_requirements,
                     packages=(), params=None):
    """Logs a models-from-code pyfunc named `model` with just the code it needs.

    `layers/`, `data_prep/` and `process/` always travel with the model, and `packages` names the
    subpackages of `workflows/` it needs too (e.g. `seq2seq`), shipped alone as
    `workflows/<package>` with the compiled model calls they use and batches
    (`workflows/core/compilation.py`, `batches.py`): a translator does not carry the IMDB
    lesson. It loads in a fresh process that does not have this repository. `params` (name
    -> default) are declared in the signature (inferred with the input example), so callers
    and the model server may pass them. A digest of every file of the logged model is recorded
    in the run's tags (`verified_model` checks it).
    """
    with tempfile.TemporaryDirectory() as staging:
        code_paths = [str(PROJECT_ROOT / name) for name in ("layers", "data_prep", "process")]
        if packages:
            shipped = Path(staging) / "workflows"
            for package in packages:
                shutil.copytree(PROJECT_ROOT / "workflows" / package, shipped / package,
                                ignore=shutil.ignore_patterns("__pycache__"))
            (shipped / "core").mkdir()
            for name in SHIPPED_CORE:
                shutil.copy(Path(__file__).with_name(name), shipped / "core" / name)
            code_paths.append(str(shipped))
        with without_any_hint_warning():
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


def export_and_log_model(export, folder, log=True):
    """Saves the model into the run folder (atomically), then logs it as a pyfunc
    (unless `log` is false: another process than the chief saves its copy, since saving
    weights is a step every process takes together)."""
    from workflows.core.devices import on_this_process

    target = folder / export.artifact
    partial = folder / f".partial-{export.artifact}"
    remove(partial)
    export.save(partial)
    remove(target)
    partial.rename(target)
    if not log:
        return
    remove_pending_models(mlflow.active_run())
    with on_this_process():  # MLflow loads and tries the model: alone
        log_pyfunc_model(
            export.python_model, {export.artifact.split(".")[0]: target},
            export.input_example, model_requirements(*export.requirements),
            packages=export.packages,
            params=export.params)
    mlflow.set_tag("model_logged", "true")


def remove_pending_models(run):
    """Deletes the logged models of `run` that a stop left PENDING mid-log (an export
    that did not finish): the run keeps only the model its finished export logs."""
    from mlflow.entities import LoggedModelStatus

    pending = mlflow.search_logged_models(
        experiment_ids=[run.info.experiment_id], output_format="list",
        filter_string=f"source_run_id = '{run.info.run_id}'")
    for model in pending:
        if model.status == LoggedModelStatus.PENDING:
            mlflow.MlflowClient().delete_logged_model(model.model_id)


@contextlib.contextmanager
def without_any_hint_warning():
    """MLflow warns, as it logs or loads a pyfunc, that predictions typed `Any` go
    unchecked: on purpose here (translations, n-best lists, class probabilities). The
    warnings of the call are recorded, not filtered (MLflow sets its own filters inside
    it), and all but that one are warned again after it."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    for warning in caught:
        if "Any type hint is inferred as AnyType" not in str(warning.message):
            warnings.warn_explicit(warning.message, warning.category, warning.filename,
                                   warning.lineno)


# ## Using a logged model


def load_pyfunc(run):
    """The pyfunc model `run` logged, its files checked against the digest it recorded
    (downloaded to a temporary folder: it is in memory once loaded)."""
    with verified_model(run) as local, without_any_hint_warning():
        return mlflow.pyfunc.load_model(str(local))



def predict_in_chunks(model, texts, label, chunk_size=2048):
    """`model.predict(texts)` chunk by chunk, showing progress; a flat numpy array."""
    outputs = []
    with tqdm(total=len(texts), desc=label, disable=None) as progress:
        for start in range(0, len(texts), chunk_size):
            chunk = texts[start:start + chunk_size]
            outputs.extend(np.asarray(model.predict(chunk)).reshape(-1).tolist())
            progress.update(len(chunk))
    return np.asarray(outputs)


