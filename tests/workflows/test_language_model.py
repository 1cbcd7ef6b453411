"""The language-model lesson on tiny generated corpora: its generation and refusals here, the
lesson end to end (`lm_store`) in the integration tier."""

import json
import subprocess
import sys
from pathlib import Path

import keras
import mlflow
import numpy as np
import pytest

from workflows import language_model as workflow
from workflows.causal_lm import vocabulary as vocabulary_extension
from workflows.causal_lm.generator import Generator
from workflows.causal_lm.models import GPT
from workflows.causal_lm.sampling import Sampling
from workflows.causal_lm.source import load_generator
from workflows.core.metric_groups import ungrouped

TINY = ["--epochs", "2", "--set", "vocabulary_size=120", "--set", "sequence_length=16",
        "--set", "embed_dim=16", "--set", "dense_dim=32", "--set", "num_heads=2",
        "--set", "num_layers=2", "--set", "steps_per_epoch=4", "--set", "batch_size=4",
        "--set", "validation_windows=8", "--set", "sample_tokens=4", "--set", "warmup_steps=2",
        "--set", "dtype_policy=float32"]
FINE_TUNE = ["--epochs", "1", "--set", "steps_per_epoch=3", "--set", "batch_size=4",
             "--set", "validation_windows=8", "--set", "sample_tokens=4",
             "--set", "warmup_steps=1", "--set", "dtype_policy=float32"]
NOUNS = ["film", "movie", "story", "actor", "plot", "scene"]
ADJECTIVES = ["good", "bad", "long", "funny", "slow", "great"]


