"""Several real processes at once: a new tracking store, one experiment, one cache entry.

Each test starts its processes together (each waits, once imported, until all are
ready, so they reach the contended step at the same moment), bounded in number and time, then checks
that every process succeeded and that what they share still works.
"""

import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import mlflow
import pytest

from tests.data_prep.fixtures import write_imdb_folder, write_tar_gz

pytestmark = pytest.mark.integration  # each test starts servers or other processes

PROCESSES = 4


def start_together(script, env, count=PROCESSES):
    """Starts `count` Python processes running `script` at one shared instant: each
    imports what the scripts use (the slow part of starting), says it is ready, and
    waits for the word to go, given once all are ready."""
    barrier = Path(tempfile.mkdtemp(prefix="start-together-",  # in the test's folder
                                    dir=Path(env["NLPKIT_WORK_DIR"]).parent))
    prologue = ("import os, pathlib, time\nimport mlflow\nfrom data_prep import imdb\n"
                "from workflows.core import store as mlflow_store\n"
                f"barrier = pathlib.Path({str(barrier)!r})\n"
                "(barrier / f'ready-{os.getpid()}').touch()\n"
                "while not (barrier / 'go').exists():\n    time.sleep(0.01)\n")
    processes = [subprocess.Popen([sys.executable, "-c", prologue + textwrap.dedent(script)],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True) for _ in range(count)]
    deadline = time.monotonic() + 180
    while len(list(barrier.glob("ready-*"))) < count:
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes), \
            [p.communicate()[1][-2000:] for p in processes if p.poll() is not None]
        time.sleep(0.05)
    (barrier / "go").touch()
    return processes


def finish(processes, timeout=240):
    results = []
    for process in processes:
        out, err = process.communicate(timeout=timeout)
        results.append((process.returncode, out, err))
    failures = [err[-2000:] for code, _, err in results if code != 0]
    assert not failures, failures
    return results


@pytest.fixture
def env(tmp_path, monkeypatch):
    import os

    environment = {**os.environ, "NLPKIT_WORK_DIR": str(tmp_path / "work"),
                   "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}",
                   "TF_CPP_MIN_LOG_LEVEL": "3"}
    monkeypatch.setenv("MLFLOW_TRACKING_URI", environment["MLFLOW_TRACKING_URI"])
    return environment


LOG_ONE_RUN = """
    import mlflow
    from workflows.core import store as mlflow_store

    mlflow_store.use_experiment("race")
    with mlflow.start_run():
        mlflow.log_metric("value", 1.0)
"""


def assert_runs_recorded(count):
    experiment = mlflow.get_experiment_by_name("race")
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list")
    assert len(runs) == count and all(r.info.status == "FINISHED" for r in runs)
    assert all(r.data.metrics["value"] == 1.0 for r in runs)


def test_first_use_of_a_new_store_by_several_processes(env, restore_tracking_uri):
    finish(start_together(LOG_ONE_RUN, env))
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    assert_runs_recorded(PROCESSES)
    with mlflow.start_run(experiment_id=mlflow.get_experiment_by_name("race").experiment_id):
        mlflow.log_metric("value", 1.0)  # the store still takes writes
    assert_runs_recorded(PROCESSES + 1)


def test_several_processes_create_the_same_experiment(env, restore_tracking_uri):
    from workflows.core import store as mlflow_store

    mlflow_store.use_experiment("another")  # the store exists; the experiment does not
    finish(start_together(LOG_ONE_RUN, env))
    assert_runs_recorded(PROCESSES)



def test_a_new_store_killed_while_made_is_made_again(env, restore_tracking_uri):
    """MLflow's schema is built beside the store and renamed into place: a process killed
    halfway leaves no store, and the next command makes a whole one."""
    database = Path(env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"))
    building = database.with_name(f".{database.name}.building")
    process, = start_together(LOG_ONE_RUN, env, count=1)
    deadline = time.monotonic() + 120
    while not building.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)  # into the migrations
    process.kill()
    process.wait()
    assert building.exists() and not database.exists()
    from workflows.core import store as mlflow_store

    mlflow_store.use_experiment("race")
    with mlflow.start_run():
        mlflow.log_metric("value", 1.0)
    assert_runs_recorded(1)
    assert not building.exists()


def test_a_half_built_store_without_runs_is_moved_aside_and_made_again(
        env, restore_tracking_uri, capsys):
    """A store built in place by an earlier version and stopped halfway (some of MLflow's
    tables, no run) could never be opened again; it is kept aside, and a whole one made."""
    database = Path(env["MLFLOW_TRACKING_URI"].removeprefix("sqlite:///"))
    database.parent.mkdir()
    with sqlite3.connect(database) as half:
        half.execute("CREATE TABLE runs (run_uuid VARCHAR(32) PRIMARY KEY)")
        half.execute("CREATE TABLE datasets (dataset_uuid VARCHAR(36))")
    half.close()
    from workflows.core import store as mlflow_store

    mlflow_store.use_experiment("race")
    assert "was left half-built by a stopped command" in capsys.readouterr().err
    with sqlite3.connect(database.with_name("mlflow.db.incomplete")) as kept:
        assert {name for name, in kept.execute("SELECT name FROM sqlite_master")} == \
            {"runs", "datasets", "sqlite_autoindex_runs_1"}
    kept.close()
    with mlflow.start_run():
        mlflow.log_metric("value", 1.0)
    assert_runs_recorded(1)

def test_several_processes_prepare_the_same_data(env, tmp_path):
    archive = write_tar_gz(write_imdb_folder(tmp_path / "data", reviews_per_class=12),
                           tmp_path / "aclImdb_v1.tar.gz")
    from data_prep import cache, imdb

    stale = tmp_path / "work" / "extracted"
    stale.mkdir(parents=True)
    entry = f"{imdb.ACL_IMDB.name}-{cache.sha256_of(archive)[:16]}"
    (stale / f"{entry}.partial-killed").mkdir()  # left by a killed extraction
    script = f"""
        import sys
        from data_prep import imdb
        prepared = imdb.prepare({str(archive)!r}, imdb.ImdbSettings(max_tokens=50), verbose=False)
        assert len(prepared.texts("train")) + len(prepared.texts("val")) == 24
        print(prepared.directory)
    """
    results = finish(start_together(script, env, count=3))
    assert len({out.split()[-1] for _, out, _ in results}) == 1  # one entry, shared
    assert [p.name for p in stale.iterdir() if not p.name.startswith(".")] == [entry]


def test_a_stale_partial_entry_is_removed_by_the_next_producer(tmp_path):
    from data_prep import cache

    target = tmp_path / "entry"
    (tmp_path / "entry.partial-99999").mkdir()
    (tmp_path / "entry.partial-88888").write_text("half")
    cache.write_atomically(target, {"x": 1}, lambda tmp: (tmp / "data.txt").write_text("ok"))
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == ["entry"]
    assert cache.is_complete(target)
    # A complete entry is reused, never rewritten or deleted.
    cache.write_atomically(target, {"x": 1}, lambda tmp: pytest.fail("rewrote a complete entry"))
    assert (target / "data.txt").read_text() == "ok"
