"""`benchmarks/gpu_check.sh` end to end on a tiny config, with TensorFlow hidden from the
steps it runs (as on a JAX-only GPU machine): every step within its limit, the results
written from the MLflow runs, a SIGTERM obeyed and the stopped training resumed."""

import json
import os
import subprocess
import sys

import pytest

from tests.data_prep.fixtures import generated_spa_lines, write_spa_eng_zip
from tests.workflows.jax_only import HIDE_TENSORFLOW, ROOT

GPU_CHECK = ROOT / "benchmarks" / "gpu_check.sh"
TINY = ("--epochs 3 --set embed_dim=16 --set dense_dim=32 --set num_heads=2 "
        "--set encoder_layers=1 --set decoder_layers=1 --set batch_tokens=512 "
        "--set bucket_width=20 --set bleu_sentences=8 --set validation_pairs=64")
STOP_AFTER = 45  # seconds before the second training's SIGTERM: it trains by then


@pytest.mark.integration
@pytest.mark.slow
def test_the_gpu_check_trains_evaluates_translates_and_reports_without_tensorflow(tmp_path):
    hidden = tmp_path / "hide_tensorflow"
    hidden.mkdir()
    (hidden / "sitecustomize.py").write_text(HIDE_TENSORFLOW)  # every step's interpreter
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip", generated_spa_lines())
    env = {**os.environ, "GPU_CHECK_STAGE": str(tmp_path / "stage"), "GPU_CHECK_WHEELS": "none",
           "SPA_ENG_PATH": str(archive), "GPU_CHECK_PYTHON": sys.executable,
           "JAX_PLATFORMS": "cpu"}
    env.pop("MLFLOW_TRACKING_URI", None)
    stage = subprocess.run([GPU_CHECK, "stage"], env=env,
                           capture_output=True, text=True, timeout=300)
    assert stage.returncode == 0, stage.stderr[-3000:]
    out = tmp_path / "out"
    env.update(PYTHONPATH=f"{hidden}:{ROOT}", GPU_CHECK_MINUTES="2", GPU_CHECK_ALLOW_CPU="1",
               GPU_CHECK_TRAIN_ARGS=TINY, GPU_CHECK_RESULTS=str(tmp_path / "gpu.json"),
               GPU_CHECK_STOP_AFTER=str(STOP_AFTER), GPU_CHECK_STOP_MINUTES="1.5")
    check = subprocess.run([GPU_CHECK, "run", str(out)], env=env,
                           capture_output=True, text=True, timeout=600)
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert check.returncode == 0, (steps, check.stderr[-3000:])
    assert [(s["step"], s["status"]) for s in steps] == [
        ("train", 0), ("evaluate", 0), ("translate", 0), ("results", 0), ("stop", 130),
        ("resume", 0)], check.stdout[-3000:]
    assert "tensorflow" not in (out / "train.log").read_text().lower()
    assert len((out / "translate.log").read_text().strip().splitlines()) >= 3
    results = json.loads((tmp_path / "gpu.json").read_text())
    (row,) = results["runs"]
    check_figures = results["check"]  # nvidia-smi found nothing here: no busy share
    assert check_figures["seconds_to_first_batch"] > 0 and check_figures["nvidia_smi_samples"] == 0
    assert check_figures["test_sentences"] == row["test_sentences"] > 0
    assert row["backend"].startswith("jax") and row["trained_epochs"] == 3
    assert {"test_greedy_bleu", "test_beam4_bleu", "steady_training_share"} <= set(row)
    assert row["train_wall_minutes"] < 2
    stop = next(s for s in steps if s["step"] == "stop")
    assert stop["seconds"] < STOP_AFTER + 10  # a forced exit comes 8 s after the signal
    assert "Interrupted" in (out / "stop.log").read_text()
    resumed = (out / "resume.log").read_text()
    assert "Resuming run" in resumed and "\nEpoch " in resumed  # and trained on


def run_check(tmp_path, **settings):
    env = {**os.environ, "GPU_CHECK_STAGE": str(tmp_path / "stage"), **settings}
    return subprocess.run([GPU_CHECK, "run", str(tmp_path / "out")], env=env,
                          capture_output=True, text=True, timeout=60)


def stage_folder(tmp_path):
    (tmp_path / "stage" / "work").mkdir(parents=True)
    (tmp_path / "stage" / "spa-eng.zip").write_bytes(b"")


def test_the_gpu_check_refuses_at_once_without_its_staged_data_or_a_gpu(tmp_path):
    unstaged = run_check(tmp_path, GPU_CHECK_ALLOW_CPU="1")
    assert unstaged.returncode == 2 and unstaged.stdout == ""
    assert len(unstaged.stderr.splitlines()) == 1 and "gpu_check.sh stage" in unstaged.stderr
    stage_folder(tmp_path)
    fake = tmp_path / "bin" / "nvidia-smi"  # a driver that finds no GPU
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'No devices were found' >&2\nexit 6\n")
    fake.chmod(0o755)
    no_gpu = run_check(tmp_path, PATH=f"{fake.parent}:{os.environ['PATH']}")
    assert no_gpu.returncode == 2 and no_gpu.stdout == ""
    assert len(no_gpu.stderr.splitlines()) == 1 and "no GPU" in no_gpu.stderr
    assert not (tmp_path / "out").exists()


def test_the_gpu_check_fails_when_a_step_fails(tmp_path):
    stage_folder(tmp_path)
    failing = run_check(tmp_path, GPU_CHECK_ALLOW_CPU="1", GPU_CHECK_PYTHON="false",
                        GPU_CHECK_STOP_AFTER="0", GPU_CHECK_RESULTS=str(tmp_path / "gpu.json"))
    assert failing.returncode == 1
    assert "failed: train evaluate translate results" in failing.stderr
    steps = [json.loads(line) for line in (tmp_path / "out" / "steps.jsonl").read_text()
             .splitlines()]
    assert [step["status"] for step in steps] == [1, 1, 1, 1]
