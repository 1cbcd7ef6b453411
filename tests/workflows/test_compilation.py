"""A whole `fit`, `evaluate` and `translate` reach the compiler in a handful of shapes.

On JAX each batch shape compiles a train step (half a minute for the `gpu` translator
on an H100), so the lessons batch in a few fixed shapes; the programs land in the
persistent compilation cache of the work folder, where a second run finds them. On
TensorFlow the same batches keep each step to one trace. The JAX steps run
where TensorFlow cannot be imported, as on a GPU machine with JAX alone.
"""

import keras
import numpy as np
import pytest

from tests.data_prep.fixtures import generated_spa_lines, write_spa_eng_zip
from tests.workflows.jax_only import hits, programs, run_steps
from workflows import translation as workflow
from workflows.core.batches import for_backend
from workflows.seq2seq.batching import PairBatches, pair_plan
from workflows.seq2seq.presets import make_config
from workflows.translation import build_model

TINY = ["--preset", "cpu", "--epochs", "1", "--set", "embed_dim=16", "--set", "dense_dim=32",
        "--set", "num_heads=2", "--set", "encoder_layers=1", "--set", "decoder_layers=1",
        "--set", "batch_tokens=256", "--set", "bucket_width=8", "--set", "bleu_sentences=40",
        "--set", "dtype_policy=float32"]
STEPS = """
import json, sys
from workflows import translation as workflow
from workflows.core import compilation
with compilation.Compilations() as compiled:
    codes = [workflow.main(step) for step in {steps!r}]
import mlflow
runs = mlflow.search_runs(experiment_names=["translation"], output_format="list")
print(json.dumps({{"codes": codes, "counts": compiled.counts, "hits": compiled.cache_hits,
                  "tensorflow": "tensorflow" in sys.modules,
                  "metrics": runs[0].data.metrics if runs else {{}}}}))
"""


@pytest.mark.slow
def test_jax_compiles_a_step_per_bucket_once_per_machine(tmp_path, new_store):
    archive = write_spa_eng_zip(tmp_path / "spa-eng.zip", generated_spa_lines())
    env = {"NLPKIT_WORK_DIR": str(tmp_path / "work"), "NLPKIT_SPA_ENG_PATH": str(archive),
           "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
    # prepared here, where TensorFlow is (word vocabularies): the data is the same on JAX
    with pytest.MonkeyPatch.context() as patch:
        for name, value in env.items():
            patch.setenv(name, value)
        assert workflow.main(["prepare", "--direction", "en-es"]) == 0
    steps = [["train", *TINY], ["evaluate", "--limit", "24"],
             ["translate", "How are you?", "The dog is big and the cat is small."]]
    first = run_steps(STEPS.format(steps=steps), env)
    assert first["codes"] == [0, 0, 0] and not first["tensorflow"]
    # at most one program per length bucket (8, 16, 24, 32, 40), whatever the lengths
    assert 1 <= programs(first, "jit(train_step)") <= 5
    assert 1 <= programs(first, "jit(test_step)") <= 5
    assert first["metrics"]["system/train_step_programs"] == programs(first, "jit(train_step)")
    # decoding: two source lengths x two batch sizes per mode (greedy; beam 4)
    assert 1 <= programs(first, "jit(decode_beam1)") <= 4
    assert 1 <= programs(first, "jit(decode_beam4)") <= 4
    second = run_steps(STEPS.format(steps=[["train", *TINY, "--retrain"]]), env)
    assert second["codes"] == [0]
    trained = programs(second, "jit(train_step)")
    assert trained and hits(second, "jit(train_step)") == trained  # all from the cache
    assert hits(second, "jit(decode_beam1)") == programs(second, "jit(decode_beam1)")


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="counts TensorFlow traces")
def test_tensorflow_traces_each_step_once_whatever_the_lengths(tmp_path):
    from workflows.core.fitting import Checkpointing, fit_resumably
    from workflows.core.stopping import Stopping

    rng = np.random.default_rng(0)
    config = make_config("transformer", "cpu", {
        "embed_dim": 16, "dense_dim": 32, "num_heads": 2, "encoder_layers": 1,
        "decoder_layers": 1, "dtype_policy": "float32"})
    source = [rng.integers(4, 40, rng.integers(1, 40)).astype("int32") for _ in range(120)]
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

    def epoch(number):
        batches = PairBatches(source, target, pair_plan(40, 512), seed=number)
        assert len(batches.shapes) == 5  # 39 source lengths, 5 shapes
        return for_backend(batches)

    model.train_step, model.test_step = traced("train", train_step), traced("test", test_step)
    validation = PairBatches(source[:40], target[:40], pair_plan(40, 512))
    fit_resumably(model, epoch, for_backend(validation), tmp_path, Stopping(2),
                  checkpointing=Checkpointing(every_steps=0), verbose=0)
    # once: the lifecycle builds the optimizer and metrics first (a first trace that
    # creates variables is traced again)
    assert traces == {"train": 1, "test": 1}



