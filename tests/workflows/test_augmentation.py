"""Augmented train reviews: round-trip paraphrases through logged translators, cached by
translator and settings, for train rows only; and random deletions and swaps."""

import json
import random
import tempfile
from pathlib import Path

import mlflow
import numpy as np
import pytest

from data_prep import cache
from data_prep.pair_tokens import Tokenizer
from data_prep.text import clean_html
from tests.workflows.conftest import COMMON, first_runs_by_model, in_shared_store
from workflows import imdb_sentiment as workflow
from workflows.core import models, runs
from workflows.core import store as mlflow_store
from workflows.core.config import ConfigError
from workflows.sentiment import augmentation
from workflows.seq2seq.presets import CATALOG as TRANSLATORS
from workflows.seq2seq.presets import EXPERIMENT as TRANSLATION
from workflows.seq2seq.translator import Translator
from workflows.translation import build_model

WORDS = ["a", "gripping", "beautifully", "shot", "film", "loved", "it", "great", "acting",
         "story", "wonderful", "and", "moving", "dull", "far", "too", "long", "skip", "awful",
         "script", "number", "in", "train"]
SPANISH = ["una", "pelicula", "gran", "historia", "larga", "aburrida", "guion", "en", "y"]


class EchoTokenizer:
    def source_ids(self, sentences):
        return [np.arange(len(s.split()), dtype="int32") for s in sentences]


class FakeTranslator:
    """Upper-cases (forward) or reverses the words (back); counts what it translated."""

    def __init__(self, backward, max_source_length=12):
        self.backward, self.max_source_length = backward, max_source_length
        self.tokenizer, self.translated = EchoTokenizer(), []

    def translate(self, texts, beam_width=None):
        self.translated += texts
        return [" ".join(t.split()[::-1]) if self.backward else t.upper() for t in texts]

    def n_best(self, texts, n):
        return [[(f"{out} v{k}", -k) for k in range(n)] for out in self.translate(texts)]


def fake_memo(folder, copies=1):
    forward, back = FakeTranslator(False), FakeTranslator(True)
    return augmentation.ParaphraseMemo(folder, lambda: forward, lambda: back, copies), back


def test_units_are_seeded_slices_of_the_chosen_reviews():
    texts = [f"First {i}.<br />Second {i}! Third {i}? Fourth {i}." for i in range(40)]
    picked = augmentation.units(texts, "slices", 2, 0.5, seed=3)
    assert picked == augmentation.units(texts, "slices", 2, 0.5, seed=3)
    assert len(picked) == 40 and {copy for _, copy, _ in picked} == {0, 1}
    chosen = sorted({index for index, _, _ in picked})
    assert len(chosen) == 20 and chosen != sorted({i for i, _, _ in augmentation.units(
        texts, "slices", 1, 0.5, seed=4)})
    for index, _, text in picked:
        sentences = augmentation.split_sentences(texts[index])
        assert text in {" ".join(sentences[s:s + n]) for s in range(4) for n in (1, 2)}
    whole = augmentation.units(texts, "reviews", 1, 1.0, seed=0)
    assert [text for _, _, text in whole] == [clean_html(text) for text in texts]


def test_edits_delete_and_swap_words_reproducibly():
    text = " ".join(f"w{i}" for i in range(50))
    first = augmentation.edited(text, random.Random(1))
    assert first == augmentation.edited(text, random.Random(1)) != text
    assert set(first.split()) < set(text.split()) and len(first.split()) >= 35
    assert augmentation.edited("alone", random.Random(0)) == "alone"


def test_paraphrases_are_remembered_and_reused(tmp_path):
    memo, back = fake_memo(tmp_path)
    texts = ["good film. bad end.", "good film.", "x " * 20]
    made, summary = memo.paraphrase_units(texts)
    assert made == ["FILM. GOOD END. BAD", "FILM. GOOD", "x " * 19 + "x"]  # too long: kept
    assert summary["newly_translated_sentences"] == 3 and summary["paraphrased_sentences"] == 3
    again, back_again = fake_memo(tmp_path)
    assert again.paraphrase_units(texts)[0] == made and back_again.translated == []


