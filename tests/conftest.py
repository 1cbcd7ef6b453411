"""Test-wide setup: quiet TensorFlow, deterministic seeds, ready-made MLflow stores."""

import os
import shutil
import sqlite3

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def seeded():
    import keras  # here, not at the top: the runner that starts the workers needs none

    keras.utils.set_random_seed(1234)


@pytest.fixture(scope="session")
def new_store(tmp_path_factory):
    """`new_store(path)`: the URI of a new SQLite MLflow store at `path`, copied from one
    migrated once per test process (MLflow's ~60 schema migrations take about a second
    per store). The copy holds no experiment, so MLflow makes its Default experiment
    there as in any new store; first use of an empty store is tested on its own
    (test_concurrency)."""
    import mlflow

    mlflow.get_tracking_uri()  # loaded now: its submodules' import needs the whole package
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    folder = tmp_path_factory.mktemp("store_template")
    template = folder / "mlflow.db"
    SqlAlchemyStore(f"sqlite:///{template}", (folder / "artifacts").as_uri()).engine.dispose()
    with sqlite3.connect(template) as database:
        database.execute("DELETE FROM experiments")  # the Default one, rooted here
    database.close()

    def make(path):
        if not path.exists():  # a store already there is kept
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, path)
        return f"sqlite:///{path}"

    return make
