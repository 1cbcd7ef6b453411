"""Adam with per-layer learning rates and unfreezing steps (for fine-tuning)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="nlpkit")
class LayerwiseAdam(keras.optimizers.Adam):
    """Adam whose learning rate is scaled per group of variables, each group training
    from a step of its own: discriminative fine-tuning and gradual unfreezing
    (Howard & Ruder, 2018).

    A variable belongs to the group named by the first component of its path (for a
    layer `decoder_0` inside a model, `decoder_0/self_attention/query/kernel`); it is
    updated with `learning_rate * multiplier` from step `start_step` on, and not at all
    before. Variables of no group train at the full rate from the start. Adam's
    moments are kept for every variable, so unfreezing needs no recompilation.

    Args:
        learning_rate: a float or a schedule, as for `keras.optimizers.Adam`.
        groups: dict `{name: (multiplier, start_step)}`.
        **kwargs: the other arguments of `keras.optimizers.Adam`.

    Example:
    >>> groups = {"embedding": (0.25, 100), "decoder_0": (0.5, 50)}
    >>> optimizer = LayerwiseAdam(1e-3, groups=groups)
    >>> optimizer.group_of("decoder_0/self_attention/query/kernel")
    (0.5, 50)

    References:
        - [Howard and Ruder, 2018](https://arxiv.org/abs/1801.06146)
    """

    def __init__(self, learning_rate=0.001, groups=None, **kwargs):
        super().__init__(learning_rate=learning_rate, **kwargs)
        self.groups = {name: (float(multiplier), int(start))
                       for name, (multiplier, start) in (groups or {}).items()}
        for name, (multiplier, start) in self.groups.items():
            if multiplier < 0 or start < 0:
                raise ValueError(f"Group {name!r}: the multiplier and start step must be >= 0, "
                                 f"got {(multiplier, start)}.")

    def group_of(self, path):
        """`(multiplier, start_step)` of the variable at `path`."""
        return self.groups.get(path.split("/")[0], (1.0, 0))

    def build(self, variables):
        super().build(variables)
        self._variable_groups = [self.group_of(variable.path) for variable in variables]

    def update_step(self, gradient, variable, learning_rate):
        multiplier, start = self._variable_groups[self._get_variable_index(variable)]
        if (multiplier, start) != (1.0, 0):
            started = ops.cast(ops.greater_equal(self.iterations, start), variable.dtype)
            learning_rate = ops.cast(learning_rate, variable.dtype) * multiplier * started
        super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = super().get_config()
        config["groups"] = {name: list(group) for name, group in self.groups.items()}
        return config
