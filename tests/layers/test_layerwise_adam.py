"""LayerwiseAdam: per-group learning-rate multipliers and start steps."""

import keras
import numpy as np
import pytest

from layers import LayerwiseAdam
from tests.layers.helpers import to_numpy


def two_layer_model():
    inputs = keras.Input(shape=(3,))
    hidden = keras.layers.Dense(4, name="low")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, name="high")(hidden))


def moves_per_step(groups, steps):
    """How far each layer's kernel moved at each of `steps` training steps."""
    keras.utils.set_random_seed(0)
    model = two_layer_model()
    model.compile(LayerwiseAdam(0.01, groups=groups, epsilon=1e-12), "mse")
    x, y = np.random.default_rng(0).normal(size=(8, 3)), np.ones((8, 1))
    moves = []
    for _ in range(steps):
        before = {layer: to_numpy(model.get_layer(layer).kernel).copy()
                  for layer in ("low", "high")}
        model.train_on_batch(x, y)
        moves.append({layer: float(np.abs(to_numpy(model.get_layer(layer).kernel)
                                          - before[layer]).max()) for layer in before})
    return moves


def test_a_group_trains_at_its_multiple_of_the_rate():
    (first,) = moves_per_step({"low": (0.5, 0)}, steps=1)
    # Adam's first step moves every weight by the learning rate (m / sqrt(v) = +-1)
    assert first["high"] == pytest.approx(0.01, rel=1e-3)
    assert first["low"] == pytest.approx(0.005, rel=1e-3)


def test_a_group_is_frozen_until_its_start_step():
    moves = moves_per_step({"low": (1.0, 2)}, steps=4)
    assert [step["low"] for step in moves[:2]] == [0.0, 0.0]
    assert all(step["low"] > 0 for step in moves[2:])
    assert all(step["high"] > 0 for step in moves)


def test_config_round_trips_and_bad_groups_are_refused():
    optimizer = LayerwiseAdam(0.002, groups={"decoder_0": (0.25, 10)}, beta_1=0.8)
    clone = LayerwiseAdam.from_config(optimizer.get_config())
    assert clone.groups == {"decoder_0": (0.25, 10)} and clone.beta_1 == 0.8
    with pytest.raises(ValueError, match="decoder_1"):
        LayerwiseAdam(groups={"decoder_1": (-1.0, 0)})
