"""MaskedCrossentropy: numerics against Keras' own losses, padding ignored, serialization."""

import keras
import numpy as np
import pytest

from layers import MaskedCrossentropy
from tests.layers.helpers import assert_close


def logits_and_labels(seed=0, batch=3, length=5, vocab=7):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(batch, length, vocab)).astype("float32")
    labels = rng.integers(1, vocab, (batch, length)).astype("int32")
    labels[0, 3:] = 0  # padding at the end of the first sentence
    labels[2, 1:] = 0
    return logits, labels


def test_equals_keras_crossentropy_over_the_real_tokens_only():
    logits, labels = logits_and_labels()
    real = labels != 0
    expected = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        labels[real], logits[real])
    assert_close(MaskedCrossentropy()(labels, logits), expected, atol=1e-6)


def test_label_smoothing_equals_keras_on_one_hot_targets():
    logits, labels = logits_and_labels(seed=1)
    real = labels != 0
    one_hot = keras.ops.one_hot(labels[real], logits.shape[-1])
    expected = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)(
        one_hot, logits[real])
    assert_close(MaskedCrossentropy(label_smoothing=0.1)(labels, logits), expected, atol=1e-5)


def test_padding_logits_do_not_change_the_loss_and_all_padding_gives_zero():
    logits, labels = logits_and_labels(seed=2)
    changed = logits.copy()
    changed[labels == 0] += 100.0
    loss = MaskedCrossentropy(0.1)
    assert_close(loss(labels, logits), loss(labels, changed), atol=1e-6)
    assert float(loss(np.zeros_like(labels), logits)) == 0.0


def test_half_precision_logits_are_computed_in_float32():
    logits, labels = logits_and_labels(seed=3)
    loss = MaskedCrossentropy()
    assert_close(loss(labels, logits.astype("float16")), loss(labels, logits), atol=1e-2)


def test_refuses_a_smoothing_outside_zero_to_one():
    with pytest.raises(ValueError, match="label_smoothing"):
        MaskedCrossentropy(label_smoothing=1.5)


def test_compiled_model_with_the_loss_round_trips_through_a_keras_file(tmp_path):
    inputs = keras.Input((None,), dtype="int32")
    outputs = keras.layers.Dense(7)(keras.layers.Embedding(10, 4)(inputs))
    model = keras.Model(inputs, outputs)
    model.compile(optimizer="adam", loss=MaskedCrossentropy(label_smoothing=0.2))
    model.save(tmp_path / "model.keras")
    loaded = keras.saving.load_model(tmp_path / "model.keras")
    assert isinstance(loaded.loss, MaskedCrossentropy)
    assert loaded.loss.get_config() == model.loss.get_config()
    ids = np.asarray([[1, 2, 3, 0]], "int32")
    assert_close(loaded.compute_loss(ids, ids, loaded(ids)),
                 model.compute_loss(ids, ids, model(ids)), atol=1e-6)
