"""NBSVM: a linear classifier over naive-Bayes log-count ratios (Wang & Manning, 2012)."""

import keras
from keras import ops


def log_count_ratios(positive_counts, negative_counts, alpha=1.0):
    """Naive Bayes log-count ratios `r = log((p / |p|_1) / (q / |q|_1))`.

    `p = alpha + positive_counts` and `q = alpha + negative_counts`, where the counts
    are, per feature, the sum of its (binary) values over the positive and over the
    negative training examples; `alpha` is the smoothing.

    Example:
    >>> [round(float(r), 3) for r in log_count_ratios([3, 0], [1, 2])]
    [0.693, -1.099]
    """
    p = ops.convert_to_tensor(positive_counts, "float32") + alpha
    q = ops.convert_to_tensor(negative_counts, "float32") + alpha
    return ops.log(p / ops.sum(p)) - ops.log(q / ops.sum(q))


@keras.saving.register_keras_serializable(package="nlpkit")
class NaiveBayesLinear(keras.layers.Layer):
    """The logit of NBSVM: a linear model over features scaled by log-count ratios.

    Wang & Manning (2012) scale each binary n-gram feature `x` by its naive-Bayes
    log-count ratio `r` (see `log_count_ratios`), fit a linear model `w` on `r * x`,
    then interpolate its weights with their mean magnitude,
    `w' = (1 - beta) * mean(|w|) + beta * w`, which trusts naive Bayes (equal weights
    on `r * x`) where the linear model has little evidence. Here the interpolation
    is part of the forward pass, so training fits the interpolated model directly:
    the logit is `(r * w') . x + b`.

    The ratios are a non-trainable weight: set them with `set_ratios` after the layer
    is built (they are saved with the model). Inputs may be dense or sparse
    multi-hot (or count) vectors of shape `(batch, features)`.

    With `units` > 1 (one-vs-rest NBSVM of several classes) each output has its own
    ratios (a class against the others), weights and bias, and the ratios are a
    `(features, units)` matrix.

    Args:
        beta: float in (0, 1]. Interpolation weight of the fitted weights; `1` gives
            plain NB-weighted logistic regression. Defaults to `0.25` (the paper's).
        l2: float. L2 penalty on the fitted weights. Defaults to `0`.
        units: int. Outputs (logits), one per class against the rest. Defaults to `1`.

    Example:
    >>> layer = NaiveBayesLinear(beta=0.5)
    >>> layer.build((None, 3))
    >>> layer.set_ratios([1.0, -1.0, 0.0])
    >>> tuple(layer(keras.ops.ones((2, 3))).shape)
    (2, 1)

    References:
        - [Wang and Manning, 2012](https://aclanthology.org/P12-2018/)
    """

    def __init__(self, beta=0.25, l2=0.0, units=1, **kwargs):
        super().__init__(**kwargs)
        if not isinstance(units, int) or units < 1:
            raise ValueError(f"`units` must be a whole number >= 1, got {units!r}.")
        if not 0 < beta <= 1:
            raise ValueError(f"`beta` must be in (0, 1], got {beta!r}.")
        if l2 < 0:
            raise ValueError(f"`l2` must be >= 0, got {l2!r}.")
        self.beta = beta
        self.l2 = l2
        self.units = units

    def build(self, input_shape):
        shape = (input_shape[-1],) if self.units == 1 else (input_shape[-1], self.units)
        self.ratios = self.add_weight(shape=shape, initializer="zeros",
                                      trainable=False, name="ratios")
        self.kernel = self.add_weight(
            shape=shape, initializer="zeros", name="kernel",
            regularizer=keras.regularizers.L2(self.l2) if self.l2 else None)
        self.bias = self.add_weight(shape=(self.units,), initializer="zeros", name="bias")

    def set_ratios(self, ratios):
        self.ratios.assign(ops.cast(ratios, self.ratios.dtype))

    def interpolated_kernel(self):
        """`w' = (1 - beta) * mean(|w|) + beta * w` (the mean of each output's weights)."""
        return (1 - self.beta) * ops.mean(ops.abs(self.kernel), axis=0) \
            + self.beta * self.kernel

    def call(self, inputs):
        weights = self.ratios * self.interpolated_kernel()
        if self.units == 1:
            weights = ops.expand_dims(weights, -1)
        return ops.matmul(ops.cast(inputs, self.compute_dtype), weights) + self.bias

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.units)

    def get_config(self):
        config = super().get_config()
        config.update({"beta": self.beta, "l2": self.l2, "units": self.units})
        return config
