"""The lessons whose models need no TensorFlow text layers (the language model, the
sentiment `lm_classifier`, `bilstm` and `encoder`) train, evaluate and predict on
JAX where TensorFlow cannot be imported (as on a GPU machine with JAX alone), in a few
compiled shapes; generation compiles a few sampling programs whatever the prompts."""

import pytest

from tests.data_prep.fixtures import write_imdb_folder, write_tiny_encoder
from tests.workflows.jax_only import programs, run_steps

LM = ["--epochs", "2", "--set", "vocabulary_size=200", "--set", "sequence_length=16",
      "--set", "embed_dim=16", "--set", "dense_dim=32", "--set", "num_heads=2",
      "--set", "num_layers=1", "--set", "steps_per_epoch=4", "--set", "batch_size=4",
      "--set", "validation_windows=8", "--set", "sample_tokens=4", "--set", "warmup_steps=2",
      "--set", "dtype_policy=float32"]
LM_STEPS = """
import json, sys
from workflows import imdb_sentiment, language_model
from workflows.core import compilation
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
    codes += [imdb_sentiment.main(["train", "--model", "encoder", "--set", "encoder={encoder}",
                                   "--epochs", "1", "--set", "batch_size=8",
                                   "--set", "max_review_tokens=64"]),
              imdb_sentiment.main(["evaluate"]), imdb_sentiment.main(["predict", "A fine film"])]
print(json.dumps({{"codes": codes, "tensorflow": "tensorflow" in sys.modules,
                  "counts": compiled.counts}}))
"""


@pytest.mark.slow
def test_language_model_and_sentiment_models_run_where_tensorflow_is_absent(tmp_path,
                                                                             new_store):
    imdb = write_imdb_folder(tmp_path / "imdb", reviews_per_class=16, unlabelled=10).parent
    env = {"NLPKIT_WORK_DIR": str(tmp_path / "work"), "NLPKIT_IMDB_PATH": str(imdb),
           "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
    prepare = """
import json
from workflows import imdb_sentiment, language_model
print(json.dumps([imdb_sentiment.main(["prepare"]), language_model.main(["prepare", *{lm!r}])]))
"""
    assert run_steps(prepare.format(lm=LM), env, hide_tensorflow=False) == [0, 0]
    encoder = write_tiny_encoder(tmp_path / "encoder")
    result = run_steps(LM_STEPS.format(lm=LM, encoder=encoder), env)
    assert result["codes"] == [0] * 12 and not result["tensorflow"]
    # one window shape; one review bucket for each of the classifier, the BiLSTM and the
    # encoder
    assert programs(result, "jit(train_step)") == 4


GENERATION = """
import json
import numpy as np
from workflows.core import compilation
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


RETRIEVAL = """
import json, sys
from workflows import retrieval
from workflows.core import compilation
train = ["train", "--retriever", "dense", "--set", "encoder={encoder}", "--epochs", "2",
         "--set", "batch_size=4", "--set", "document_length=32", "--set", "query_length=16"]
with compilation.Compilations() as compiled:
    codes = [retrieval.main(train), retrieval.main(["evaluate"]),
             retrieval.main(["search", "topic3 gene"])]
print(json.dumps({{"codes": codes, "tensorflow": "tensorflow" in sys.modules,
                  "counts": compiled.counts}}))
"""


@pytest.mark.slow
def test_the_dual_encoder_fine_tunes_where_tensorflow_is_absent(tmp_path, new_store):
    from tests.workflows.test_retrieval import FILLER, MORE_TOPICS, write_beir

    corpus = write_beir(tmp_path / "corpus", MORE_TOPICS[:30])
    encoder = write_tiny_encoder(tmp_path / "encoder", words=[*MORE_TOPICS, *FILLER, "paper"])
    env = {"NLPKIT_WORK_DIR": str(tmp_path / "work"), "NLPKIT_BEIR_PATH": str(corpus),
           "MLFLOW_TRACKING_URI": new_store(tmp_path / "mlflow.db")}
    result = run_steps(RETRIEVAL.format(encoder=encoder), env)
    assert result["codes"] == [0, 0, 0] and not result["tensorflow"]
    assert programs(result, "jit(train_step)") == 1  # every batch has one shape


@pytest.mark.slow  # a JAX subprocess: the integration tier
def test_the_cached_loss_makes_the_whole_batchs_step_on_jax(tmp_path):
    encoder = write_tiny_encoder(tmp_path / "encoder", words=[f"w{i}" for i in range(60)])
    result = run_steps("import json\nfrom tests.workflows.test_retrieval import "
                       f"cached_step_difference\nprint(json.dumps(cached_step_difference("
                       f"{str(encoder)!r}, soft=True)))")
    assert result["loss"][0] == pytest.approx(result["loss"][1], rel=1e-5)
    assert result["step"] > 1e-3 and result["difference"] < 1e-4 * result["step"], result
