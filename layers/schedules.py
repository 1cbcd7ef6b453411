"""Learning-rate schedules with warmup, serializable like any Keras schedule."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="nlpkit")
class NoamSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """The inverse-square-root warmup schedule of *Attention Is All You Need* (5.3).

    `lr(step) = scale * d_model**-0.5 * min(step**-0.5, step * warmup_steps**-1.5)`:
    a linear ramp for `warmup_steps` steps, then decay as `1/sqrt(step)`. The peak,
    at `step = warmup_steps`, is `scale * (d_model * warmup_steps)**-0.5`
    (6.99e-4 for `d_model=512, warmup_steps=4000`). `step` counts from 1: the
    optimizer's `iterations + 1`, so the first update uses a non-zero rate.

    Args:
        d_model: int. Model width.
        warmup_steps: int. Defaults to `4000`.
        scale: float. Multiplies the whole curve. Defaults to `1.0`.

    Example:
    >>> schedule = NoamSchedule(d_model=512, warmup_steps=4000)
    >>> round(float(schedule(3999)), 7)
    0.0006988
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        if d_model <= 0 or warmup_steps <= 0:
            raise ValueError(
                f"`d_model` and `warmup_steps` must be positive, got {d_model}, {warmup_steps}."
            )
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        ramp = step * float(self.warmup_steps) ** -1.5
        return self.scale * float(self.d_model) ** -0.5 * ops.minimum(ops.rsqrt(step), ramp)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale}


@keras.saving.register_keras_serializable(package="nlpkit")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup from 0 to `peak_learning_rate`, then linear decay.

    For `step` counted from 1 (`iterations + 1`):
    `lr = peak * step / warmup_steps` while `step <= warmup_steps`, then
    `peak + (end - peak) * (step - warmup_steps) / (total_steps - warmup_steps)`,
    held at `end_learning_rate` after `total_steps`.

    Args:
        peak_learning_rate: float.
        warmup_steps: int. Length of the ramp; may be 0.
        total_steps: int. Step at which the decay reaches `end_learning_rate`.
        end_learning_rate: float. Defaults to `0.0`.

    Example:
    >>> schedule = WarmupLinearDecay(1e-3, warmup_steps=100, total_steps=1000)
    >>> round(float(schedule(49)), 6), round(float(schedule(99)), 6), float(schedule(999))
    (0.0005, 0.001, 0.0)
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps, end_learning_rate=0.0):
        if not 0 <= warmup_steps < total_steps:
            raise ValueError(
                "Need 0 <= warmup_steps < total_steps, got "
                f"warmup_steps={warmup_steps}, total_steps={total_steps}."
            )
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps
        self.end_learning_rate = end_learning_rate

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        peak, end = self.peak_learning_rate, self.end_learning_rate
        warmup = peak * step / max(self.warmup_steps, 1)
        progress = ops.clip(
            (step - self.warmup_steps) / (self.total_steps - self.warmup_steps), 0.0, 1.0
        )
        decay = peak + (end - peak) * progress
        return ops.where(step <= self.warmup_steps, warmup, decay)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
            "end_learning_rate": self.end_learning_rate,
        }