def test_a_damaged_or_cut_memo_line_is_translated_again(tmp_path):
    memo, _ = fake_memo(tmp_path)
    memo.paraphrase_units(["one two. three four."])
    path = tmp_path / augmentation.MEMO_FILE
    lines = path.read_text().splitlines()
    path.write_text(lines[0].replace("TWO", "TOO") + "\n" + lines[1][:-5])  # damaged, cut
    again, back = fake_memo(tmp_path)
    assert again.paraphrase_units(["one two. three four."])[0] == ["TWO. ONE FOUR. THREE"]
    assert sorted(back.translated) == ["ONE TWO.", "THREE FOUR."]
    assert len(augmentation.read_memo(path)) == 2


def test_copies_take_the_n_best_back_translations_in_turn(tmp_path):
    memo, _ = fake_memo(tmp_path, copies=2)
    made, _ = memo.paraphrase_units(["nice one.", "nice one."])
    assert made == ["ONE. NICE v0", "ONE. NICE v1"]


# ## With logged translators, on the shared tiny IMDB store


def save_translator(folder, source, target, direction, seed):
    """A small untrained word-level Transformer: deterministic, if meaningless, output."""
    import keras

    keras.utils.set_random_seed(seed)
    config = TRANSLATORS.make("transformer", "tutorial", {
        "tokenization": "word", "direction": direction, "sequence_length": 12,
        "embed_dim": 8, "dense_dim": 8, "num_heads": 1, "encoder_layers": 1,
        "decoder_layers": 1})
    vocabularies = (["", "[UNK]", *source], ["", "[UNK]", "[start]", "[end]", *target])
    tokenizer = Tokenizer("word", *vocabularies, 12, direction)
    model = build_model(config, *tokenizer.vocabulary_sizes)
    return Translator(model, tokenizer, 12, 13, 1).save(folder)


def log_translator(direction, seed):
    """A run of the translation experiment holding a translator folder as its model."""
    source, target = (WORDS, SPANISH) if direction == "en-es" else (SPANISH, WORDS)
    mlflow_store.use_experiment(TRANSLATION)
    with mlflow.start_run() as run, tempfile.TemporaryDirectory() as folder:
        save_translator(Path(folder) / "translator", source, target, direction, seed)
        mlflow.log_params({"model": "transformer", "preset": "tutorial",
                           "direction": direction})
        mlflow.log_artifacts(folder, "model/artifacts")
        local = mlflow.artifacts.download_artifacts(models.model_uri(run.info.run_id),
                                                    dst_path=str(Path(folder) / "copy"))
        mlflow.set_tags({"model_logged": "true",
                         models.DIGEST_TAG: cache.folder_digest(local)})
    return run.info.run_id


@pytest.fixture(scope="module")
def translators(store):
    with in_shared_store():  # whatever another module's fixture left in the environment
        return {"translator": log_translator("en-es", 1),
                "back_translator": log_translator("es-en", 2)}


NBSVM = ["--model", "nbsvm", *COMMON, "--set", "sentence_slices=0"]


