"""A tiny IMDB tree, a work folder and an MLflow store shared by the workflow tests."""

import contextlib
import os

import pytest

from tests.data_prep.fixtures import write_imdb_folder
from workflows import imdb_sentiment as workflow

COMMON = ["--epochs", "2", "--set", "max_tokens=300", "--set", "batch_size=8"]
BOW = ["--set", "hidden_units=4"]
RNN = ["--set", "embed_dim=8", "--set", "units=4"]


STORE_ENVIRONMENT = {}  # the shared store's variables, as `store` sets them


@pytest.fixture(scope="package")
def store(tmp_path_factory, new_store):
    root = tmp_path_factory.mktemp("imdb_workflow")
    data = write_imdb_folder(root / "data", reviews_per_class=24, unlabelled=20).parent
    environment = {"NLPKIT_WORK_DIR": str(root / "work"), "NLPKIT_IMDB_PATH": str(data),
                   "MLFLOW_TRACKING_URI": new_store(root / "mlflow" / "mlflow.db")}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in environment.items():
            patch.setenv(name, value)
        models = ["--model", "bow", "--model", "bilstm"]
        assert workflow.main(["run", *models, *COMMON, *BOW, *RNN]) == 0
        STORE_ENVIRONMENT.update(environment)
        yield root
    STORE_ENVIRONMENT.clear()


@pytest.fixture(autouse=True)
def shared_store_environment(request, monkeypatch):
    """A test of the shared store sees its variables, whatever another module's fixture
    restored when it ended: a module fixture that was set up before the package's store
    and torn down while it lives puts back the variables it found."""
    if "store" in request.fixturenames:
        request.getfixturevalue("store")
        for name, value in STORE_ENVIRONMENT.items():
            monkeypatch.setenv(name, value)


@contextlib.contextmanager
def in_shared_store():
    """The shared store's variables, for a module fixture built on it."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in STORE_ENVIRONMENT.items():
            patch.setenv(name, value)
        yield


def first_runs_by_model():
    """Each model's first run in the shared store: the runs `store` made, whatever other
    tests added since (so no test depends on which ran before it)."""
    import mlflow

    mlflow.set_tracking_uri(os.environ["MLFLOW_TRACKING_URI"])  # wherever others pointed it
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time DESC"])
    return {run.data.params["model"]: run for run in runs}  # the earliest wins


@pytest.fixture
def own_store(store, tmp_path, monkeypatch, new_store, restore_tracking_uri):
    """A new MLflow store and run folders for one test (its folder, `tmp_path`), with the
    prepared data of the shared one: what it trains never meets the run folder of
    another test's store, whichever ran first."""
    work = tmp_path / "work"
    work.mkdir()
    for entry in (store / "work").iterdir():
        if entry.name != "runs":
            (work / entry.name).symlink_to(entry)
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(work))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", new_store(tmp_path / "mlflow.db"))
    return tmp_path


@pytest.fixture
def restore_tracking_uri():
    """For tests that point MLflow elsewhere: later tests find the shared store again."""
    import mlflow

    previous = mlflow.get_tracking_uri()
    yield
    mlflow.set_tracking_uri(previous)


@pytest.fixture
def isolated_store(tmp_path, monkeypatch, new_store, restore_tracking_uri):
    """A work folder and a new store, nothing shared: for a command that must refuse
    before it trains."""
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", new_store(tmp_path / "mlflow.db"))
    return tmp_path
