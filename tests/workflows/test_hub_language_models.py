"""`train --init-from FOLDER`: a pretrained keras-hub causal LM fine-tuned on a user's
corpus, on tiny presets of two architectures (GPT-2: byte-level BPE, learned positions;
Llama: SentencePiece, rotary positions) built here with keras-hub itself (random
weights) and read offline as a user's preset folder would be; with LoRA adapters too."""

import json

import keras
import mlflow
import numpy as np
import pytest

from tests.data_prep.fixtures import write_tiny_causal_lm_preset
from tests.workflows.interrupts import stop_once_at
from tests.workflows.serving import post, served
from tests.workflows.test_language_model import ADJECTIVES, NOUNS, write_corpus
from tests.workflows.test_lesson_contract import latest_run as lesson_run
from workflows import language_model as workflow
from workflows.causal_lm import hub
from workflows.causal_lm.batching import WindowBatches
from workflows.causal_lm.sampling import SAMPLERS, Sampling
from workflows.core import models

FINE_TUNE = ["--epochs", "2", "--set", "steps_per_epoch=4", "--set", "batch_size=4",
             "--set", "sequence_length=16", "--set", "validation_windows=8",
             "--set", "sample_tokens=4", "--set", "warmup_steps=1",
             "--set", "learning_rate=0.01", "--set", "dtype_policy=float32"]
TEXTS = [f"the {noun} was {adjective}" for noun in NOUNS for adjective in ADJECTIVES] \
    + ["i think and too is"]


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    root = tmp_path_factory.mktemp("causal_lm_presets")
    return {name: write_tiny_causal_lm_preset(root / f"tiny_{name}", name, TEXTS)
            for name in ("gpt2", "llama")}


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "texts")


def latest_run():
    return lesson_run(workflow.LESSON)


def test_padding_weighs_nothing_by_its_place_not_its_id():
    stream = np.array([4, 0, 0], "int32")  # id 0 is a real token (GPT-2's `!`)
    inputs, labels, weights = WindowBatches(stream, 3, 2)[0]  # a short split: padded
    assert inputs.shape == labels.shape == weights.shape == (2, 3)
    assert labels[0, :2].tolist() == [0, 0]
    assert weights.tolist() == [[1, 1, 0], [0, 0, 0]]  # a top-up row weighs nothing


def test_a_folder_keras_hub_reads_is_a_hub_source_and_a_run_id_is_not(presets, tmp_path):
    assert hub.is_hub_source(str(presets["gpt2"]))
    assert not hub.is_hub_source("0123abcd")
    assert not hub.is_hub_source(str(tmp_path))  # a folder without a preset


@pytest.mark.parametrize("flags, message", [
    (["--set", "lora_rank=4"], "lora_rank adapts a keras-hub preset"),
    (["--set", "extend_vocabulary=10"], "a keras-hub preset keeps its tokenizer"),
    (["--set", "sequence_length=128"], "is longer than"),
])
def test_what_a_preset_cannot_take_is_one_line(isolated_store, presets, corpus, capsys, flags,
                                               message):
    source = str(presets["gpt2"]) if "lora_rank=4" not in flags else "0123abcd"
    assert workflow.main(["train", "--init-from", source, "--corpus", str(corpus),
                          *flags]) == 2
    error = capsys.readouterr().err.strip()
    assert message in error and "Traceback" not in error and len(error.splitlines()) == 1


def test_an_unreadable_preset_folder_is_one_line(isolated_store, corpus, tmp_path, capsys):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "metadata.json").write_text("{not json")
    assert workflow.main(["train", "--init-from", str(broken), "--corpus", str(corpus)]) == 2
    error = capsys.readouterr().err.strip()
    assert "keras-hub cannot read" in error and len(error.splitlines()) == 1


