"""NaiveBayesLinear and log_count_ratios: numerics against hand computations."""

import keras
import numpy as np
import pytest

from layers import NaiveBayesLinear
from layers.naive_bayes_linear import log_count_ratios
from tests.layers.helpers import assert_close, to_numpy

# Four documents over four features (binary presence); labels 1, 1, 0, 0.
DOCUMENTS = np.array([[1, 1, 0, 0], [1, 0, 1, 0], [0, 0, 1, 1], [1, 0, 0, 1]], "float32")
LABELS = np.array([1, 1, 0, 0])


def test_log_count_ratios_match_a_hand_computation():
    positive = DOCUMENTS[LABELS == 1].sum(axis=0)  # [2, 1, 1, 0]
    negative = DOCUMENTS[LABELS == 0].sum(axis=0)  # [1, 0, 1, 2]
    # alpha = 1: p = [3, 2, 2, 1] / 8, q = [2, 1, 2, 3] / 8
    expected = np.log([3 / 2, 2 / 1, 2 / 2, 1 / 3])
    assert_close(log_count_ratios(positive, negative), expected)
    # alpha = 0.5: p = [2.5, 1.5, 1.5, 0.5] / 6, q = [1.5, 0.5, 1.5, 2.5] / 6
    assert_close(log_count_ratios(positive, negative, alpha=0.5),
                 np.log([2.5 / 1.5, 1.5 / 0.5, 1.0, 0.5 / 2.5]))


def test_logit_is_the_interpolated_nb_weighted_linear_model():
    layer = NaiveBayesLinear(beta=0.25)
    layer.build((None, 4))
    ratios = np.array([0.5, -1.0, 2.0, 0.0], "float32")
    kernel = np.array([1.0, -3.0, 0.5, 2.0], "float32")
    layer.set_ratios(ratios)
    layer.kernel.assign(kernel)
    layer.bias.assign([0.1])
    interpolated = 0.75 * np.abs(kernel).mean() + 0.25 * kernel
    assert_close(layer.interpolated_kernel(), interpolated)
    assert_close(layer(DOCUMENTS), DOCUMENTS @ (ratios * interpolated)[:, None] + 0.1)


def test_zero_weights_start_from_the_bias_and_learn_the_labels():
    inputs = keras.Input(shape=(4,))
    linear = NaiveBayesLinear(beta=0.5, l2=1e-4)
    model = keras.Model(inputs, keras.layers.Activation("sigmoid")(linear(inputs)))
    linear.set_ratios(log_count_ratios(DOCUMENTS[:2].sum(0), DOCUMENTS[2:].sum(0)))
    assert_close(model(DOCUMENTS), np.full((4, 1), 0.5))
    model.compile(keras.optimizers.Adam(0.1), "binary_crossentropy")
    model.fit(DOCUMENTS, LABELS, epochs=30, verbose=0)
    probabilities = to_numpy(model(DOCUMENTS))[:, 0]
    assert np.all((probabilities > 0.5) == LABELS.astype(bool))
    assert len(model.losses) == 1  # the L2 penalty
    assert to_numpy(linear.ratios).tolist() == pytest.approx(
        to_numpy(log_count_ratios(DOCUMENTS[:2].sum(0), DOCUMENTS[2:].sum(0))).tolist())


def test_ratios_are_saved_with_the_model(tmp_path):
    inputs = keras.Input(shape=(4,))
    linear = NaiveBayesLinear()
    model = keras.Model(inputs, linear(inputs))
    linear.set_ratios([1.0, 2.0, 3.0, 4.0])
    linear.kernel.assign([0.5, 0.0, -0.5, 1.0])
    model.save(tmp_path / "nbsvm.keras")
    restored = keras.saving.load_model(tmp_path / "nbsvm.keras")
    assert_close(restored(DOCUMENTS), model(DOCUMENTS))
    assert not restored.layers[-1].ratios.trainable


@pytest.mark.parametrize("kwargs, message", [({"beta": 0}, "beta"), ({"beta": 1.5}, "beta"),
                                             ({"l2": -1.0}, "l2")])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        NaiveBayesLinear(**kwargs)


def test_several_units_give_one_vs_rest_logits_and_round_trip(tmp_path):
    layer = NaiveBayesLinear(beta=0.5, units=3)
    layer.build((None, 4))
    ratios = np.arange(12, dtype="float32").reshape(4, 3) / 10 - 0.5
    kernel = np.linspace(-1, 1, 12, dtype="float32").reshape(4, 3)
    layer.set_ratios(ratios)
    layer.kernel.assign(kernel)
    layer.bias.assign([0.1, 0.0, -0.1])
    interpolated = 0.5 * np.abs(kernel).mean(axis=0) + 0.5 * kernel
    expected = DOCUMENTS @ (ratios * interpolated) + np.array([0.1, 0.0, -0.1])
    assert_close(layer(DOCUMENTS), expected)
    inputs = keras.Input((4,))
    model = keras.Model(inputs, layer(inputs))
    model.save(tmp_path / "nb.keras")
    loaded = keras.saving.load_model(tmp_path / "nb.keras")
    assert loaded.layers[-1].units == 3
    assert_close(loaded(DOCUMENTS), expected)
