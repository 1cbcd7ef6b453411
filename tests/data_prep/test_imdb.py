import keras
import numpy as np
import pytest

from data_prep import cache, imdb
from data_prep.text import BucketPlan
from layers import RNNClassifier
from tests.data_prep.fixtures import write_imdb_folder, write_tar_gz
from workflows.core.batches import LabelledBatches

SETTINGS = imdb.ImdbSettings(max_tokens=60, sequence_length=12, include_unlabelled=True)


@pytest.fixture
def archive(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.WORK_DIR_ENV, str(tmp_path / "work"))
    return write_tar_gz(write_imdb_folder(tmp_path / "src"), tmp_path / "aclImdb_v1.tar.gz")


def test_split_sizes_balance_and_determinism():
    labels = np.array([0] * 50 + [1] * 50)
    train, val = imdb.split_train_val(labels, 0.2, seed=3)
    assert len(train) == 80 and len(val) == 20
    assert set(train).isdisjoint(val) and set(train) | set(val) == set(range(100))
    assert labels[val].sum() == 10
    again = imdb.split_train_val(labels, 0.2, seed=3)
    assert (again[0] == train).all() and (again[1] == val).all()
    assert not (imdb.split_train_val(labels, 0.2, seed=4)[1] == val).all()


def test_prepare_counts_cleaning_and_cache_reuse(archive, tmp_path):
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    assert prepared.summary["counts"] == {"train": 16, "val": 4, "test": 20}
    assert prepared.summary["unlabelled"] == 4
    texts = prepared.texts("train") + prepared.texts("val")
    assert all("<br" not in text and "&amp;" not in text for text in texts)
    assert prepared.token_ids("test").shape == (20, 12)
    marker = prepared.directory / "settings.json"
    mtime = marker.stat().st_mtime_ns
    again = imdb.prepare(archive, SETTINGS, verbose=False)
    assert again.directory == prepared.directory and marker.stat().st_mtime_ns == mtime
    other = imdb.prepare(archive, imdb.ImdbSettings(max_tokens=30, sequence_length=12),
                         verbose=False)
    assert other.directory != prepared.directory


def test_vocabulary_round_trip_is_identical(archive):
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    reloaded = prepared.vectorizer()
    assert reloaded.get_vocabulary() == prepared.vocabulary()
    np.testing.assert_array_equal(imdb.vectorize(reloaded, prepared.texts("test")),
                                  prepared.token_ids("test"))
    ids = np.asarray(reloaded(["Loved it!<br />GREAT acting"]))[0]
    assert (ids[:4] > 1).all()  # every word known: tags and case removed


def test_non_utf8_files_are_skipped_with_a_count(tmp_path):
    base = write_imdb_folder(tmp_path / "src", reviews_per_class=3)
    (base / "train/pos/99_9.txt").write_bytes(b"caf\xe9 latin-1 review")
    with pytest.warns(UserWarning, match="Skipped 1 review files"):
        texts, labels, skipped = imdb.read_reviews(base / "train")
    assert skipped == 1 and len(texts) == len(labels) == 6


def test_bucketing_changes_only_batch_order_and_shapes(archive):
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    ids, labels = prepared.token_ids("test"), np.arange(20)  # labels = example index
    ids = ids.copy()
    ids[::3, 4:] = 0  # make the lengths differ
    inputs = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(60, 4, mask_zero=True)(inputs)
    model = keras.Model(inputs, RNNClassifier(units=3)(x))
    padded = dict(zip(labels, model.predict_on_batch(ids), strict=True))
    batches = LabelledBatches(ids, labels, BucketPlan((5, ids.shape[1]), rows=8), seed=0)
    bucketed = {}
    for index in range(len(batches)):
        x_, y, weights = batches[index]
        assert x_.shape in ((8, 5), (8, ids.shape[1]))  # one shape per bucket
        for i, p, w in zip(y, model.predict_on_batch(x_), weights, strict=True):
            if w:  # not a top-up row
                bucketed[int(i)] = p
    assert {x_.shape for x_, *_ in (batches[i] for i in range(len(batches)))} == {
        (8, 5), (8, ids.shape[1])}
    assert sorted(bucketed) == list(range(20))
    for index in range(20):
        np.testing.assert_allclose(bucketed[index], padded[index], atol=1e-6)


def test_the_python_vectorizer_gives_the_prepared_token_ids_without_tensorflow(archive):
    prepared = imdb.prepare(archive, SETTINGS, verbose=False)
    python = prepared.python_vectorizer()
    assert np.array_equal(python(prepared.texts("test")), prepared.token_ids("test"))
    tricky = ["The FILM is GREAT!<br /><br />", "Café\u00a0école ÉCOLE  don't\ttab",
              "&amp; a &#39; b", "", "İstanbul Straße ΣΑΣ", "x\u2003y\nz\r\nw",
              "<i>review</i>number", "number-one's don’t " * 5, "NUMBER 1 IN TEST"]
    assert np.array_equal(python(tricky), np.asarray(prepared.vectorizer()(tricky)))