def write_corpus(folder, sentiment="", documents=30):
    folder.mkdir(parents=True)
    for i in range(documents):
        noun, adjective = NOUNS[i % 6], ADJECTIVES[(i // 6) % 6]
        (folder / f"doc{i:02d}.txt").write_text(
            f"The {noun} was {sentiment}{adjective}. I think the {noun} is {adjective}, and "
            f"the {NOUNS[(i + 1) % 6]} was {ADJECTIVES[i % 6]} too.\n", encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def lm_folders(tmp_path_factory, new_store):
    """A work folder and a new store, nothing trained: what the refusals need."""
    root = tmp_path_factory.mktemp("language_model")
    previous_uri = mlflow.get_tracking_uri()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NLPKIT_WORK_DIR", str(root / "work"))
        patch.setenv("MLFLOW_TRACKING_URI", new_store(root / "mlflow" / "mlflow.db"))
        yield root
    mlflow.set_tracking_uri(previous_uri)  # later modules find their own store again


@pytest.fixture(scope="module")
def lm_store(lm_folders):
    """The lesson run end to end on a tiny corpus (the integration tier)."""
    texts = write_corpus(lm_folders / "texts")
    (texts / "image.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0binary")
    (texts / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    assert workflow.main(["run", "--corpus", str(texts), *TINY]) == 0
    return lm_folders


def lm_runs():
    experiment = mlflow.get_experiment_by_name(workflow.EXPERIMENT)
    return mlflow.search_runs([experiment.experiment_id], output_format="list",
                              order_by=["attributes.start_time ASC"])


def generator_of(run):
    return load_generator(run)


def exported_next_token_step(run, format, work_dir):
    """Exports `run`'s model in `format`; checks the artifact's logits of 100 random token
    rows against the Keras model's (at most 1e-4 apart); returns the export's folder."""
    from workflows.core import export

    assert workflow.main(["export", "--run-id", run.info.run_id, "--format", format]) == 0
    folder = Path(work_dir) / "exports" / run.info.run_id / format
    generator = load_generator(run)
    settings = json.loads((folder / "generation.json").read_text())
    rows = np.random.default_rng(0).integers(
        0, generator.vocabulary_size, (100, min(12, settings["max_length"]))).astype("int32")
    answer, names = export.load_export(folder)
    found = answer(export.named_arrays(rows, names))
    expected = keras.ops.convert_to_numpy(generator.model(rows))
    assert found.shape == expected.shape and np.abs(found - expected).max() <= 1e-4
    return folder


@pytest.mark.integration
@pytest.mark.parametrize("format", ["onnx", "saved_model", "litert"])
def test_the_next_token_step_exports_and_continues_greedily_as_the_kit_does(lm_store, format):
    from tests.test_docs import doc_blocks
    from workflows.causal_lm.exported import EXAMPLE_PROMPT

    run = lm_runs()[0]
    folder = exported_next_token_step(run, format, lm_store / "work")
    assert len(json.loads((folder / "vocabulary.json").read_text())) <= 120
    if format == "onnx":  # the docs' greedy loop, run in the export's folder
        (block,) = doc_blocks("docs/export.md", '{"token_ids": ids}')
        ids = json.loads(subprocess.run([sys.executable, "-c", block], cwd=folder, text=True,
                                        capture_output=True, check=True).stdout)
        generator = load_generator(run)
        prompt = generator.tokenize([EXAMPLE_PROMPT])[0]
        settings = json.loads((folder / "generation.json").read_text())
        (expected,) = generator.generate_uncached([prompt], settings["max_length"]
                                                  - len(prompt) - 1)
        assert ids[:len(prompt) + 1] == [settings["end_id"], *prompt]
        assert generator.detokenize(ids[len(prompt) + 1:]) == expected


@pytest.mark.integration
def test_run_logs_perplexities_samples_and_a_model(lm_store):
    (run,) = lm_runs()
    client = mlflow.MlflowClient()
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val_perplexity")] \
        == [1, 2]
    metrics = ungrouped(run.data.metrics)  # (mean_tokens_per_second: under system/)
    for name in ("test_perplexity", "test_word_perplexity", "best_val_perplexity",
                 "mean_tokens_per_second"):
        assert metrics[name] > 0, name
    assert metrics["test_word_perplexity"] > metrics["test_perplexity"]  # words > pieces
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id, "samples")}
    assert {"samples/epoch_001.json", "samples/epoch_002.json", "samples/test.json"} \
        <= artifacts
    summary = json.loads(mlflow.artifacts.load_text(
        f"runs:/{run.info.run_id}/corpus_summary.json"))
    assert summary["skipped_files"] == 2 and sum(summary["documents"].values()) == 30


@pytest.mark.integration
def test_cached_generation_equals_uncached_generation(lm_store):
    generator = generator_of(lm_runs()[0])
    prompts = ["The film was", "I think the"]
    rows = generator.tokenize(prompts)
    assert len(rows[0]) == len(rows[1])  # the uncached baseline takes prompts of one length
    cached = generator.generate(prompts, Sampling(max_new_tokens=12))
    assert cached == generator.continue_ids(rows, Sampling(max_new_tokens=12))
    assert cached == generator.generate_uncached(rows, 12)


@pytest.mark.integration
def test_a_fixed_seed_gives_the_same_sample(lm_store):
    generator = generator_of(lm_runs()[0])
    for sampler in ("top_k", "top_p", "random"):
        sampling = Sampling(sampler, 10, temperature=1.5, seed=7)
        first = generator.generate(["The movie", "The plot was"], sampling)
        assert generator.generate(["The movie", "The plot was"], sampling) == first
    beam = generator.generate(["The story"], Sampling("beam", 6, num_beams=3))
    assert len(beam) == 1 and isinstance(beam[0], str)


@pytest.mark.integration
def test_fine_tuning_keeps_the_tokenizer_and_reports_perplexity_before(lm_store):
    source = lm_runs()[0]
    other = write_corpus(lm_store / "bad_reviews", sentiment="very ", documents=12)
    assert workflow.main(["train", "--init-from", source.info.run_id[:10], "--corpus",
                          str(other), *FINE_TUNE]) == 0
    tuned = lm_runs()[-1]
    assert tuned.data.params["init_from"] == source.info.run_id
    assert tuned.data.params["embed_dim"] == "16" and tuned.data.params["num_layers"] == "2"
    assert "before_val_perplexity" in tuned.data.metrics
    vocabulary = [mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/vocabulary.txt")
                  for run in (source, tuned)]
    assert vocabulary[0] == vocabulary[1]
    assert generator_of(tuned).vocabulary == generator_of(source).vocabulary


@pytest.mark.integration
def test_fine_tuning_can_add_the_new_corpus_words_to_the_vocabulary(lm_store, capsys):
    source = lm_runs()[0]
    folder = lm_store / "names"
    folder.mkdir()
    for i in range(12):
        (folder / f"doc{i}.txt").write_text(
            f"Zorblaxian heroes met Quenthorpe again. The Zorblaxian film was "
            f"{ADJECTIVES[i % 6]}, and Quenthorpe was {ADJECTIVES[(i + 1) % 6]}.\n",
            encoding="utf-8")
    assert workflow.main(["train", "--init-from", source.info.run_id, "--corpus", str(folder),
                          *FINE_TUNE, "--set", "extend_vocabulary=2"]) == 0
    assert "Added 2 words" in capsys.readouterr().out
    tuned = lm_runs()[-1]
    added = json.loads(mlflow.artifacts.load_text(
        f"runs:/{tuned.info.run_id}/vocabulary_extension.json"))["added_words"]
    assert sorted(added) == ["Quenthorpe", "Zorblaxian"]
    old = generator_of(source).vocabulary
    assert generator_of(tuned).vocabulary == [*old, *added]
    assert tuned.data.params["vocabulary_entries"] == str(len(old) + 2)
    assert workflow.main(["evaluate", "--run-id", tuned.info.run_id]) == 0
    assert workflow.main(["train", "--set", "extend_vocabulary=2"]) == 2  # needs --init-from


def test_extension_keeps_every_weight_and_initialises_the_new_rows():
    model = GPT(12, 8, 4, 8, 1, 1)
    vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]", "the", "film", "Zor", "##bl",
                  "##ax", "was", "good", "."]
    documents = ["the Zorblax film was good ."] * 6 + ["the film was good ."] * 6
    words = vocabulary_extension.new_words(documents, vocabulary, count=3)
    assert words == [("Zorblax", [6, 7, 8])]
    for initialisation in ("pieces", "word2vec"):
        extended, new_vocabulary, summary = vocabulary_extension.extend(
            model, vocabulary, words, documents, initialisation)
        assert new_vocabulary == [*vocabulary, "Zorblax"] and extended.vocabulary_size == 13
        table = keras.ops.convert_to_numpy(extended.embedding.token_embedding.embeddings)
        source = keras.ops.convert_to_numpy(model.embedding.token_embedding.embeddings)
        np.testing.assert_array_equal(table[:12], source)
        if initialisation == "pieces":
            np.testing.assert_allclose(table[12], source[[6, 7, 8]].mean(axis=0), rtol=1e-6)
        for old, new in zip(model.weights[1:], extended.weights[1:], strict=True):
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(old),
                                          keras.ops.convert_to_numpy(new))


