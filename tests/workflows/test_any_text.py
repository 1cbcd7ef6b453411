"""Texts as they really come: any Unicode a user's file holds (line and paragraph
separators, NUL and other controls, a byte-order mark, Windows-1252 mojibake,
zero-width characters, combining marks, emoji, right-to-left scripts, CRLF, tabs and
newlines inside quoted CSV fields) is read once, normalized (`normalize_text`), and
every sentiment family trained on it saves and reloads with the same predictions.

The reader's properties run 60 examples in the quick tier and 300 in the integration
tier; the families' a fast profile in the quick tier (two families, two examples) and,
in the integration tier, 300 examples of every family's preprocessor (built by the
family on random texts, saved and reloaded with its classifier: the part that learns
from the texts) and `MANY` of every family trained end to end (the encoder's and a
keras-hub preset's on tiny random weights); every other vocabulary 300 each."""

import csv
import dataclasses
import json
import tempfile
from pathlib import Path

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from data_prep import text_classes
from data_prep.labelled_texts import read_classes
from data_prep.text import normalize_text
from tests.data_prep.fixtures import write_tiny_encoder, write_tiny_hub_preset
from workflows import imdb_sentiment as workflow
from workflows.core import models, runs
from workflows.sentiment.sources import LabelledFiles
from workflows.sentiment.text_classifier import load_classifier, save_classifier

# the characters that broke a vocabulary, or that real files carry
AWKWARD = ["\x85", "\u2028", "\u2029", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\x00",
           "\x01", "\x7f", "\x91", "\x92", "\x96", "\x97", "\x81", "\ufeff", "\u200b",
           "\u200d", "\u0301", "\r\n", "\r", "\n", "\t", "\xa0", "\u3000", "👍🏽",
           "👨\u200d👩\u200d👧", "שלום", "مرحبا", "\u202e", "é", "e\u0301", "日本語", '"', ",",
           "<br />", "&amp;"]
WORDS = ["good", "bad", "film", "plot", "movie", "great", "dull"]
piece = st.one_of(st.sampled_from(AWKWARD), st.sampled_from(WORDS),
                  st.text(st.characters(codec="utf-8"), max_size=8))
text = st.lists(piece, min_size=1, max_size=12).map(" ".join)
# the property's labelled texts: each of two classes at least 4 times, every text with a
# word left after normalization and different from the others (an empty text, and a
# file of copies of too few texts, are refused: tested elsewhere)
texts = st.lists(text.map(lambda t: t + " " + WORDS[len(t) % len(WORDS)]), min_size=8,
                 max_size=24, unique_by=normalize_text)


def profile(examples):
    """Hypothesis settings of these tests: `examples` examples, the same on every run
    (seeded, no database), no deadline (each may train a model)."""
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=list(HealthCheck))


# ## The one reader


def reader_properties(examples):
    """Hypothesis, `examples` each: a normalized text holds nothing that breaks a line or
    a string; the reader gives back every text of a CSV or JSON-lines file normalized."""
    fast = profile(examples)

    @fast
    @given(text)
    def normalized_once(raw):
        normal = normalize_text(raw)
        assert normal.splitlines() in ([normal], [])  # no line break Python honours
        assert normal.rstrip() == normal.rstrip(" ")  # no other space (keras-hub strips it)
        assert "\x00" not in normal and "\ufeff" not in normal
        assert normalize_text(normal) == normal  # once is enough

    @fast
    @given(st.lists(text, min_size=2, max_size=20), st.sampled_from(["csv", "jsonl"]))
    def read_back(rows, kind):
        rows = [row for row in rows if normalize_text(row).strip()] or ["x", "y"]
        labels = ["a" if i % 2 else "b\u2028" for i in range(len(rows))]
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"texts.{kind}"
            write_labelled(path, rows, labels)
            assert read_classes(path) == ([normalize_text(row) for row in rows],
                                          [normalize_text(label).strip() for label in labels])

    normalized_once()
    read_back()


def test_the_reader_normalizes_every_text_whatever_it_holds():
    reader_properties(examples=60)


@pytest.mark.integration
def test_the_reader_normalizes_many_random_texts():
    reader_properties(examples=300)


