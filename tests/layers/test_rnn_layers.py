import keras
import numpy as np
import pytest
from keras import ops

from layers import BahdanauAttention, GRUSeq2SeqDecoder, GRUSeq2SeqEncoder, RNNClassifier
from tests.layers.helpers import assert_close, pad, random_ids, to_numpy

VOCAB = 25


def classifier_model(**kwargs):
    ids = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(VOCAB, 8, mask_zero=True)(ids)
    return keras.Model(ids, RNNClassifier(**kwargs)(x))


@pytest.mark.parametrize("cell", ["rnn", "lstm", "gru"])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_classifier_shapes_and_padding_invariance(cell, bidirectional):
    model = classifier_model(cell=cell, units=6, bidirectional=bidirectional, num_layers=2)
    ids = random_ids(3, 5, VOCAB)
    probabilities = to_numpy(model(ids))
    assert probabilities.shape == (3, 1)
    assert ((probabilities > 0) & (probabilities < 1)).all()
    assert_close(model(pad(ids, 4)), probabilities)


def test_classifier_multiclass_softmax():
    probabilities = to_numpy(classifier_model(units=4, num_classes=3)(random_ids(2, 4, VOCAB)))
    assert probabilities.shape == (2, 3)
    np.testing.assert_allclose(probabilities.sum(-1), 1.0, atol=1e-6)


def test_classifier_is_the_tutorial_head():
    """Embedding -> BiLSTM(32) -> Dropout -> Dense(1): same weight shapes as the listing."""
    model = classifier_model()
    block = model.layers[-1]
    shapes = [tuple(w.shape) for w in block.weights]
    assert shapes == [(8, 128), (32, 128), (128,), (8, 128), (32, 128), (128,), (64, 1), (1,)]


def test_classifier_bad_cell():
    with pytest.raises(ValueError, match="cell"):
        RNNClassifier(cell="transformer")


def bahdanau_reference(attention, query, value, mask):
    """The equations in NumPy: e = v^T tanh(W_q q + W_k k + b), a = softmax(e), c = a v."""
    w_q = to_numpy(attention.query_projection.kernel)
    w_k, b_k = (to_numpy(w) for w in attention.key_projection.weights)
    v = to_numpy(attention.score_vector.kernel)[:, 0]
    hidden = np.tanh((query @ w_q)[:, :, None, :] + (value @ w_k + b_k)[:, None, :, :])
    scores = np.where(mask[:, None, :], hidden @ v, -np.inf)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return weights @ value, weights


def test_bahdanau_attention_matches_its_equations():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(2, 3, 5)).astype("float32")
    value = rng.normal(size=(2, 4, 6)).astype("float32")
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0]], dtype=bool)
    attention = BahdanauAttention(units=7)
    context, weights = attention(query, value, value_mask=mask, return_attention_scores=True)
    expected_context, expected_weights = bahdanau_reference(attention, query, value, mask)
    assert_close(weights, expected_weights, atol=1e-6)
    assert_close(context, expected_context, atol=1e-5)
    np.testing.assert_allclose(to_numpy(weights)[1, :, 2:], 0.0)


def test_seq2seq_encoder_states():
    encoder = GRUSeq2SeqEncoder(VOCAB, embed_dim=6, latent_dim=8)
    ids = random_ids(2, 5, VOCAB)
    sequence, state = encoder(ids)
    assert tuple(sequence.shape) == (2, 5, 8) and tuple(state.shape) == (2, 8)
    padded_sequence, padded_state = encoder(pad(ids, 3))
    assert_close(padded_state, state)
    assert_close(padded_sequence[:, :5], sequence)
    unidirectional = GRUSeq2SeqEncoder(VOCAB, 6, 8, bidirectional=False)
    assert tuple(unidirectional(ids)[1].shape) == (2, 8)


@pytest.mark.parametrize("attention", [False, True])
def test_seq2seq_decoder_incremental_equals_full(attention):
    encoder = GRUSeq2SeqEncoder(VOCAB, embed_dim=6, latent_dim=8)
    decoder = GRUSeq2SeqDecoder(VOCAB, embed_dim=6, latent_dim=8, attention=attention)
    source, target = pad(random_ids(2, 5, VOCAB, seed=1), 2), random_ids(2, 4, VOCAB, seed=2)
    sequence, state = encoder(source)
    source_mask = source != 0
    full = decoder(target, state, sequence, encoder_sequence_mask=source_mask)
    assert tuple(full.shape) == (2, 4, VOCAB)
    steps = []
    for t in range(4):
        logits, state = decoder(target[:, t : t + 1], state, sequence,
                                encoder_sequence_mask=source_mask, return_state=True)
        steps.append(logits)
    assert_close(ops.concatenate(steps, axis=1), full, atol=1e-5)


def test_seq2seq_model_ignores_source_padding():
    source = keras.Input(shape=(None,), dtype="int32")
    target = keras.Input(shape=(None,), dtype="int32")
    sequence, state = GRUSeq2SeqEncoder(VOCAB, 6, 8)(source)
    logits = GRUSeq2SeqDecoder(VOCAB, 6, 8, attention=True)(target, state, sequence)
    model = keras.Model([source, target], logits)
    source_ids, target_ids = random_ids(2, 4, VOCAB, seed=3), random_ids(2, 3, VOCAB, seed=4)
    assert_close(model([pad(source_ids, 3), target_ids]), model([source_ids, target_ids]))


def test_attention_decoder_needs_the_encoder_sequence():
    decoder = GRUSeq2SeqDecoder(VOCAB, 6, 8, attention=True)
    with pytest.raises(ValueError, match="encoder_sequence"):
        decoder(random_ids(1, 2, VOCAB), np.zeros((1, 8), "float32"))
