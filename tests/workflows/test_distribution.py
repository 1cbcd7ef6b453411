"""Data parallelism: the same training on two devices as on one, one run, one model.

Each check trains the tiny translator in a fresh process: on TensorFlow with two
logical CPU devices (`MirroredStrategy`), on JAX with two host devices
(`DataParallel`). The loss after an epoch must match single-device training on the
same global batches within a stated tolerance, and the store must hold exactly one
run and one logged model per training.
"""

import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.data_prep.fixtures import generated_spa_lines, write_spa_eng_zip

ROOT = Path(__file__).resolve().parents[2]
# Per-replica means of a token-weighted loss, float32 sums in another order: close, not equal.
RELATIVE_TOLERANCE = 0.02
SCRIPT = """
import json, sys
from pathlib import Path
if sys.argv[1] == "mirrored":  # two logical CPU devices, before TensorFlow starts
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
import mlflow
from workflows import translation
code = translation.main(["train", "--preset", "cpu", "--epochs", "2", "--set", "embed_dim=16",
                         "--set", "dense_dim=32", "--set", "num_heads=2", "--set", "batch_size=16",
                         "--set", "bleu_sentences=8", "--set", "dropout=0", "--set",
                         "bucketing=false", "--distribution", sys.argv[1]])  # one shape
runs = mlflow.search_runs(experiment_names=["translation"], output_format="list")
models = mlflow.search_logged_models(experiment_ids=[runs[0].info.experiment_id],
                                     output_format="list")
print(json.dumps({"code": code, "runs": len(runs), "models": len(models),
                  "loss": [runs[0].data.metrics["loss"]],
                  "history": [m.value for m in mlflow.MlflowClient().get_metric_history(
                      runs[0].info.run_id, "loss")],
                  "devices": runs[0].data.tags.get("devices"),
                  "distribution": runs[0].data.params.get("distribution")}))
"""


def train_tiny_translator(root, distribution, backend, host_devices=1):
    archive = root.parent / "spa-eng.zip"
    if not archive.exists():
        write_spa_eng_zip(archive, generated_spa_lines())
    environment = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": str(ROOT),
                   "NLPKIT_WORK_DIR": str(root / "work"), "NLPKIT_SPA_ENG_PATH": str(archive),
                   "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
                   "XLA_FLAGS": f"--xla_force_host_platform_device_count={host_devices}"}
    result = subprocess.run([sys.executable, "-c", SCRIPT, distribution], cwd=ROOT,
                            env=environment, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("backend, distribution, devices", [
    ("tensorflow", "mirrored", 2), ("jax", "data_parallel", 2)])
def test_two_devices_train_like_one(tmp_path, backend, distribution, devices):
    pytest.importorskip(backend)
    write_spa_eng_zip(tmp_path / "spa-eng.zip", generated_spa_lines())
    with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two processes at once
        single = pool.submit(train_tiny_translator, tmp_path / "single", "none", backend)
        parallel = pool.submit(train_tiny_translator, tmp_path / "parallel", distribution,
                               backend, host_devices=devices)
        single, parallel = single.result(), parallel.result()
    for result in (single, parallel):
        assert (result["code"], result["runs"], result["models"]) == (0, 1, 1)
        assert len(result["history"]) == 2  # one loss per epoch, logged once
    assert parallel["distribution"] == distribution
    assert len(parallel["devices"].split(", ")) == devices
    assert parallel["history"] == pytest.approx(single["history"], rel=RELATIVE_TOLERANCE)


def test_unsupported_placements_are_refused_with_the_way_out(monkeypatch):
    from workflows.distribution import DistributionError, placed

    with pytest.raises(DistributionError, match="KERAS_BACKEND=jax"), placed("data_parallel"):
        pass
    monkeypatch.setenv("KERAS_DISTRIBUTION_NUM_PROCESSES", "2")
    with pytest.raises(DistributionError, match="keras-team/keras#20585"), placed("mirrored"):
        pass
    monkeypatch.delenv("KERAS_DISTRIBUTION_NUM_PROCESSES")
    from workflows import translation  # refused before any data is looked for

    assert translation.main(["train", "--distribution", "data_parallel"]) == 2
    with placed("none") as placement:
        assert len(placement.devices) == 1
        batches = [1, 2]
        assert placement.batches(batches) is batches


def test_batches_are_padded_to_the_device_count_with_zero_weight_rows():
    import numpy as np

    from workflows.distribution import EvenBatches
    from workflows.seq2seq.batching import PairBatches

    rows = [np.arange(1, n + 2, dtype="int32") for n in range(5)]
    inner = PairBatches(rows, rows, batch_size=3)
    even = EvenBatches(inner, devices=2)
    assert len(even[1][1]) == len(inner[1][1]) == 2  # 5 rows: batches of 3 and 2
    inputs, labels, weights = even[0]
    assert labels.shape[0] == 4 and not weights[3].any() and not labels[3].any()
    assert (weights[:3] == inner[0][2]).all()
    assert (inputs["source"][:3] == inner[0][0]["source"]).all()