@pytest.mark.integration
@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_a_preset_fine_tunes_generates_with_every_sampler_and_is_logged(
        own_store, presets, corpus, architecture):
    assert workflow.main(["train", "--init-from", str(presets[architecture]), "--corpus",
                          str(corpus), *FINE_TUNE]) == 0
    run = latest_run()
    assert run.data.tags["model_family"] == "hub"
    assert run.data.tags["architecture"] == {"gpt2": "GPT2CausalLM",
                                             "llama": "LlamaCausalLM"}[architecture]
    assert run.info.run_name.startswith(f"hub-tiny_{architecture}")
    metrics = run.data.metrics
    assert metrics["best_val_perplexity"] < metrics["before_val_perplexity"]
    model = models.load_pyfunc(run)
    generator = model.unwrap_python_model().generator
    assert isinstance(generator, hub.HubGenerator)
    for sampler in SAMPLERS:
        (text,) = generator.generate(["the movie"], Sampling(sampler, 4, seed=3))
        assert isinstance(text, str) and len(generator.tokens.ids([text])[0]) <= 4
    answers = model.predict(["the film was", "the plot"], params={"max_new_tokens": 3})
    assert len(answers) == 2 and all(isinstance(answer, str) for answer in answers)
    results = workflow.evaluate(run.info.run_id)
    assert results["test_perplexity"] > 0


@pytest.mark.integration
@pytest.mark.parametrize("architecture", ["gpt2", "llama"])
def test_a_presets_next_token_step_exports_with_its_tokenizer(own_store, presets, corpus,
                                                              architecture):
    from tests.workflows.test_language_model import exported_next_token_step

    assert workflow.main(["train", "--init-from", str(presets[architecture]), "--corpus",
                          str(corpus), *FINE_TUNE, "--epochs", "1"]) == 0
    folder = exported_next_token_step(latest_run(), "onnx", own_store / "work")
    assert list((folder / "tokenizer").iterdir())  # the preset's vocabulary files
    assert json.loads((folder / "tokenizer.json").read_text())


@pytest.mark.integration
def test_lora_trains_the_adapters_only_and_logs_the_merged_model(own_store, presets, corpus):
    assert workflow.main(["train", "--init-from", str(presets["gpt2"]), "--corpus",
                          str(corpus), *FINE_TUNE, "--set", "lora_rank=4"]) == 0
    run = latest_run()
    params = run.data.params
    assert int(params["trainable_parameters"]) < 0.1 * int(params["parameters"])
    pretrained = hub.load_task(presets["gpt2"])
    generator = models.load_pyfunc(run).unwrap_python_model().generator
    assert not any("lora" in weight.path for weight in generator.task.weights)  # merged
    assert generator.task.count_params() == pretrained.count_params()
    changed = [not np.allclose(keras.ops.convert_to_numpy(tuned), keras.ops.convert_to_numpy(
        original)) for tuned, original in zip(generator.task.weights, pretrained.weights,
                                              strict=True)]
    assert any(changed) and not all(changed)  # the attention's kernels moved, the rest not
    assert run.data.metrics["best_val_perplexity"] < run.data.metrics["before_val_perplexity"]
    with served(f"runs:/{run.info.run_id}/model", own_store / "serve.log") as url:
        status, body = post(url, json.dumps({"inputs": ["the cat"], "params": {
            "sampler": "top_k", "seed": 1, "max_new_tokens": 3}}).encode())
        assert status == 200 and isinstance(body["predictions"][0], str)
        assert post(url, json.dumps({"inputs": []}).encode())[0] == 400


@pytest.mark.integration
def test_a_stopped_preset_fine_tuning_resumes_with_each_epoch_logged_once(
        own_store, presets, corpus, monkeypatch):
    command = ["train", "--init-from", str(presets["llama"]), "--corpus", str(corpus),
               *FINE_TUNE, "--set", "lora_rank=2", "--set", "checkpoint_every_steps=1"]
    stop_once_at(monkeypatch, epoch=1, step=2)
    with pytest.raises(KeyboardInterrupt):
        workflow.main(command)
    monkeypatch.undo()
    assert workflow.main(command) == 0
    run = latest_run()
    history = mlflow.MlflowClient().get_metric_history(run.info.run_id, "val_perplexity")
    assert sorted(point.step for point in history) == [1, 2]
    assert run.data.metrics["best_val_perplexity"] < run.data.metrics["before_val_perplexity"]
