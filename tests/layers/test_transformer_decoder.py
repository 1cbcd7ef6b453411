import keras
import keras_hub
import numpy as np
import pytest
from keras import ops

from layers import PositionalEmbedding, TransformerDecoder, TransformerEncoder
from tests.layers.helpers import assert_close, pad, random_ids, to_numpy
from tests.layers.test_transformer_encoder import copy_weights_to_keras_hub

EMBED, FFN, HEADS, VOCAB, MAX_LEN = 16, 32, 4, 30, 12


def translator(norm_first=False, num_decoders=1, position="learned"):
    """A tiny encoder-decoder with token logits, built from the project's layers."""
    source = keras.Input(shape=(None,), dtype="int32", name="source")
    target = keras.Input(shape=(None,), dtype="int32", name="target")
    encoded = PositionalEmbedding(MAX_LEN, VOCAB, EMBED)(source)
    encoded = TransformerEncoder(EMBED, FFN, HEADS, norm_first=norm_first)(encoded)
    embedding = PositionalEmbedding(MAX_LEN, VOCAB, EMBED, position=position)
    x = embedding(target)
    for _ in range(num_decoders):
        x = TransformerDecoder(EMBED, FFN, HEADS, norm_first=norm_first)(x, encoded)
    logits = keras.layers.Dense(VOCAB)(x)
    return keras.Model([source, target], logits)


def float_inputs(batch=2, target_length=7, source_length=9, seed=0):
    rng = np.random.default_rng(seed)
    target = rng.normal(size=(batch, target_length, EMBED)).astype("float32")
    source = rng.normal(size=(batch, source_length, EMBED)).astype("float32")
    return target, source


def test_shapes_and_encoder_free_mode():
    target, source = float_inputs()
    assert tuple(TransformerDecoder(EMBED, FFN, HEADS)(target, source).shape) == (2, 7, EMBED)
    decoder_only = TransformerDecoder(EMBED, FFN, HEADS)
    assert tuple(decoder_only(target).shape) == (2, 7, EMBED)
    with pytest.raises(ValueError, match="without cross-attention"):
        decoder_only(target, source)


def test_missing_source_is_a_clear_error():
    target, source = float_inputs()
    decoder = TransformerDecoder(EMBED, FFN, HEADS)
    decoder(target, source)
    with pytest.raises(ValueError, match="encoder_sequence"):
        decoder(target)


