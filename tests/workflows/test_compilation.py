"""A whole `fit`, `evaluate` and `translate` reach the compiler in a handful of shapes.

On JAX each batch shape compiles a train step (half a minute for the `gpu` translator
on an H100), so the lessons batch in a few fixed shapes; the programs land in the
persistent compilation cache of the work folder, where a second run finds them. On
TensorFlow the same batches keep each step to one or two traces. The JAX steps run
where TensorFlow cannot be imported, as on a GPU machine with JAX alone.
"""

import keras
import numpy as np
import pytest

from data_prep.batches import for_backend
from tests.data_prep.fixtures import generated_spa_lines, write_imdb_folder, write_spa_eng_zip
from tests.workflows.jax_only import run_steps
from workflows.seq2seq.batching import PairBatches, pair_plan
from workflows.seq2seq.presets import build_model, make_config

TINY = ["--preset", "cpu", "--epochs", "2", "--set", "embed_dim=16", "--set", "dense_dim=32",
        "--set", "num_heads=2", "--set", "encoder_layers=1", "--set", "decoder_layers=1",
        "--set", "batch_tokens=256", "--set", "bucket_width=8", "--set", "bleu_sentences=40",
        "--set", "dtype_policy=float32"]
STEPS = """
import json, sys
from workflows import compilation, translation as workflow
with compilation.Compilations() as compiled:
    codes = [workflow.main(step) for step in {steps!r}]
import mlflow
runs = mlflow.search_runs(experiment_names=["translation"], output_format="list")
print(json.dumps({{"codes": codes, "counts": compiled.counts, "hits": compiled.cache_hits,
                  "tensorflow": "tensorflow" in sys.modules,
                  "metrics": runs[0].data.metrics if runs else {{}}}}))
"""


def programs(result, prefix):
    return sum(n for name, n in result["counts"].items() if name.startswith(prefix))


def hits(result, prefix):
    return sum(n for name, n in result["hits"].items() if name.startswith(prefix))


@pytest.mark.slow
def test_jax_compiles_a_step_per_bucket_once_per_machine(tmp_path):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip", generated_spa_lines())
    env = {"NLPKIT_WORK_DIR": str(tmp_path / "work"), "NLPKIT_SPA_ENG_PATH": str(archive),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    # prepared where TensorFlow is (word vocabularies), with the backend set to JAX
    prepared = run_steps(STEPS.format(steps=[["prepare", "--direction", "en-es"]]), env,
                         hide_tensorflow=False)
    assert prepared["codes"] == [0]
    steps = [["train", *TINY], ["evaluate", "--limit", "60"],
             ["translate", "How are you?", "The dog is big and the cat is small."]]
    first = run_steps(STEPS.format(steps=steps), env)
    assert first["codes"] == [0, 0, 0] and not first["tensorflow"]
    # at most one program per length bucket (8, 16, 24, 32, 40), whatever the lengths
    assert 1 <= programs(first, "jit(train_step)") <= 5
    assert 1 <= programs(first, "jit(test_step)") <= 5
    assert first["metrics"]["train_step_programs"] == programs(first, "jit(train_step)")
    # decoding: two source lengths x two batch sizes per mode (greedy; beam 4)
    assert 1 <= programs(first, "jit(decode_beam1)") <= 4
    assert 1 <= programs(first, "jit(decode_beam4)") <= 4
    second = run_steps(STEPS.format(steps=[["train", *TINY, "--retrain"]]), env)
    assert second["codes"] == [0]
    trained = programs(second, "jit(train_step)")
    assert trained and hits(second, "jit(train_step)") == trained  # all from the cache
    assert hits(second, "jit(decode_beam1)") == programs(second, "jit(decode_beam1)")


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="counts TensorFlow traces")
def test_tensorflow_traces_each_step_once_or_twice_whatever_the_lengths():
    rng = np.random.default_rng(0)
    config = make_config("transformer", "cpu", {
        "embed_dim": 16, "dense_dim": 32, "num_heads": 2, "encoder_layers": 1,
        "decoder_layers": 1, "dtype_policy": "float32"})
    source = [rng.integers(4, 40, rng.integers(1, 40)).astype("int32") for _ in range(300)]
    target = [np.concatenate([[2], row[::-1] % 30 + 4, [3]]).astype("int32")[:41]
              for row in source]
    model = build_model(config, 50, 50)
    traces = {"train": 0, "test": 0}
    train_step, test_step = model.train_step, model.test_step

    def traced(name, step):
        def count(*args):
            traces[name] += 1  # Python runs a step's body only while tracing it
            return step(*args)
        return count

    model.train_step, model.test_step = traced("train", train_step), traced("test", test_step)
    validation = PairBatches(source[:60], target[:60], pair_plan(40, 512))
    for epoch in range(2):
        batches = PairBatches(source, target, pair_plan(40, 512), seed=epoch)
        assert len(batches.shapes) == 5  # 39 source lengths, 5 shapes
        model.fit(for_backend(batches), validation_data=for_backend(validation), verbose=0)
    assert 1 <= traces["train"] <= 2 and traces["test"] == 1


