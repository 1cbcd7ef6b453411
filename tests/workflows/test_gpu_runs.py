"""`benchmarks/gpu_runs.py` reports the GPU runs of a store, with honest derived figures."""

import json

import mlflow
import pytest

from benchmarks import gpu_runs


@pytest.fixture
def store(tmp_path, restore_tracking_uri, new_store):
    mlflow.set_tracking_uri(new_store(tmp_path / "mlflow.db"))
    experiment = mlflow.set_experiment("translation")
    with mlflow.start_run(experiment_id=experiment.experiment_id) as gpu:
        mlflow.set_tags({"accelerator": "NVIDIA H100 80GB HBM3", "backend": "jax",
                         "backend_version": "0.11.2", "keras_version": "3.15.1",
                         "command": "python -m workflows.translation train --preset gpu"})
        mlflow.log_params({"model": "transformer", "preset": "gpu", "parameters": "50000000"})
        mlflow.log_metrics({"train_minutes": 12.5, "steady_target_tokens_per_second": 3.0e5,
                            "mean_target_tokens_per_second": 2.0e5, "train_step_programs": 5,
                            "test_beam4_bleu": 50.1})
        for step, (busy, memory) in enumerate([(0, 900), (0, 1000), (80, 60000), (90, 61000)]):
            mlflow.log_metrics({"system/gpu_0_utilization_percentage": busy,  # as MLflow
                                "system/gpu_0_memory_usage_megabytes": memory}, step=step)
    with mlflow.start_run(experiment_id=experiment.experiment_id):
        mlflow.set_tags({"device": "cpu (Intel Xeon, 2 cores)"})
    return gpu.info.run_id


def test_gpu_runs_are_reported_with_the_share_of_the_bf16_peak(store, tmp_path):
    output = tmp_path / "gpu.json"
    assert gpu_runs.main(["--output", str(output)]) == 0
    (row,) = json.loads(output.read_text())["runs"]  # the CPU run is left out
    assert row["run_id"] == store and row["device"] == "NVIDIA H100 80GB HBM3"
    assert row["backend"] == "jax 0.11.2" and row["test_beam4_bleu"] == 50.1
    assert row["steady_useful_tokens_per_second"] == 3.0e5  # after epoch 1's compiling
    assert row["bf16_peak_share"] == pytest.approx(6 * 5e7 * 3e5 / 989e12)
    assert row["command"].endswith("train --preset gpu")
    assert (row["system_gpu_samples"], row["system_gpu_busy_share"]) == (4, 0.5)
    assert row["system_gpu_mean_utilization"] == 42.5
    assert row["system_gpu_peak_memory_megabytes"] == 61000


def test_a_store_without_gpu_runs_writes_nothing(tmp_path, restore_tracking_uri, capsys,
                                                  new_store):
    mlflow.set_tracking_uri(new_store(tmp_path / "empty.db"))
    assert gpu_runs.main(["--output", str(tmp_path / "gpu.json")]) == 2
    assert not (tmp_path / "gpu.json").exists() and "No run made on a GPU" in \
        capsys.readouterr().err
