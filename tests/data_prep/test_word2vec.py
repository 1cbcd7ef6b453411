import tensorflow as tf

from data_prep import glove, word2vec


def test_tokenize_matches_review_standardization():
    from data_prep.text import standardize_review

    text = "You've GOT to see it!<br />Low-budget &amp; fun"
    standardized = standardize_review(tf.constant(text)).numpy().decode()
    assert word2vec.tokenize(text) == standardized.split()
    assert word2vec.tokenize("You've GOT to see it!<br />Low-budget &amp; fun") == [
        "youve", "got", "to", "see", "it", "lowbudget", "fun"]


def test_train_save_load_and_report(tmp_path):
    texts = ["a great movie with a great actor", "an awful movie with an awful actor",
             "the actor was great", "the movie was awful"] * 30
    vectors = word2vec.train_word2vec(texts, vector_size=8, min_count=1, epochs=2, workers=1)
    assert vectors.vector_size == 8 and "movie" in vectors
    path = tmp_path / "w2v.kv"
    vectors.save(str(path), separately=[])
    loaded = glove.load_word_vectors(path)
    assert loaded.dim == 8 and set(loaded.words) == set(vectors.index_to_key)
    report = word2vec.neighbours_report(vectors, words=("movie",), topn=2)
    assert report[0].startswith("movie: ")


def test_fasttext_option_and_unknown_algorithm(tmp_path):
    import pytest

    texts = ["a great movie", "an awful movie"] * 20
    vectors = word2vec.train_word2vec(texts, vector_size=8, min_count=1, epochs=1, workers=1,
                                      algorithm="fasttext")
    assert vectors.vector_size == 8 and vectors["greatest"].shape == (8,)  # n-gram fallback
    with pytest.raises(ValueError, match="fasttext"):
        word2vec.train_word2vec(texts, algorithm="glove")