def test_windows_1252_mojibake_is_repaired_not_dropped():
    assert normalize_text("don\x92t stop\x85 \x93now\x94 \x96 e\u0301\xa0!") == \
        "don’t stop… “now” – é !"


def write_labelled(path, rows, labels):
    """A user's file of `rows` and `labels`, as a spreadsheet or a script writes it."""
    if path.suffix == ".csv":
        with path.open("w", encoding="utf-8", newline="") as file:
            writer = csv.writer(file)
            writer.writerow(["text", "label"])
            writer.writerows(zip(rows, labels, strict=True))
    else:
        path.write_text("".join(json.dumps({"text": row, "label": label}) + "\n"
                                for row, label in zip(rows, labels, strict=True)),
                        encoding="utf-8")


# ## A user's file of raw reviews, trained, exported and reloaded


RAW_REVIEWS = ["good\x85movie", "good movie", "a good film\u2028truly", "bad\x1cplot",
               "bad plot", "dull\x0bfilm", "great\ufeff film \u200b", "great film",
               "\ufeffdull, \"so\"\r\ndull", "bad\x1dfilm", "don\x92t miss it, great",
               "it was bad\x97really", "שלום good", "مرحبا bad", "good 👍🏽", "bad e\u0301"]
RAW_LABELS = ["pos", "pos", "pos", "neg", "neg", "neg", "pos", "pos", "neg", "neg", "pos",
              "neg", "pos", "neg", "pos", "neg"]


def test_a_csv_of_raw_reviews_trains_exports_and_its_model_reloads(own_texts_store):
    """At 13fd371 the export died on Keras's vocabulary asset: U+0085 split a term in
    two on reload ("The passed vocabulary has at least one repeated term")."""
    path = own_texts_store / "reviews.csv"
    write_labelled(path, RAW_REVIEWS * 3, RAW_LABELS * 3)
    assert workflow.main(["train", "--texts", str(path), "--model", "bow", "--epochs", "1",
                          "--set", "batch_size=8", "--set", "hidden_units=4"]) == 0
    run = runs.model_run(workflow.LESSON)
    answers = models.load_pyfunc(run).predict(RAW_REVIEWS)
    assert [answer["label"] for answer in answers] and all(
        np.isfinite(list(answer["probabilities"].values())).all() for answer in answers)


