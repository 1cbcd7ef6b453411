import keras
import keras_hub
import numpy as np
import pytest

from layers import PositionalEmbedding, TransformerEncoder
from tests.layers.helpers import assert_close, pad, random_ids


def encoder_model(norm_first=False, dropout=0.0):
    ids = keras.Input(shape=(None,), dtype="int32")
    x = PositionalEmbedding(sequence_length=16, vocab_size=40, embed_dim=16)(ids)
    x = TransformerEncoder(16, 32, num_heads=4, norm_first=norm_first, dropout=dropout)(x)
    return keras.Model(ids, x)


def test_shapes_and_dtype():
    encoder = TransformerEncoder(embed_dim=16, dense_dim=32, num_heads=4)
    outputs = encoder(np.random.rand(3, 7, 16).astype("float32"))
    assert tuple(outputs.shape) == (3, 7, 16)
    assert keras.backend.standardize_dtype(outputs.dtype) == "float32"


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_invariance(norm_first):
    model = encoder_model(norm_first)
    real = random_ids(2, 5, 40)
    assert_close(model(pad(real, 4))[:, :5], model(real))


def test_mask_reaches_pooling():
    ids = keras.Input(shape=(None,), dtype="int32")
    x = PositionalEmbedding(sequence_length=16, vocab_size=40, embed_dim=16)(ids)
    x = TransformerEncoder(16, 32, num_heads=4)(x)
    model = keras.Model(ids, keras.layers.GlobalAveragePooling1D()(x))
    real = random_ids(2, 6, 40)
    assert_close(model(pad(real, 5)), model(real))


def test_explicit_mask_argument():
    encoder = TransformerEncoder(8, 16, num_heads=2)
    x = np.random.rand(1, 6, 8).astype("float32")
    masked = encoder(x, mask=np.array([[1, 1, 1, 0, 0, 0]], dtype=bool))
    assert_close(masked[:, :3], encoder(x[:, :3]))


def test_dropout_only_in_training():
    model = encoder_model(dropout=0.3)
    ids = random_ids(2, 6, 40)
    assert_close(model(ids, training=False), model(ids, training=False))
    outputs = [keras.ops.convert_to_numpy(model(ids, training=t)) for t in (True, False)]
    assert not np.allclose(*outputs)


def test_default_key_dim_is_embed_dim_over_heads():
    default = TransformerEncoder(64, 128, num_heads=8)
    tutorial = TransformerEncoder(64, 128, num_heads=8, key_dim=64)
    x = np.zeros((1, 3, 64), "float32")
    default(x), tutorial(x)
    assert default.head_dim == 8 and tutorial.head_dim == 64
    # Q, K, V and output projections: 4 * d * d vs 4 * d * (8 d), plus biases.
    assert default.self_attention.count_params() == 4 * 64 * 64 + 3 * 64 + 64
    assert tutorial.self_attention.count_params() == 4 * 64 * 512 + 3 * 512 + 64


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 3}, "divisible"),
        ({"dense_dim": 0}, "dense_dim"),
        ({"dropout": 1.0}, "dropout"),
        ({"key_dim": -1}, "key_dim"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {"embed_dim": 16, "dense_dim": 32, "num_heads": 4, **kwargs}
    with pytest.raises(ValueError, match=message):
        TransformerEncoder(**arguments)


def test_wrong_feature_size_is_a_clear_error():
    with pytest.raises(ValueError, match="embed_dim=16"):
        TransformerEncoder(16, 32, num_heads=4)(np.zeros((1, 3, 8), "float32"))


def copy_weights_to_keras_hub(ours, theirs):
    """Copies weights sublayer by sublayer (the two classes build them in other orders)."""
    pairs = [
        (ours.self_attention, theirs._self_attention_layer),
        (ours.self_attention_norm, theirs._self_attention_layer_norm),
        (ours.feedforward.layers[0], theirs._feedforward_intermediate_dense),
        (ours.feedforward.layers[1], theirs._feedforward_output_dense),
        (ours.feedforward_norm, theirs._feedforward_layer_norm),
    ]
    if getattr(ours, "cross_attention", None) is not None:
        pairs += [
            (ours.cross_attention, theirs._cross_attention_layer),
            (ours.cross_attention_norm, theirs._cross_attention_layer_norm),
        ]
    for source, target in pairs:
        target.set_weights(source.get_weights())


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_keras_hub_with_same_weights(norm_first):
    x = np.random.default_rng(1).normal(size=(2, 6, 16)).astype("float32")
    padding = np.array([[1] * 6, [1] * 4 + [0] * 2], dtype=bool)
    ours = TransformerEncoder(16, 32, num_heads=4, norm_first=norm_first)
    theirs = keras_hub.layers.TransformerEncoder(32, num_heads=4, normalize_first=norm_first)
    ours(x), theirs(x)
    copy_weights_to_keras_hub(ours, theirs)
    assert_close(ours(x, mask=padding), theirs(x, padding_mask=padding), atol=1e-5)
