"""On JAX, compiled decoding reads the weights a model has now, not those it was traced with.

A compiled function closes over a model's variables as constants unless they are
passed in; keras-hub's samplers also open their own stateless scope inside the loop.
Each check trains a tiny model after its first decode, then compares the decoder's
output with a fresh decoder's on the same weights. Runs in a JAX subprocess.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = """
import numpy as np, keras
from data_prep.text import BucketPlan
from workflows.causal_lm.generator import Generator
from workflows.causal_lm.sampling import Sampling
from workflows.causal_lm.models import GPT
from workflows.seq2seq.batching import PairBatches
from workflows.seq2seq.presets import make_config
from workflows.translation import build_model
from data_prep.pair_tokens import Tokenizer
from workflows.seq2seq.translator import Translator

rng = np.random.default_rng(0)
config = make_config("transformer", "cpu", {"embed_dim": 16, "dense_dim": 32, "num_heads": 2,
                                            "encoder_layers": 1, "decoder_layers": 1,
                                            "dtype_policy": "float32", "schedule": "constant",
                                            "learning_rate": 0.01})
source = [rng.integers(1, 40, rng.integers(2, 9)).astype("int32") for _ in range(64)]
target = [np.concatenate([[2], row[::-1] % 30 + 4, [3]]).astype("int32") for row in source]
vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]"] + [f"w{i}" for i in range(46)]
tokenizer = Tokenizer("wordpiece", vocabulary, vocabulary, 40)
model = build_model(config, 50, 50)
translator = Translator(model, tokenizer, 40, 41, 2)
for beam in (1, 2):
    translator.generate(source[0][None], beam)  # traced before training
before = translator.generate(source[0][None], 1)
model.fit(PairBatches(source, target, BucketPlan.single(40, 16), 0), epochs=10, verbose=0)
fresh = Translator(model, tokenizer, 40, 41, 2)
for beam in (1, 2):
    assert (translator.generate(source[0][None], beam) == fresh.generate(
        source[0][None], beam)).all(), f"stale translator weights (beam {beam})"
assert (fresh.generate(source[0][None], 1) != before).any(), "training changed nothing"

gpt = GPT(50, 16, 16, 32, 2, 1)
gpt.compile(optimizer=keras.optimizers.Adam(0.05), loss="sparse_categorical_crossentropy")
generator = Generator(gpt, vocabulary)
prompts = [[5, 6, 7], [8, 9, 10]]
sampling = Sampling(max_new_tokens=6)
before = generator.continue_ids(prompts, sampling)
windows = rng.integers(4, 50, (64, 17)).astype("int32")
gpt.fit(windows[:, :-1], windows[:, 1:], epochs=10, verbose=0)
assert Generator(gpt, vocabulary).continue_ids(prompts, sampling) != before, "no change"
assert generator.continue_ids(prompts, sampling) == Generator(gpt, vocabulary).continue_ids(
    prompts, sampling), "stale generator weights"
print("ok")
"""


@pytest.mark.slow
def test_compiled_decoders_use_the_current_weights_on_jax():
    pytest.importorskip("jax")
    environment = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=environment,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr[-3000:]
