"""Tiny trainings stopped by SIGTERM at random (seeded) moments, then rerun until done.

`interrupt_until_finished` runs a lesson's `train` command once without a stop (how
long it takes, how many epochs it logs), then again in a fresh store, stopping it at
random moments of the first half of that span (start-up, data, compilation, batches, validation, the
epoch-end work, checkpoints, the export) and rerunning the same command after each stop,
then once more without a stop. Every stop must end the command within 10 s with status
130 and no traceback (or, if the signal came once the training had said its last
line, status 0); the last run must finish with every epoch logged exactly once,
as many as the uninterrupted run's.
"""

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import mlflow
import pytest

from tests.data_prep.fixtures import (
    generated_spa_lines,
    write_imdb_folder,
    write_spa_eng_zip,
    write_tiny_causal_lm_preset,
    write_tiny_encoder,
)
from tests.workflows.test_retrieval import FILLER, MORE_TOPICS, write_beir

ROOT = Path(__file__).resolve().parents[2]
STOP_SECONDS = 10  # a stop ends the command within this
# Before the command's first lines run (the interpreter's start, the module's imports:
# up to 0.6 s on 2 busy cores here) a stop signal kills it, as it kills any program
EARLIEST_STOP = 1.0
# A training's last line: a stop after it is ignored (`run_main`), the status stays 0
FINISHED_LINE = "In the MLflow UI"


def stop_once_at(monkeypatch, epoch, step):
    """A stop (Ctrl-C) at the end of batch `step` of epoch `epoch` (0-based), once."""
    from workflows.core import fitting

    original = fitting._BatchGuard.on_train_batch_end

    def stop(self, batch, logs=None):
        original(self, batch, logs)
        if (self.state.epoch, self.state.step) == (epoch, step):
            monkeypatch.setattr(fitting._BatchGuard, "on_train_batch_end", original)
            raise KeyboardInterrupt

    monkeypatch.setattr(fitting._BatchGuard, "on_train_batch_end", stop)


def translation(root):
    archive = write_spa_eng_zip(root / "spa-eng.zip", generated_spa_lines())
    return ("translation", {"NLPKIT_SPA_ENG_PATH": str(archive)}, [
        "workflows.translation", "train", "--preset", "cpu", "--epochs", "3", "--set",
        "patience=3", "--set", "embed_dim=16", "--set", "dense_dim=32", "--set",
        "num_heads=2", "--set", "batch_tokens=256", "--set", "bleu_sentences=16",
        "--set", "checkpoint_every_steps=5", "--average-epochs", "2"])


def sentiment_rnn(root):
    data = write_imdb_folder(root / "imdb", reviews_per_class=24, unlabelled=4).parent
    return ("imdb_sentiment", {"NLPKIT_IMDB_PATH": str(data)}, [
        "workflows.imdb_sentiment", "train", "--model", "bilstm", "--epochs", "3", "--set",
        "patience=3", "--set", "max_tokens=300", "--set", "batch_size=8", "--set",
        "embed_dim=8", "--set", "units=4", "--set", "checkpoint_every_steps=2"])


def dense_retriever(root):
    corpus = write_beir(root / "corpus", MORE_TOPICS, repeats=1, query_filler=4,
                        document_filler=8)
    encoder = write_tiny_encoder(root / "encoder", words=[*MORE_TOPICS, *FILLER, "paper"])
    return ("retrieval", {"NLPKIT_BEIR_PATH": str(corpus)}, [
        "workflows.retrieval", "train", "--retriever", "dense", "--set", f"encoder={encoder}",
        "--epochs", "3", "--set", "patience=3", "--set", "batch_size=8", "--set",
        "document_length=16", "--set", "query_length=16", "--set", "checkpoint_every_steps=2"])


def hub_language_model(root):
    from tests.workflows.test_language_model import ADJECTIVES, NOUNS, write_corpus

    texts = [f"the {noun} was {adjective}" for noun in NOUNS for adjective in ADJECTIVES]
    preset = write_tiny_causal_lm_preset(root / "tiny_llama", "llama", texts)
    corpus = write_corpus(root / "texts")
    return ("language_model", {}, [
        "workflows.language_model", "train", "--init-from", str(preset), "--corpus",
        str(corpus), "--epochs", "3", "--set", "patience=3", "--set", "lora_rank=2",
        "--set", "steps_per_epoch=6", "--set", "batch_size=4", "--set", "sequence_length=16",
        "--set", "validation_windows=8", "--set", "sample_tokens=4", "--set",
        "warmup_steps=1", "--set", "dtype_policy=float32", "--set", "checkpoint_every_steps=2"])