@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="counts TensorFlow traces")
def test_a_scoring_evaluate_traces_its_test_step_once_and_builds_no_optimizer():
    """As the translation lesson scores its test split: a model compiled with metrics
    and no optimizer; its first trace would create the metrics' variables, and a
    `tf.function` whose first trace creates variables is traced again."""
    import tensorflow as tf

    from workflows.core.compilation import build_before_tracing

    rng = np.random.default_rng(0)
    features = rng.normal(size=(64, 4)).astype("float32")
    labels = (features.sum(axis=1) > 0).astype("int32")
    data = tf.data.Dataset.from_tensor_slices((features, labels)).batch(16, drop_remainder=True)
    traces = {}
    for build in (False, True):
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
        model.compile(optimizer=None, weighted_metrics=["accuracy"],
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        step, traces[build] = model.test_step, 0

        def counted(*args, step=step, build=build):
            traces[build] += 1  # Python runs a step's body only while tracing it
            return step(*args)

        model.test_step = counted
        if build:
            build_before_tracing(model, data)
        model.evaluate(data, verbose=0)
        assert model.optimizer is None
    assert traces == {False: 2, True: 1}

AHEAD = """
import json, tempfile
import keras, numpy as np
from workflows import translation
from workflows.core import compilation, devices
from workflows.core.batches import for_backend
from workflows.core.fitting import Checkpointing, EpochHooks, fit_resumably
from workflows.core.stopping import Stopping
from workflows.seq2seq.presets import make_config
from workflows.seq2seq.batching import PairBatches, pair_plan

rng = np.random.default_rng(0)
source = [rng.integers(4, 40, rng.integers(1, 24)).astype("int32") for _ in range(400)]
target = [np.concatenate([[2], row[::-1] % 30 + 4, [3]]).astype("int32") for row in source]
config = make_config("transformer", "gpu", {
    "embed_dim": 16, "dense_dim": 32, "num_heads": 2, "encoder_layers": 2,
    "decoder_layers": 2, "dtype_policy": "float32", "batch_tokens": 512, "bucket_width": 8,
    "sequence_length": 24, "steps_per_execution": 4, "random_generator": "rbg",
    "schedule": "constant", "learning_rate": 3e-3})
model = translation.build_model(config, 50, 50)
plan = pair_plan(24, 512, bucket_width=8)
train = lambda epoch: for_backend(PairBatches(source, target, plan, seed=epoch))
validation = for_backend(PairBatches(source[:100], target[:100], plan))
at_first_batch = []

class FirstBatch(keras.callbacks.Callback):
    def on_train_batch_begin(self, batch, logs=None):
        if not at_first_batch:
            at_first_batch.append(compiled.of("jit(train_step)"))

with compilation.Compilations() as compiled:
    state = fit_resumably(model, train, validation, tempfile.mkdtemp(), Stopping(2),
                          Checkpointing(every_steps=0), EpochHooks(callbacks=[FirstBatch()]),
                          verbose=0)
print(json.dumps({"train_shapes": len(train(0).shapes), "test_shapes": len(validation.shapes),
                  "at_first_batch": at_first_batch[0], "counts": compiled.counts,
                  "hits": compiled.cache_hits, "epochs": len(state.history),
                  "first_batch": state.history[0].get("seconds_to_first_batch"),
                  "loss": [epoch["loss"] for epoch in state.history]}))
"""


@pytest.mark.slow
def test_every_train_step_compiles_before_the_first_batch_and_once(tmp_path):
    result = run_steps(AHEAD, {"NLPKIT_COMPILATION_CACHE": "0"})
    assert result["train_shapes"] >= 2 and result["test_shapes"] >= 2
    # every shape's train step compiled ahead of the first batch, none of them again later
    assert result["at_first_batch"] == result["train_shapes"]
    assert programs(result, "jit(train_step)") == result["train_shapes"]
    assert programs(result, "jit(test_step)") == result["test_shapes"]
    assert result["epochs"] == 2 and result["first_batch"] > 0
    assert np.isfinite(result["loss"]).all() and result["loss"][1] < result["loss"][0]


RANDOM = """
import json
import keras, numpy as np
from workflows.core import precision

def mask(seed):
    return np.asarray(keras.layers.Dropout(0.5, seed=seed)(np.ones((8, 1000)), training=True))

precision.use_random_generator("rbg")
rbg, again = mask(1), mask(1)
precision.use_random_generator("threefry")
threefry = mask(1)
print(json.dumps({"kept": float((rbg != 0).mean()), "scaled": float(rbg.max()),
                  "repeatable": bool((rbg == again).all()),
                  "other_stream": bool((rbg != threefry).any()),
                  "threefry_kept": float((threefry != 0).mean())}))
"""


@pytest.mark.slow
def test_rbg_dropout_masks_keep_their_rate_and_repeat_with_their_seed():
    result = run_steps(RANDOM)
    assert abs(result["kept"] - 0.5) < 0.02 and result["scaled"] == 2.0
    assert result["repeatable"] and result["other_stream"]
    assert abs(result["threefry_kept"] - 0.5) < 0.02  # Keras's own generator, restored