@pytest.mark.integration
def test_logged_model_generates_in_a_fresh_process_with_sampler_params(lm_store, tmp_path):
    run_id = lm_runs()[0].info.run_id
    script = f"""
import mlflow
model = mlflow.pyfunc.load_model("runs:/{run_id}/model")
params = {{"sampler": "top_k", "top_k": 5, "seed": 3, "max_new_tokens": 6}}
first = model.predict(["The film", "The actor was"], params=params)
assert first == model.predict(["The film", "The actor was"], params=params), first
assert all(isinstance(text, str) for text in first) and len(first) == 2
greedy = model.predict(["The film"], params={{"max_new_tokens": 3}})
try:
    model.predict(["The film"], params={{"sampler": "bogus"}})
    raise SystemExit("a bad sampler was accepted")
except Exception as error:
    assert "sampler must be one of" in str(error), error
print("ok")
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("ok")


@pytest.mark.integration
def test_generate_and_compare_from_the_command_line(lm_store, capsys):
    assert workflow.main(["generate", "The film", "--sampler", "top_p", "--seed", "1",
                          "--max-new-tokens", "5"]) == 0
    assert capsys.readouterr().out.count(" ... ") == 1
    assert workflow.main(["compare", "--format", "csv"]) == 0
    assert capsys.readouterr().out.startswith("run_id,preset,init_from")


@pytest.mark.parametrize("make, message", [
    (lambda root: root / "missing", "does not exist"),
    (lambda root: root.mkdir() or root, "has no readable UTF-8 text"),
    (lambda root: (root.mkdir(), (root / "a.bin").write_bytes(b"\0\1\2"), root)[-1],
     "has no readable UTF-8 text"),
    (lambda root: write_corpus(root, documents=2), "at least 3 are needed"),
    (lambda root: (root.write_bytes(b"\xff\xfe bad"), root)[-1], "not UTF-8"),
])
def test_bad_corpora_get_one_line_errors(lm_folders, tmp_path, capsys, make, message):
    corpus = make(tmp_path / "corpus")
    assert workflow.main(["prepare", "--corpus", str(corpus)]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_bad_sampler_settings_are_refused(lm_folders, capsys):
    for argv, message in ((["--sampler", "nope"], "sampler must be one of"),
                          (["--temperature", "0"], "temperature must be above 0"),
                          (["--top-p", "1.5"], "top_p must be above 0 and at most 1")):
        assert workflow.main(["generate", "The film", *argv]) == 2
        assert message in capsys.readouterr().err


@pytest.mark.integration
def test_benchmark_compares_cached_and_uncached_generation(lm_store, tmp_path):
    run_id = lm_runs()[0].info.run_id
    output = tmp_path / "language_model.json"
    result = subprocess.run([sys.executable, "benchmarks/language_model.py", "--run-id", run_id,
                             "--tokens", "8", "--output", str(output)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    figures = json.loads(output.read_text())
    assert figures["run_id"] == run_id and figures["generation"]["same_tokens"] is True
    assert figures["generation"]["ms_per_token_cached"] > 0
    assert figures["training"]["test_perplexity"] > 0 and figures["machine"]["cpu"]


def test_detokenized_text_reads_like_written_english():
    from workflows.causal_lm.models import GPT

    vocabulary = ["[PAD]", "[UNK]", "[START]", "[END]", "I", "'", "m", "not", "sure", ",",
                  "well", "-", "made", "(", "really", ")", ".", "fil", "##m"]
    generator = Generator(GPT(len(vocabulary), 8, 8, 8, 2, 1), vocabulary)
    ids = [vocabulary.index(t) for t in
           ["I", "'", "m", "not", "sure", ",", "well", "-", "made", "fil", "##m", "(", "really",
            ")", ".", "[END]", "I"]]
    assert generator.detokenize(ids) == "I'm not sure, well-made film (really)."
