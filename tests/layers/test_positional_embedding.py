import keras
import keras_hub
import numpy as np
import pytest

from layers import PositionalEmbedding, SinePositionEncoding
from tests.layers.helpers import assert_close, pad, random_ids, to_numpy


@pytest.mark.parametrize("position", ["learned", "sine"])
def test_shapes_mask_and_shorter_inputs(position):
    layer = PositionalEmbedding(sequence_length=12, vocab_size=50, embed_dim=8, position=position)
    ids = np.array([[3, 4, 5, 0, 0], [7, 0, 0, 0, 0]], dtype="int32")
    outputs = layer(ids)
    assert tuple(outputs.shape) == (2, 5, 8)
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"
    assert to_numpy(layer.compute_mask(ids)).tolist() == (ids != 0).tolist()


def test_learned_is_token_plus_position_table():
    layer = PositionalEmbedding(sequence_length=6, vocab_size=20, embed_dim=4)
    ids = random_ids(2, 6, 20)
    outputs = layer(ids)
    tokens = to_numpy(layer.token_embedding.embeddings)
    positions = to_numpy(layer.position_embedding.embeddings)
    assert_close(outputs, tokens[ids] + positions[None, :6])


def test_sine_position_uses_the_sinusoid_formula_and_scaling():
    layer = PositionalEmbedding(10, 20, 8, position="sine", scale_token_embeddings=True)
    ids = random_ids(1, 5, 20)
    outputs = layer(ids)
    tokens = to_numpy(layer.token_embedding.embeddings)[ids] * np.sqrt(8)
    sines = to_numpy(SinePositionEncoding()(keras.ops.zeros((1, 5, 8))))
    assert_close(outputs, tokens + sines)
    assert not layer.trainable_weights[1:]  # only the token table is trainable


def test_start_index_shifts_positions():
    layer = PositionalEmbedding(sequence_length=10, vocab_size=30, embed_dim=6)
    ids = random_ids(2, 7, 30)
    full = to_numpy(layer(ids))
    for start in range(7):
        step = layer(ids[:, start : start + 1], start_index=start)
        assert_close(step[:, 0], full[:, start])


def test_too_long_input_is_a_clear_error():
    layer = PositionalEmbedding(sequence_length=4, vocab_size=30, embed_dim=6)
    with pytest.raises(ValueError, match="learned positions for 4"):
        layer(random_ids(1, 5, 30))


def test_sine_accepts_any_length():
    layer = PositionalEmbedding(sequence_length=4, vocab_size=30, embed_dim=6, position="sine")
    assert tuple(layer(random_ids(1, 9, 30)).shape) == (1, 9, 6)


def test_reverse_gives_tied_vocabulary_logits():
    layer = PositionalEmbedding(sequence_length=5, vocab_size=11, embed_dim=4)
    hidden = np.random.default_rng(0).normal(size=(2, 3, 4)).astype("float32")
    layer(random_ids(1, 2, 11))
    logits = layer(hidden, reverse=True)
    assert_close(logits, hidden @ to_numpy(layer.token_embedding.embeddings).T)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"position": "rotary"}, "position"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"embed_dim": 2.5}, "embed_dim"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {"sequence_length": 4, "vocab_size": 10, "embed_dim": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        PositionalEmbedding(**arguments)


def test_padding_is_masked_in_a_model():
    """The mask reaches a mask-aware pooling layer: trailing padding changes nothing."""
    ids = keras.Input(shape=(None,), dtype="int32")
    x = PositionalEmbedding(sequence_length=10, vocab_size=20, embed_dim=4)(ids)
    model = keras.Model(ids, keras.layers.GlobalAveragePooling1D()(x))
    real = random_ids(2, 4, 20)
    assert_close(model(real), model(pad(real, 3)))


def test_sine_encoding_matches_keras_hub():
    inputs = keras.ops.ones((2, 13, 10))
    ours = SinePositionEncoding(max_wavelength=500)
    theirs = keras_hub.layers.SinePositionEncoding(max_wavelength=500)
    assert_close(ours(inputs), theirs(inputs), atol=1e-6)
    assert_close(ours(inputs, start_index=4), theirs(inputs, start_index=4), atol=1e-6)


def test_sine_encoding_values():
    encoding = to_numpy(SinePositionEncoding()(keras.ops.zeros((1, 50, 16))))[0]
    position, i = 37, 3  # PE[pos, 2i] = sin(pos / 10000^(2i/d)), PE[pos, 2i+1] = cos(...)
    angle = position / 10000 ** (2 * i / 16)
    np.testing.assert_allclose(encoding[position, 2 * i], np.sin(angle), atol=1e-5)
    np.testing.assert_allclose(encoding[position, 2 * i + 1], np.cos(angle), atol=1e-5)