@pytest.mark.integration
def test_a_model_trains_on_round_trip_paraphrases_of_train_reviews_only(store, translators):
    args = [*NBSVM, "--augment", "round_trip", "--set", "augment_fraction=0.5"]
    assert workflow.main(["train", *args]) == 0
    run = mlflow.search_runs(experiment_names=[workflow.EXPERIMENT], output_format="list",
                             filter_string="params.augment = 'round_trip'")[0]
    assert {run.data.params[role] for role in translators} == set(translators.values())
    config = workflow.complete_config(workflow.CATALOG.from_params(run.data.params))
    plain = workflow.load_data(workflow.CATALOG.make("nbsvm"))
    data = workflow.load_data(config)
    for split in ("val", "test"):
        assert data.prepared.texts(split) == plain.prepared.texts(split)
        assert (data.prepared.labels(split) == plain.prepared.labels(split)).all()
    originals = plain.prepared.texts("train")
    added = data.prepared.texts("train")[len(originals):]
    assert len(added) == round(0.5 * len(originals)) == run.data.metrics["augmented_rows"]
    picked = augmentation.units(originals, "slices", 1, 0.5, config.seed)
    forward, back = (augmentation.load_translator(runs.find_run(TRANSLATION, translators[r]))
                     for r in ("translator", "back_translator"))
    def round_trip(sentence):  # what the two logged translators make of one sentence
        spanish = forward.translate([sentence], beam_width=1)[0]
        english = back.translate([spanish], beam_width=1)[0] if spanish else ""
        return english if english.strip() else sentence

    expected = [" ".join(map(round_trip, augmentation.split_sentences(text)))
                for _, _, text in picked[:6]]
    assert added[:6] == expected != [text for _, _, text in picked[:6]]
    assert (data.prepared.labels("train")[len(originals):]
            == plain.prepared.labels("train")[[i for i, _, _ in picked]]).all()
    assert data.fingerprint in run.data.tags["dataset_fingerprint"]
    logged = json.loads(mlflow.artifacts.load_text(f"runs:/{run.info.run_id}/augmentation.json"))
    assert logged["newly_translated_sentences"] == logged["augment_sentences"] > 0
    assert data.augmentation["newly_translated_sentences"] == 0  # from the cache


@pytest.mark.integration
def test_the_paraphrase_cache_is_keyed_by_translators_and_settings(store, translators):
    def data(**changes):
        config = workflow.complete_config(workflow.CATALOG.make("nbsvm", None, {
            "augment": "round_trip", "augment_fraction": 0.25, **changes}))
        return workflow.load_data(config)

    first, reseeded, two_best = data(), data(seed=7), data(augment_copies=2)
    cache_of = [d.augmentation["paraphrase_cache"] for d in (first, reseeded, two_best)]
    assert cache_of[0] == cache_of[1] != cache_of[2]  # sentences are shared, n-best is not
    assert len({d.fingerprint for d in (first, reseeded, two_best)}) == 3
    assert reseeded.augmentation["newly_translated_sentences"] < \
        reseeded.augmentation["augment_sentences"]
    swapped = {"translator": translators["back_translator"],
               "back_translator": translators["translator"]}
    with pytest.raises(ConfigError, match="must translate en-es"):
        workflow.complete_config(workflow.CATALOG.make("nbsvm", None, {
            "augment": "round_trip", **swapped}))


def test_edit_augmentation_and_the_augment_step(store, capsys):
    assert workflow.main(["augment", *NBSVM[:2], "--augment", "edit"]) == 0
    out = capsys.readouterr().out
    assert "edit-" in out and '"augmented_rows": 38' in out
    assert workflow.main(["augment", *NBSVM[:2]]) == 2
    assert "--augment round_trip" in capsys.readouterr().err


def test_round_trip_without_a_translator_says_which_to_train(tmp_path, monkeypatch, capsys,
                                                            restore_tracking_uri, new_store):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", new_store(tmp_path / "empty.db"))
    assert workflow.main(["train", *NBSVM, "--augment", "round_trip"]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and "--direction en-es" in error[0]


def test_token_models_see_the_augmented_rows_as_token_ids(store):
    config = workflow.CATALOG.make("bilstm", None, {"augment": "edit", "max_tokens": 300})
    data, plain = workflow.load_data(config), workflow.load_data(
        workflow.CATALOG.make("bilstm", None, {"max_tokens": 300}))
    ids = data.prepared.token_ids("train")
    originals = plain.prepared.token_ids("train")
    assert (ids[:len(originals)] == originals).all()
    vectorizer = plain.prepared.python_vectorizer()
    assert (ids[len(originals):] == vectorizer(data.prepared.texts("train")[len(originals):])).all()
    assert first_runs_by_model()["bilstm"].data.params.get("augment", "none") == "none"