LM = ["--epochs", "2", "--set", "vocabulary_size=200", "--set", "sequence_length=16",
      "--set", "embed_dim=16", "--set", "dense_dim=32", "--set", "num_heads=2",
      "--set", "num_layers=1", "--set", "steps_per_epoch=4", "--set", "batch_size=4",
      "--set", "validation_windows=8", "--set", "sample_tokens=4", "--set", "warmup_steps=2",
      "--set", "dtype_policy=float32"]
LM_STEPS = """
import json, sys
from workflows import compilation, imdb_sentiment, language_model
lm = {lm!r}
with compilation.Compilations() as compiled:
    codes = [language_model.main(["train", *lm]), language_model.main(["evaluate"]),
             language_model.main(["generate", "The film"])]
    run = language_model.compare(style="csv")[0]["run_id"]
    codes += [imdb_sentiment.main(["train", "--model", "lm_classifier", "--init-from", run,
                                   "--epochs", "1", "--set", "batch_size=8",
                                   "--set", "max_review_tokens=40"]),
              imdb_sentiment.main(["evaluate"]), imdb_sentiment.main(["predict", "A fine film"])]
    codes += [imdb_sentiment.main(["train", "--model", "bilstm", "--epochs", "1", "--set",
                                   "embed_dim=8", "--set", "units=4", "--set", "batch_size=8"]),
              imdb_sentiment.main(["evaluate"]), imdb_sentiment.main(["predict", "A fine film"])]
print(json.dumps({{"codes": codes, "tensorflow": "tensorflow" in sys.modules,
                  "counts": compiled.counts}}))
"""


@pytest.mark.slow
def test_language_model_lm_classifier_and_bilstm_run_where_tensorflow_is_absent(tmp_path):
    imdb = write_imdb_folder(tmp_path / "imdb", reviews_per_class=16, unlabelled=10).parent
    env = {"NLPKIT_WORK_DIR": str(tmp_path / "work"), "NLPKIT_IMDB_PATH": str(imdb),
           "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    prepare = """
import json
from workflows import imdb_sentiment, language_model
print(json.dumps([imdb_sentiment.main(["prepare"]), language_model.main(["prepare", *{lm!r}])]))
"""
    assert run_steps(prepare.format(lm=LM), env, hide_tensorflow=False) == [0, 0]
    result = run_steps(LM_STEPS.format(lm=LM), env)
    assert result["codes"] == [0] * 9 and not result["tensorflow"]
    # one window shape; one review bucket for the classifier, one for the BiLSTM
    assert programs(result, "jit(train_step)") == 3


GENERATION = """
import json
import numpy as np
from workflows import compilation
from workflows.causal_lm.generator import BATCHES, Generator
from workflows.causal_lm.models import GPT
from workflows.causal_lm.sampling import Sampling

vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]"] + [f"w{i}" for i in range(46)]
generator = Generator(GPT(50, 64, 16, 32, 2, 1), vocabulary)
rng = np.random.default_rng(0)
requests = [[list(rng.integers(4, 50, rng.integers(1, 20))) for _ in range(count)]
            for count in (1, 3, 9, 40, 2)]
sampling = Sampling(max_new_tokens=7)
with compilation.Compilations() as first:
    outputs = [generator.continue_ids(prompts, sampling) for prompts in requests]
with compilation.Compilations() as again:
    alone = generator.continue_ids(requests[1][:1], sampling)
print(json.dumps({"first": first.counts, "again": again.counts,
                  "counts": [len(texts) for texts in outputs], "batches": list(BATCHES),
                  "same_alone": alone == outputs[1][:1],
                  "words": [len(text.split()) for text in outputs[3]]}))
"""


@pytest.mark.slow
def test_generation_compiles_a_few_fixed_shapes_whatever_the_prompts(tmp_path):
    result = run_steps(GENERATION, {"NLPKIT_WORK_DIR": str(tmp_path / "work")})
    assert result["counts"] == [1, 3, 9, 40, 2]  # one answer per prompt
    # requests of 1-40 prompts of 1-19 tokens: 2 batch shapes x 1 length (every prompt
    # and its continuation fit 32 tokens)
    greedy = sum(n for name, n in result["first"].items() if "generate_greedy" in name)
    assert greedy == len(result["batches"])
    assert sum(result["again"].values()) == 0  # nothing compiled twice
    assert result["same_alone"]  # a prompt's continuation does not depend on its batch
    assert all(words <= 7 for words in result["words"])  # cut at max_new_tokens
