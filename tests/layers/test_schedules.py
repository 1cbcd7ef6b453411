import keras
import numpy as np
import pytest

from layers import NoamSchedule, WarmupCosineToHorizon, WarmupLinearDecay
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
    with pytest.raises(ValueError, match="warmup_share"):
        WarmupCosineToHorizon(1e-3, warmup_share=1.0)


def cosine(step, peak, warmup, horizon, final=0.0):
    """The schedule written out, `step` counted from 1."""
    if step < warmup:
        return peak * step / warmup
    progress = min(max((step - warmup) / (horizon - warmup), 0.0), 1.0)
    return peak * (final + (1 - final) * 0.5 * (1 + np.cos(np.pi * progress)))


def test_warmup_cosine_matches_formula_and_moves_with_its_horizon():
    schedule = WarmupCosineToHorizon(2e-3, warmup_share=0.2, horizon_steps=100,
                                     final_share=0.1)
    for iteration in [0, 9, 19, 20, 59, 99, 150]:
        np.testing.assert_allclose(float(to_numpy(schedule(iteration))),
                                   cosine(iteration + 1, 2e-3, 20, 100, 0.1), rtol=1e-5)
    optimizer = keras.optimizers.Adam(schedule)
    schedule.attach(optimizer)
    assert "horizon_steps" in [variable.name for variable in optimizer.variables]
    schedule.set_horizon(1000)  # the warmup and the decay stretch with it
    for iteration in [19, 199, 599]:
        np.testing.assert_allclose(float(to_numpy(schedule(iteration))),
                                   cosine(iteration + 1, 2e-3, 200, 1000, 0.1), rtol=1e-5)


def test_a_moved_horizon_reaches_the_compiled_train_step():
    schedule = WarmupCosineToHorizon(1e-2, warmup_share=0.5, horizon_steps=1000)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    optimizer = keras.optimizers.SGD(schedule)
    schedule.attach(optimizer)
    model.compile(optimizer, "mse")
    x, y = np.ones((4, 2), "float32"), np.ones((4, 1), "float32")
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    early = float(to_numpy(optimizer.learning_rate))  # step 3 of a 500-step warmup
    schedule.set_horizon(4)  # the run ends at step 4: its warmup is over, its decay too
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    np.testing.assert_allclose(early, cosine(3, 1e-2, 500, 1000), rtol=1e-5)
    assert float(to_numpy(optimizer.learning_rate)) == 0.0


@pytest.mark.parametrize(
    "schedule",
    [NoamSchedule(256, warmup_steps=100, scale=2.0), WarmupLinearDecay(1e-3, 5, 50),
     WarmupCosineToHorizon(1e-3, 0.05, 500, final_share=0.1)],
)
def test_schedules_serialize_inside_an_optimizer(schedule):
    optimizer = keras.optimizers.Adam(learning_rate=schedule)
    restored = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    restored_schedule = restored._learning_rate
    assert isinstance(restored_schedule, type(schedule))
    assert restored_schedule.get_config() == schedule.get_config()
    np.testing.assert_allclose(to_numpy(restored_schedule(42)), to_numpy(schedule(42)))