def run_command(command, env, stop_after=None):
    """(status, output, seconds from the stop to the exit or None) of one command."""
    process = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               start_new_session=True)
    if stop_after is None:
        return process.communicate(timeout=600)[0], process.returncode, None
    try:
        process.wait(timeout=stop_after)
        return process.communicate()[0], process.returncode, None  # it ended first
    except subprocess.TimeoutExpired:
        pass
    process.send_signal(signal.SIGTERM)
    stopped = time.monotonic()
    try:
        output = process.communicate(timeout=60)[0]
    finally:
        os.killpg(process.pid, signal.SIGKILL) if process.poll() is None else None
    return output, process.returncode, time.monotonic() - stopped


def logged_epochs(experiment_name, uri):
    """(status, [steps of `loss`]) of the experiment's runs, oldest first."""
    mlflow.set_tracking_uri(uri)
    experiment = mlflow.get_experiment_by_name(experiment_name)
    runs = mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time ASC"])
    return [(run.info.status, sorted(m.step for m in mlflow.MlflowClient().get_metric_history(
        run.info.run_id, "loss"))) for run in runs if run.data.params.get("retriever") != "bm25"]


def interrupt_until_finished(make_case, backend, root, seed, stops):
    """Runs the case uninterrupted, then with `stops` random SIGTERMs; returns what each
    stop measured as `(seconds after start, status, seconds to exit)`."""
    experiment, data_env, command = make_case(root)
    results = {}
    for trial in ("plain", "stopped"):
        folder = root / trial
        env = {**os.environ, **data_env, "KERAS_BACKEND": backend, "JAX_PLATFORMS": "cpu",
               "NLPKIT_WORK_DIR": str(folder / "work"),
               "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
               "PYTHONPATH": str(ROOT)}
        env.pop("XLA_FLAGS", None)
        if trial == "plain":
            started = time.monotonic()
            output, status, _ = run_command(command, env)
            span = time.monotonic() - started
            assert status == 0, output[-3000:]
        else:
            rng, measured = random.Random(seed), []
            for _ in range(stops):  # a rerun resumes, so is shorter: stops come early
                moment = rng.uniform(EARLIEST_STOP, 0.45 * span)
                output, status, to_exit = run_command(command, env, stop_after=moment)
                assert "Traceback" not in output, output[-4000:]
                if to_exit is not None and status == 0:  # the signal came as it ended:
                    assert FINISHED_LINE in output, (moment, output[-3000:])  # ignored
                elif to_exit is not None:  # stopped before it finished
                    assert status == 130, (moment, status, output[-3000:])
                    assert to_exit < STOP_SECONDS, (to_exit, output[-2000:])
                else:
                    assert status == 0, (moment, status, output[-3000:])
                measured.append((round(moment, 1), status, to_exit and round(to_exit, 1)))
            output, status, _ = run_command(command, env)
            assert status == 0 and "Traceback" not in output, output[-3000:]
            results["stops"] = measured
        results[trial] = logged_epochs(experiment, env["MLFLOW_TRACKING_URI"])
    (plain_status, plain_epochs), = results["plain"]
    assert plain_status == "FINISHED" and plain_epochs == [1, 2, 3]
    *earlier, (status, epochs) = results["stopped"]
    assert status == "FINISHED" and epochs == plain_epochs, results
    assert all(run_status == "FAILED" for run_status, _ in earlier), results
    return results["stops"]


def random_stops_test(backend, seed):
    """The test of one backend: five stops per lesson, at least four of them landing
    before the command ends (each backend has its own file, so the two run side by side
    on two test workers)."""

    @pytest.mark.parametrize("case", [translation, sentiment_rnn, dense_retriever,
                                      hub_language_model],
                             ids=lambda case: case.__name__)
    def test_random_stops_resume_to_the_same_finished_run(case, tmp_path):
        stops = interrupt_until_finished(case, backend, tmp_path, seed=seed, stops=5)
        print(stops)  # (seconds after the start, exit status, seconds from stop to exit)
        assert sum(status == 130 for _, status, _ in stops) >= 4

    return test_random_stops_resume_to_the_same_finished_run
