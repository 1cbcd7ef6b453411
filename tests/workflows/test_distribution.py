"""Data parallelism: the same training on two devices as on one, one run, one model.

Each check trains a tiny model in fresh processes: the translator on JAX with two
processes of two host devices each (`DataParallel`, killed and resumed); on TensorFlow
with two logical CPU devices (`MirroredStrategy`, test_distribution_mirrored.py); the
IMDB BiLSTM with two JAX processes (test_distribution_imdb.py). The loss of each epoch
must match single-device training on the same global batches within a stated tolerance,
and the store must hold exactly one run and one logged model per training.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.data_prep.fixtures import generated_spa_lines, write_imdb_folder, write_spa_eng_zip

pytestmark = pytest.mark.integration  # each test starts servers or other processes

ROOT = Path(__file__).resolve().parents[2]
# Per-replica means of a token-weighted loss, float32 sums in another order: close, not equal.
RELATIVE_TOLERANCE = 0.02
SCRIPT = """
import json, os, sys
if sys.argv[1] == "mirrored":  # two logical CPU devices, before TensorFlow starts
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
import importlib
import mlflow
lesson = importlib.import_module(f"workflows.{sys.argv[2]}")
code = lesson.main([*json.loads(sys.argv[3]), "--distribution", sys.argv[1]])
if os.environ.get("KERAS_DISTRIBUTION_PROCESS_ID", "0") != "0":
    print(json.dumps({"code": code}))
    sys.exit()
runs = mlflow.search_runs(experiment_names=[lesson.EXPERIMENT], output_format="list")
models = mlflow.search_logged_models(experiment_ids=[runs[0].info.experiment_id],
                                     output_format="list")
print(json.dumps({"code": code, "runs": len(runs), "models": len(models),
                  "history": [m.value for m in mlflow.MlflowClient().get_metric_history(
                      runs[0].info.run_id, "loss")],
                  "devices": runs[0].data.tags.get("devices"),
                  "distribution": runs[0].data.params.get("distribution")}))
"""
TRANSLATOR = ["train", "--preset", "cpu", "--set", "embed_dim=16", "--set", "dense_dim=32",
              "--set", "num_heads=2", "--set", "batch_size=16", "--set", "bleu_sentences=2",
              "--set", "dropout=0", "--set", "bucketing=false"]  # one shape: one compile
IMDB = ["train", "--model", "bilstm", "--epochs", "2", "--set", "max_tokens=300", "--set",
        "batch_size=8", "--set", "embed_dim=8", "--set", "units=4"]  # token ids: any backend


def environment(root, backend="jax", host_devices=1, processes=None):
    """A lesson's environment under `root` (its own work folder and store); `processes`
    is `(process id, count, coordinator port)` for one of several JAX processes."""
    spa_eng, imdb = root.parent / "spa-eng.zip", root.parent / "imdb"
    if not spa_eng.exists():
        write_spa_eng_zip(spa_eng, generated_spa_lines())
    if not imdb.exists():
        write_imdb_folder(imdb, reviews_per_class=24, unlabelled=4)
    share_prepared_data(root / "work", root.parent / "prepared")
    values = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT),
              "NLPKIT_WORK_DIR": str(root / "work"), "NLPKIT_SPA_ENG_PATH": str(spa_eng),
              "NLPKIT_IMDB_PATH": str(imdb),
              "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
              "XLA_FLAGS": f"--xla_force_host_platform_device_count={host_devices}",
              # compiled steps shared by the processes of a test: a restart does not recompile
              "JAX_COMPILATION_CACHE_DIR": str(root.parent / "jax-cache"),
              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
              "JAX_COMPILATION_CACHE_MAX_SIZE": str(2**30)}  # a size limit: writes are locked
    if processes:
        index, count, port = processes
        values.update(KERAS_DISTRIBUTION_PROCESS_ID=str(index),
                      KERAS_DISTRIBUTION_NUM_PROCESSES=str(count),
                      KERAS_DISTRIBUTION_JOB_ADDRESSES=f"127.0.0.1:{port}")
    return values


def share_prepared_data(work, shared):
    """`work`'s data caches are `shared`'s: the processes of one test prepare their data
    once (the first prepares, the others wait for it), each with run folders of its own."""
    for cache in ("extracted", "prepared", "tokens"):
        (shared / cache).mkdir(parents=True, exist_ok=True)
        if not (work / cache).exists():
            work.mkdir(parents=True, exist_ok=True)
            (work / cache).symlink_to(shared / cache)


def start(root, lesson, argv, distribution, **settings):
    """A lesson's `main(argv)` in a fresh process (see `environment` for `settings`)."""
    return subprocess.Popen(
        [sys.executable, "-c", SCRIPT, distribution, lesson, json.dumps(argv)], cwd=ROOT,
        env=environment(root, **settings), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)


def finish(process, timeout=900):
    """The summary a lesson process printed last, and its whole output."""
    output, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, output[-4000:]
    return json.loads(output.strip().splitlines()[-1]), output


