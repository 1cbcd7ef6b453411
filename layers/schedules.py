"""Learning-rate schedules with warmup, serializable like any Keras schedule."""

import math

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


@keras.saving.register_keras_serializable(package="nlpkit")
class WarmupCosineToHorizon(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup over a share of a run's steps, then cosine decay to the run's end,
    where the run's length (`horizon_steps`) may be learnt while it trains.

    For `step` counted from 1 (`iterations + 1`) and a horizon of `H` steps:
    `lr = peak * step / (warmup_share * H)` during the warmup, then
    `peak * (final_share + (1 - final_share) * (1 + cos(pi * progress)) / 2)` with
    `progress` going from 0 at the warmup's end to 1 at `H`, held there after it.

    `attach(optimizer)` keeps the horizon in a variable of the optimizer, so the
    compiled train step reads it like the step count: `set_horizon(steps)` then moves
    the run's end (for example to what a wall-time budget affords, measured as the run
    goes) without compiling anything again. Unattached, the horizon is a constant.

    Args:
        peak_learning_rate: float.
        warmup_share: float in [0, 1). The warmup's share of the horizon.
        horizon_steps: int. The run's length in steps, until `set_horizon`.
        final_share: float in [0, 1]. The rate at the horizon, as a share of the peak.

    Example:
    >>> schedule = WarmupCosineToHorizon(1e-3, warmup_share=0.1, horizon_steps=1000)
    >>> [round(float(schedule(step)), 6) for step in (49, 99, 549, 999)]
    [0.0005, 0.001, 0.0005, 0.0]
    """

    def __init__(self, peak_learning_rate, warmup_share=0.1, horizon_steps=10000,
                 final_share=0.0):
        if not 0 <= warmup_share < 1 or not 0 <= final_share <= 1 or horizon_steps < 1:
            raise ValueError(
                "Need 0 <= warmup_share < 1, 0 <= final_share <= 1 and horizon_steps >= 1, "
                f"got {warmup_share}, {final_share}, {horizon_steps}."
            )
        self.peak_learning_rate = peak_learning_rate
        self.warmup_share = warmup_share
        self.horizon_steps = int(horizon_steps)
        self.final_share = final_share
        self.horizon = None  # the optimizer's variable, once attached

    def attach(self, optimizer):
        """Keeps the horizon in a (non-trainable) variable of `optimizer`; returns self."""
        self.horizon = optimizer.add_variable(
            (), initializer=keras.initializers.Constant(float(self.horizon_steps)),
            dtype="float32", name="horizon_steps")
        return self

    def set_horizon(self, steps):
        """Moves the run's end to `steps` (at least 1); the compiled step reads it."""
        self.horizon_steps = max(1, int(steps))
        if self.horizon is not None:
            self.horizon.assign(float(self.horizon_steps))

    def __call__(self, step):
        step = ops.cast(step, "float32") + 1.0
        horizon = ops.cast(self.horizon, "float32") if self.horizon is not None \
            else float(self.horizon_steps)
        warmup = ops.maximum(self.warmup_share * horizon, 1.0)
        progress = ops.clip((step - warmup) / ops.maximum(horizon - warmup, 1.0), 0.0, 1.0)
        cosine = 0.5 * (1.0 + ops.cos(math.pi * progress))
        decay = self.final_share + (1.0 - self.final_share) * cosine
        return self.peak_learning_rate * ops.where(step < warmup, step / warmup, decay)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_share": self.warmup_share,
            "horizon_steps": self.horizon_steps,
            "final_share": self.final_share,
        }