@pytest.fixture
def own_texts_store(tmp_path, monkeypatch, new_store, restore_tracking_uri):
    monkeypatch.setenv("NLPKIT_WORK_DIR", str(tmp_path / "work"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", new_store(tmp_path / "mlflow.db"))
    return tmp_path


# ## Every family: random texts -> a tiny model -> save -> reload -> the same answers

TINY = {"max_tokens": 200, "batch_size": 8, "epochs": 1, "seed": 7}
FAMILIES = {  # --model -> its tiny settings ("hub": `encoder` on a keras-hub preset)
    "bow": {"hidden_units": 4},
    "nbsvm": {"sentence_slices": 1},
    "bilstm": {"embed_dim": 4, "units": 2, "sequence_length": 32},
    "transformer": {"embed_dim": 8, "dense_dim": 8, "num_heads": 2, "sequence_length": 32},
    "doc2vec": {"vector_size": 8, "doc2vec_epochs": 2, "min_count": 1},
    "encoder": {"max_review_tokens": 32},
    "hub": {"max_review_tokens": 16},
}


def tiny_trained(model, rows, labels, root, encoder=None):
    """`tiny_built`, trained one epoch."""
    trainable, prepared = tiny_built(model, rows, labels, root, encoder, trainable=True)
    trainable.model.fit(trainable.train_batches(0), epochs=1, verbose=0)
    return trainable.classifier, prepared


def tiny_built(model, rows, labels, root, encoder=None, trainable=False):
    """`model`'s classifier of the kit (on the `encoder` folder, if given) built on
    `rows` read as a user's file (through the one reader and the lesson's own `build`),
    and the prepared texts; `trainable`: the `Trainable` instead of its classifier."""
    path = root / "texts.jsonl"
    write_labelled(path, rows, labels)
    family = workflow.family("encoder" if model == "hub" else model)
    config = family.MODELS["encoder" if model == "hub" else model]
    config = dataclasses.replace(config, **{name: value for name, value in TINY.items()
                                            if hasattr(config, name)}, **FAMILIES[model],
                                 **({"encoder": str(encoder)} if encoder else {}))
    source = LabelledFiles(text_classes.TextsFiles(str(path)))
    prepared = source.prepare(workflow.data_settings(source, config), root)
    built = family.build(config, workflow.LabelledData(prepared, "tiny", encoder=encoder,
                                                       source=source))
    return (built if trainable else built.classifier), prepared


def check_family(model, root_of, examples, encoder=None):
    """Hypothesis: `examples` random sets of labelled texts, each trained on by a tiny
    `model`, whose saved classifier reloads and answers raw texts as it did."""

    @profile(examples)
    @given(texts)
    def trains_saves_and_reloads(rows):
        root = root_of(model)
        labels = ["yes" if i % 2 else "no" for i in range(len(rows))]
        classifier, prepared = tiny_trained(model, rows, labels, root, encoder)
        save_classifier(root / "classifier", classifier)
        asked = [*rows, *AWKWARD]  # raw texts, as a caller sends them
        np.testing.assert_allclose(load_classifier(root / "classifier").predict(asked),
                                   classifier.predict(asked), atol=1e-6)
        assert all(token.splitlines() == [token] for token in prepared.vocabulary()[1:])

    trains_saves_and_reloads()


@pytest.mark.parametrize("model", ["bow", "nbsvm"])  # the quick tier's profile
def test_a_family_trained_on_any_text_reloads_with_the_same_answers(model, tmp_path_factory):
    check_family(model, tmp_path_factory.mktemp, examples=2)


@pytest.mark.integration
@pytest.mark.parametrize("model", FAMILIES)
def test_many_random_texts_train_save_and_reload_in_every_family(model, tmp_path_factory):
    check_family(model, tmp_path_factory.mktemp, MANY[model],
                 pretrained(model, tmp_path_factory))


# ## Every family's preprocessor, at scale: learned on random texts (or a pretrained
# vocabulary), saved with its classifier, reloaded: the same arrays for any text


def check_preprocessor(model, root_of, examples, encoder=None):
    """Hypothesis: `examples` random sets of labelled texts read as a user's file. A
    family that learns its inputs from the texts (`LEARNS`) is built on each by its own
    `build` (no training: what matters here is what its preprocessor learned); one of a
    pretrained vocabulary is built once. Its classifier saved and reloaded, the
    preprocessor turns the texts, and every awkward character, into the same arrays."""
    rows = [f"{word} film {i}" for i, word in enumerate(WORDS + WORDS[:1])]
    fixed = None if model in LEARNS else reloaded(model, rows, root_of(model), encoder)

    @profile(examples)
    @given(texts)
    def saves_and_reloads(rows):
        built, again = fixed or reloaded(model, rows, root_of(model), encoder)
        for asked in (rows, AWKWARD, [""]):
            expected, found = built.encode(asked), again.encode(asked)
            for key in (expected if isinstance(expected, dict) else [None]):
                np.testing.assert_allclose(*(keras.ops.convert_to_numpy(
                    arrays if key is None else arrays[key]).astype("float64")
                    for arrays in (found, expected)), atol=1e-6)

    saves_and_reloads()


def reloaded(model, rows, root, encoder=None):
    """The preprocessor of `model`'s classifier built on `rows`, and that of the
    classifier saved and loaded again."""
    labels = ["yes" if i % 2 else "no" for i in range(len(rows))]
    classifier, _ = tiny_built(model, rows, labels, root, encoder)
    save_classifier(root / "classifier", classifier)
    return classifier.preprocessor, load_classifier(root / "classifier").preprocessor


@pytest.mark.integration
@pytest.mark.parametrize("model", FAMILIES)
def test_every_familys_preprocessor_reloads_the_same_on_many_random_texts(model,
                                                                          tmp_path_factory):
    check_preprocessor(model, tmp_path_factory.mktemp, PREPROCESSOR_EXAMPLES,
                       pretrained(model, tmp_path_factory))


PREPROCESSOR_EXAMPLES = 300
LEARNS = ("bow", "nbsvm", "bilstm", "transformer", "doc2vec")  # the rest: pretrained


def pretrained(model, tmp_path_factory):
    """A tiny pretrained encoder of the words texts hold for `encoder` (the kit's) and
    `hub` (a keras-hub preset), else None."""
    if model not in ("encoder", "hub"):
        return None
    folder = tmp_path_factory.mktemp("encoder") / model
    return write_tiny_encoder(folder, words=WORDS) if model == "encoder" else \
        write_tiny_hub_preset(folder, "bert", WORDS)


# examples per family: each trains a model (measured on 2 cores: about 1.1, 1.1, 3.5,
# 3.4, 0.8, 16 and 3.7 s; the kit's encoder builds its BERT from the folder each time);
# the preprocessors' property above takes 300 of each at far less
MANY = {"bow": 25, "nbsvm": 25, "bilstm": 10, "transformer": 10, "doc2vec": 20,
        "encoder": 3, "hub": 5}


# ## Every other vocabulary: learned on random texts, saved, reloaded, the same ids


def vocabulary_properties(examples):
    """Hypothesis, `examples` each: every `TextVectorization` standardization of the kit
    (the sentiment families', the translator's), keras-hub's WordPiece as the
    translation and language-model lessons learn it (and `lm_classifier`'s preprocessor
    of it), BM25 and the dense retriever's WordPiece, on random texts: saved and
    reloaded, they give the same ids."""
    import keras

    from data_prep.text import (
        STANDARDIZATIONS,
        WordPiece,
        learn_wordpiece,
        make_wordpiece_tokenizer,
        register_standardizations,
    )
    from workflows.retrievers.bm25 import BM25Index
    from workflows.sentiment.preprocessors import SubwordRows

    register_standardizations()
    fast = profile(examples)

    @fast
    @given(texts)
    def text_vectorization(rows):
        for standardize in STANDARDIZATIONS:
            layer = keras.layers.TextVectorization(max_tokens=300, standardize=standardize,
                                                   output_sequence_length=16)
            layer.adapt(rows)
            with tempfile.TemporaryDirectory() as folder:
                layer.save_assets(folder)
                again = keras.saving.deserialize_keras_object(
                    keras.saving.serialize_keras_object(layer))
                again.load_assets(folder)
            assert again.get_vocabulary() == layer.get_vocabulary()
            asked = [*rows, *AWKWARD]
            np.testing.assert_array_equal(again(asked), layer(asked))

    @fast
    @given(texts)
    def wordpiece(rows):
        normal = [normalize_text(row) for row in rows]  # as the lessons' readers give them
        tokenizer = make_wordpiece_tokenizer(learn_wordpiece(normal, 120))
        with tempfile.TemporaryDirectory() as folder:
            tokenizer.save_assets(folder)
            again = type(tokenizer).from_config(tokenizer.get_config())
            again.load_assets(folder)
        assert again.vocabulary == tokenizer.vocabulary
        assert again(normal) == tokenizer(normal)
        rows = SubwordRows(tokenizer.vocabulary, max_tokens=32, chunk=8)  # lm_classifier's
        config = keras.saving.serialize_keras_object(rows)
        with tempfile.TemporaryDirectory() as folder:
            rows.save_assets(folder)
            loaded = keras.saving.deserialize_keras_object(config)
            loaded.load_assets(folder)
        asked = [*normal, *AWKWARD]
        np.testing.assert_array_equal(loaded.encode(asked), rows.encode(asked))

    @fast
    @given(texts, text)
    def bm25(rows, query):
        index = BM25Index.build(rows, stemmer="none", stop_words="none")
        with tempfile.TemporaryDirectory() as folder:
            index.save(folder)
            again = BM25Index.load(folder)
        asked = [query, *rows[:3], *AWKWARD]
        for found, expected in zip(again.search(asked, 3), index.search(asked, 3), strict=True):
            np.testing.assert_array_equal(found, expected)

    pretrained = WordPiece(["[PAD]", "[UNK]", "[CLS]", "[SEP]", *WORDS, "##s", "a", "e"])

    @fast
    @given(text)
    def dense_tokens(raw):
        (ids,) = pretrained([raw])
        assert all(0 <= i < len(pretrained.ids) for i in ids)

    for prop in (text_vectorization, wordpiece, bm25, dense_tokens):
        prop()


def test_every_vocabulary_survives_any_text():
    vocabulary_properties(examples=10)


@pytest.mark.integration
def test_every_vocabulary_survives_many_random_texts():
    vocabulary_properties(examples=300)