def start_processes(root, lesson, argv, count=2, host_devices=1):
    """`count` JAX processes of one data-parallel run, coordinated on a free local port."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return [start(root, lesson, argv, "data_parallel", host_devices=host_devices,
                  processes=(index, count, port)) for index in range(count)]


def check_trained_like_one_device(parallel, single, devices, distribution, epochs=2):
    """One run and one model in each store, a loss per epoch, the same losses."""
    for result in (single, parallel):
        assert (result["code"], result["runs"], result["models"]) == (0, 1, 1)
        assert len(result["history"]) == epochs  # one loss per epoch, logged once
    assert parallel["distribution"] == distribution
    assert len(parallel["devices"].split(", ")) == devices
    assert parallel["history"] == pytest.approx(single["history"], rel=RELATIVE_TOLERANCE)


@pytest.mark.slow
def test_two_jax_processes_of_two_devices_train_like_one_and_resume_after_a_kill(tmp_path):
    """The tiny translator on one device, then on two local processes (CPU collectives,
    coordinator on 127.0.0.1) of two host devices each, one mesh of four: both processes
    are killed once the first epoch is checkpointed, then restarted."""
    pytest.importorskip("jax")
    argv = [*TRANSLATOR, "--epochs", "2"]
    single = start(tmp_path / "single", "translation", argv, "none")
    processes = start_processes(tmp_path / "processes", "translation", argv, host_devices=2)
    runs = tmp_path / "processes" / "work" / "runs" / "translation"
    deadline = time.monotonic() + 600
    while not any(json.loads(path.read_text())["epoch"] >= 1
                  for path in runs.glob("*/state.json")):
        assert time.monotonic() < deadline and all(p.poll() is None for p in processes), \
            [p.communicate()[0][-3000:] for p in processes]
        time.sleep(0.05)
    for process in processes:
        process.kill()
        process.communicate()
    (chief, output), (worker, _) = map(finish, start_processes(
        tmp_path / "processes", "translation", argv, host_devices=2))
    assert "Resuming run" in output and worker == {"code": 0}
    check_trained_like_one_device(chief, finish(single)[0], 4, "data_parallel")


def test_unsupported_placements_are_refused_with_the_way_out(monkeypatch, capsys):
    from workflows.core.devices import (
        DistributionError,
        _check_process_settings,
        check,
        placed,
    )

    with pytest.raises(DistributionError, match="KERAS_BACKEND=jax"), placed("data_parallel"):
        pass
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    with pytest.raises(DistributionError, match="keras-team/keras#20585"), placed("mirrored"):
        pass
    with pytest.raises(DistributionError, match="needs --distribution data_parallel"):
        check("none")
    with pytest.raises(DistributionError, match="KERAS_DISTRIBUTION_JOB_ADDRESSES and "
                                                "KERAS_DISTRIBUTION_PROCESS_ID"):
        _check_process_settings()
    monkeypatch.setenv("KERAS_DISTRIBUTION_JOB_ADDRESSES", "127.0.0.1:1234")
    monkeypatch.setenv("KERAS_DISTRIBUTION_PROCESS_ID", "2")
    with pytest.raises(DistributionError, match="must be 0 to 1, got '2'"):
        _check_process_settings()
    from workflows import translation  # refused before any data is looked for

    assert translation.main(["run", "--distribution", "data_parallel"]) == 2
    assert "use the train step" in capsys.readouterr().err
    monkeypatch.delenv("KERAS_DISTRIBUTION_NUM_PROCESSES")
    assert translation.main(["train", "--distribution", "data_parallel"]) == 2
    with placed("none") as placement:
        assert len(placement.devices) == 1
        batches = [1, 2]
        assert placement.batches(batches) is batches


COMPILES = """
import logging, sys
import jax, keras, numpy as np
from workflows.core.devices import placed
jax.config.update("jax_log_compiles", True)
compiles = []
class CountTrainStepCompiles(logging.Handler):
    def emit(self, record):
        message = record.getMessage()
        if message.startswith("Finished XLA compilation") and "train_step" in message:
            compiles.append(message)
logging.getLogger("jax").addHandler(CountTrainStepCompiles())
with placed("data_parallel"):
    model = keras.Sequential([keras.layers.Embedding(20, 4),
                              keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
    model.compile("adam", "mse", metrics=["mae"])
    rng = np.random.default_rng(0)
    for length in (3, 5, 3, 5, 3):  # each fit's first batch: one of two shapes
        x = rng.integers(1, 20, (32, length))
        model.fit(x, x[:, :1] % 2, batch_size=8, epochs=1, verbose=0)
print(len(compiles))
"""


def test_data_parallel_on_one_device_compiles_the_train_step_once_per_batch_shape():
    """Keras' DataParallel over one device compiled it again at the first batch of
    most `fit` calls (5 compiles here, against 2 on the plain path)."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    env.pop("XLA_FLAGS", None)  # one host device
    result = subprocess.run([sys.executable, "-c", COMPILES], capture_output=True, text=True,
                            env=env, timeout=300, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split()[-1] == "2"


def test_batches_are_padded_to_the_device_count_with_zero_weight_rows():
    import numpy as np

    from data_prep.text import BucketPlan
    from workflows.core.devices import EvenBatches
    from workflows.seq2seq.batching import PairBatches

    rows = [np.arange(1, n + 2, dtype="int32") for n in range(5)]
    inner = PairBatches(rows, rows, BucketPlan.single(6, 3))  # 5 rows: 3, then 2 + a top-up
    even = EvenBatches(inner, devices=2)
    assert [len(even[i][1]) for i in range(2)] == [4, 4] and len(inner[1][1]) == 3
    assert not even[1][2][2:].any()  # the top-up row and the device padding weigh 0
    inputs, labels, weights = even[0]
    assert labels.shape[0] == 4 and not weights[3].any() and not labels[3].any()
    assert (weights[:3] == inner[0][2]).all()
    assert (inputs["source"][:3] == inner[0][0]["source"]).all()