@pytest.mark.parametrize("norm_first", [False, True])
def test_causality(norm_first):
    """Changing target token k leaves decoder outputs before k unchanged."""
    model = translator(norm_first)
    source, target = random_ids(2, 8, VOCAB, seed=1), random_ids(2, 6, VOCAB, seed=2)
    reference = to_numpy(model([source, target]))
    for k in range(1, 6):
        changed = target.copy()
        changed[:, k] = changed[:, k] % (VOCAB - 1) + 1
        outputs = to_numpy(model([source, changed]))
        np.testing.assert_allclose(outputs[:, :k], reference[:, :k], atol=1e-5)
        assert not np.allclose(outputs[:, k], reference[:, k], atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_invariance_of_source_and_target(norm_first):
    model = translator(norm_first)
    source, target = random_ids(2, 5, VOCAB, seed=3), random_ids(2, 4, VOCAB, seed=4)
    reference = model([source, target])
    assert_close(model([pad(source, 4), target]), reference)
    assert_close(model([source, pad(target, 3)])[:, :4], reference)


def test_source_padding_gets_no_attention():
    target, source = float_inputs(batch=1)
    source_mask = np.array([[1] * 5 + [0] * 4], dtype=bool)
    decoder = TransformerDecoder(EMBED, FFN, HEADS)
    outputs, scores = decoder(target, source, encoder_sequence_mask=source_mask,
                              return_attention_scores=True)
    scores = to_numpy(scores)
    assert scores.shape == (1, HEADS, 7, 9)
    np.testing.assert_allclose(scores[..., 5:], 0.0, atol=1e-7)
    np.testing.assert_allclose(scores.sum(-1), 1.0, atol=1e-5)


def test_masks_reach_the_loss():
    """Keras uses the target mask as sample weights: labels at padding don't count."""
    model = translator()
    model.compile(loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    source, target = random_ids(2, 5, VOCAB, seed=5), pad(random_ids(2, 4, VOCAB, seed=6), 3)
    labels = np.roll(target, -1, axis=1)
    other_labels = labels.copy()
    other_labels[:, 4:] = 7
    loss = model.evaluate([source, target], labels, verbose=0)
    assert np.isclose(loss, model.evaluate([source, target], other_labels, verbose=0))


def incremental(decoder, target, source, source_mask):
    cache = decoder.initial_cache(target.shape[0], target.shape[1])
    cross_cache = decoder.cross_attention_cache(source)
    steps = []
    for t in range(target.shape[1]):
        output, cache = decoder(target[:, t : t + 1], encoder_sequence_mask=source_mask,
                                self_attention_cache=cache, cache_update_index=t,
                                cross_attention_cache=cross_cache)
        steps.append(output)
    return ops.concatenate(steps, axis=1)


@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_decoding_equals_full_forward_pass(norm_first):
    target, source = float_inputs()
    source_mask = np.array([[1] * 9, [1] * 6 + [0] * 3], dtype=bool)
    decoder = TransformerDecoder(EMBED, FFN, HEADS, norm_first=norm_first)
    full = decoder(target, source, encoder_sequence_mask=source_mask)
    assert_close(incremental(decoder, target, source, source_mask), full, atol=1e-5)


def test_cached_decoding_of_a_stacked_model_with_positions():
    """Token by token through the embedding (start_index) and two decoder layers."""
    source_embedding = PositionalEmbedding(MAX_LEN, VOCAB, EMBED)
    encoder = TransformerEncoder(EMBED, FFN, HEADS)
    target_embedding = PositionalEmbedding(MAX_LEN, VOCAB, EMBED, position="sine")
    decoders = [TransformerDecoder(EMBED, FFN, HEADS) for _ in range(2)]
    source, target = random_ids(2, 6, VOCAB, seed=7), random_ids(2, 5, VOCAB, seed=8)
    source_mask = source != 0
    encoded = encoder(source_embedding(source), mask=source_mask)
    full = target_embedding(target)
    for decoder in decoders:
        full = decoder(full, encoded, encoder_sequence_mask=source_mask)

    caches = [decoder.initial_cache(2, MAX_LEN) for decoder in decoders]
    cross_caches = [decoder.cross_attention_cache(encoded) for decoder in decoders]
    steps = []
    for t in range(target.shape[1]):
        x = target_embedding(target[:, t : t + 1], start_index=t)
        for i, decoder in enumerate(decoders):
            x, caches[i] = decoder(x, encoder_sequence_mask=source_mask,
                                   self_attention_cache=caches[i], cache_update_index=t,
                                   cross_attention_cache=cross_caches[i])
        steps.append(x)
    assert_close(ops.concatenate(steps, axis=1), full, atol=1e-5)


def test_cache_arguments_go_together():
    target, source = float_inputs()
    decoder = TransformerDecoder(EMBED, FFN, HEADS)
    decoder(target, source)
    with pytest.raises(ValueError, match="together"):
        decoder(target, source, self_attention_cache=decoder.initial_cache(2, 7))


@pytest.mark.parametrize("norm_first", [False, True])
def test_matches_keras_hub_with_same_weights(norm_first):
    target, source = float_inputs()
    target_mask = np.array([[1] * 7, [1] * 5 + [0] * 2], dtype=bool)
    source_mask = np.array([[1] * 9, [1] * 6 + [0] * 3], dtype=bool)
    ours = TransformerDecoder(EMBED, FFN, HEADS, norm_first=norm_first)
    theirs = keras_hub.layers.TransformerDecoder(FFN, HEADS, normalize_first=norm_first)
    ours(target, source), theirs(target, source)
    copy_weights_to_keras_hub(ours, theirs)
    expected = theirs(target, source, decoder_padding_mask=target_mask,
                      encoder_padding_mask=source_mask)
    actual = ours(target, source, decoder_sequence_mask=target_mask,
                  encoder_sequence_mask=source_mask)
    # Outputs at padded target positions are never used; compare the real ones.
    for row, length in enumerate([7, 5]):
        assert_close(actual[row, :length], expected[row, :length], atol=1e-5)
