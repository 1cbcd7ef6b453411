import keras
import numpy as np
import pytest

from layers import NoamSchedule, WarmupLinearDecay
from tests.layers.helpers import to_numpy


def noam(step, d_model, warmup):
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def test_noam_matches_formula_and_peak():
    schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    for iteration in [0, 1, 99, 3998, 3999, 4000, 20000]:
        expected = noam(iteration + 1, 512, 4000)
        np.testing.assert_allclose(float(to_numpy(schedule(iteration))), expected, rtol=1e-5)
    rates = [float(to_numpy(schedule(i))) for i in range(3990, 4010)]
    assert int(np.argmax(rates)) + 3990 == 3999  # step 4000
    assert round(max(rates), 6) == 0.000699


def test_warmup_linear_decay_matches_formula():
    schedule = WarmupLinearDecay(2e-3, warmup_steps=10, total_steps=110, end_learning_rate=1e-4)
    for iteration, expected in [(0, 2e-4), (4, 1e-3), (9, 2e-3), (59, 2e-3 - 1.9e-3 * 0.5),
                                (109, 1e-4), (500, 1e-4)]:
        np.testing.assert_allclose(float(to_numpy(schedule(iteration))), expected, rtol=1e-5)


def test_schedules_validate():
    with pytest.raises(ValueError, match="warmup_steps"):
        WarmupLinearDecay(1e-3, warmup_steps=10, total_steps=10)
    with pytest.raises(ValueError, match="positive"):
        NoamSchedule(d_model=0)


@pytest.mark.parametrize(
    "schedule",
    [NoamSchedule(256, warmup_steps=100, scale=2.0), WarmupLinearDecay(1e-3, 5, 50)],
)
def test_schedules_serialize_inside_an_optimizer(schedule):
    optimizer = keras.optimizers.Adam(learning_rate=schedule)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    restored_schedule = restored._learning_rate
    assert isinstance(restored_schedule, type(schedule))
    assert restored_schedule.get_config() == schedule.get_config()
    np.testing.assert_allclose(to_numpy(restored_schedule(42)), to_numpy(schedule(42)))
