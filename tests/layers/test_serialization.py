"""Every layer round-trips through get_config and through a `.keras` file."""

import keras
import pytest

import layers
from layers import (
    BahdanauAttention,
    GRUSeq2SeqDecoder,
    GRUSeq2SeqEncoder,
    NaiveBayesLinear,
    NoamSchedule,
    PositionalEmbedding,
    RNNClassifier,
    ScannedBlocks,
    SinePositionEncoding,
    TransformerDecoder,
    TransformerEncoder,
)
from tests.layers.helpers import assert_close, pad, random_ids

VOCAB = 40


def model_with_every_layer():
    """Transformer and GRU translators plus an RNN classifier, in one model."""
    source = keras.Input(shape=(None,), dtype="int32", name="source")
    target = keras.Input(shape=(None,), dtype="int32", name="target")
    x = PositionalEmbedding(12, VOCAB, 16, name="source_embedding")(source)
    x = x + SinePositionEncoding(name="extra_sine")(x)
    encoded = TransformerEncoder(16, 32, 4, dropout=0.1, norm_first=True)(x)
    target_embedding = PositionalEmbedding(12, VOCAB, 16, position="sine", name="target_embedding")
    y = TransformerDecoder(16, 32, 4, dropout=0.1, key_dim=8)(target_embedding(target), encoded)
    transformer_logits = target_embedding(y, reverse=True)

    sequence, state = GRUSeq2SeqEncoder(VOCAB, 8, 12)(source)
    gru_logits = GRUSeq2SeqDecoder(VOCAB, 8, 12, attention=True)(target, state, sequence)
    context = BahdanauAttention(6)(sequence, sequence)

    sentiment = RNNClassifier(cell="gru", units=4, num_layers=2)(encoded)
    model = keras.Model(
        [source, target],
        {"transformer": transformer_logits, "gru": gru_logits, "context": context,
         "sentiment": sentiment},
    )
    model.compile(optimizer=keras.optimizers.Adam(NoamSchedule(16, warmup_steps=10)))
    return model


def test_model_with_every_layer_round_trips_through_a_keras_file(tmp_path):
    model = model_with_every_layer()
    inputs = [pad(random_ids(2, 5, VOCAB, seed=1), 2), pad(random_ids(2, 4, VOCAB, seed=2), 1)]
    expected = model(inputs)
    model.optimizer.build(model.trainable_variables)
    path = tmp_path / "every_layer.keras"
    model.save(path)
    restored = keras.saving.load_model(path)
    actual = restored(inputs)
    for key in expected:
        assert_close(actual[key], expected[key], atol=1e-6)
    assert isinstance(restored.optimizer._learning_rate, NoamSchedule)


@pytest.mark.parametrize("name", layers.__all__)
def test_every_export_is_registered_and_configurable(name):
    cls = getattr(layers, name)
    registered = keras.saving.get_registered_object(f"nlpkit>{name}")
    assert registered is cls
    assert cls.__doc__ and "Example" in cls.__doc__


@pytest.mark.parametrize(
    "layer",
    [
        PositionalEmbedding(8, 20, 4, position="sine", mask_zero=False,
                            scale_token_embeddings=True),
        SinePositionEncoding(max_wavelength=100),
        TransformerEncoder(8, 16, 2, dropout=0.2, norm_first=True, key_dim=8, activation="gelu"),
        TransformerDecoder(8, 16, 2, layer_norm_epsilon=1e-3),
        RNNClassifier(cell="rnn", units=3, bidirectional=False, num_layers=3, num_classes=4),
        GRUSeq2SeqEncoder(20, 4, 6, bidirectional=False),
        GRUSeq2SeqDecoder(20, 4, 6, attention=True, attention_units=5, dropout=0.1),
        BahdanauAttention(9),
        NaiveBayesLinear(beta=0.5, l2=1e-3),
        ScannedBlocks(TransformerEncoder(8, 16, 2, dropout=0.1), 3, seed=1),
    ],
    ids=lambda layer: type(layer).__name__,
)
def test_get_config_returns_the_constructor_arguments(layer):
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
